"""TLS on one side only: ``rediss://`` at a plain server times out in the handshake, and
``redis://`` at a TLS-only server is dropped as the connection is set up. Either failure
says so, and no other failure to connect does (refused, timed out before TLS began)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    ConfigError,
    Guard,
    Policy,
    Rule,
    async_backend_from_url,
    backend_from_url,
)
from freqguard.backends._boundary import PLAIN_AT_TLS, TLS_AT_PLAIN, mismatch
from tests import servers
from tests.servers import RedisServer, free_port

P = Policy("p", Rule("5/minute", by="u"))
FAST = "socket_connect_timeout=0.2&socket_timeout=0.2"  # each failure bounded
#: a call that must succeed, on a loaded machine too (a TLS handshake took over 0.2 s)
SURE = "socket_connect_timeout=10&socket_timeout=10"


def hit(url: str, side: str) -> None:
    """One hit through a backend made from ``url``, on the sync or the async side."""
    if side == "sync":
        guard = Guard(backend_from_url(url), [P])
        try:
            guard.hit("p", u="a")
        finally:
            guard.close()
        return

    async def main() -> None:
        guard = AsyncGuard(async_backend_from_url(url), [P])
        try:
            await guard.hit("p", u="a")
        finally:
            await guard.aclose()

    asyncio.run(main())


def failure(url: str, side: str) -> BackendUnavailable:
    with pytest.raises(BackendUnavailable) as caught:
        hit(url, side)
    return caught.value


SIDES = pytest.mark.parametrize("side", ["sync", "async"])


#: the handshake's own wait: long enough that a loaded machine's event loop, starved for
#: 0.2 s, does not time the TCP connect out before the handshake begins (1 in 600 did)
HANDSHAKE = "socket_connect_timeout=1&socket_timeout=1"


@pytest.mark.slow  # the handshake waits out its timeout, a second a side
@SIDES
def test_rediss_at_a_plain_server_says_tls(redis_server: RedisServer, side: str) -> None:
    error = failure(f"rediss://127.0.0.1:{redis_server.port}?{HANDSHAKE}", side)
    assert str(error).endswith(f"({TLS_AT_PLAIN})")
    assert "Timeout connecting to server" in str(error)
    assert error.sent is False  # it never got as far as a command


@SIDES
def test_a_refused_connection_has_no_tls_hint(side: str) -> None:
    dead = free_port()
    for scheme in ("redis", "rediss"):  # a refusal is at once: a timeout long enough that a
        # loaded machine never sees one in its place (which earns the TLS hint)
        error = str(failure(f"{scheme}://127.0.0.1:{dead}?{SURE}", side))
        assert "connecting to 127.0.0.1" in error
        assert "TLS" not in error


@pytest.fixture
def full_backlog() -> Iterator[int]:
    """A port whose listener never accepts and whose queue is full: a connect times out
    before TLS could begin (on loopback, no other host)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued: list[socket.socket] = []
    try:
        for _ in range(16):  # until the queue takes no more: that connect times out
            try:
                queued.append(socket.create_connection(("127.0.0.1", port), timeout=0.2))
            except TimeoutError:
                break
        else:
            pytest.fail("the listen queue never filled")
        yield port
    finally:
        for each in queued:
            each.close()
        listener.close()


@SIDES
def test_a_connect_timeout_before_tls_has_no_hint(full_backlog: int, side: str) -> None:
    error = str(failure(f"rediss://127.0.0.1:{full_backlog}?{FAST}", side))
    assert "Timeout connecting to server" in error
    assert "TLS" not in error


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A redis-server that listens with TLS only, on a self-signed certificate; its port."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificate for a TLS server")
    where: Path = tmp_path_factory.mktemp("tls")
    cert, key = str(where / "cert.pem"), str(where / "key.pem")
    request = "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1"
    subprocess.run(
        ["openssl", *request.split(), "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", cert],
        check=True,
        capture_output=True,
        timeout=30,
    )
    port = free_port()
    options = f"--port 0 --tls-port {port} --bind 127.0.0.1 --tls-auth-clients no"
    files = ["--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", cert]
    process = subprocess.Popen(
        ["redis-server", *options.split(), "--save", "", "--appendonly", "no", *files],
        cwd=where,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port, ssl=True, ssl_cert_reqs="none", socket_timeout=5)
    try:
        servers._wait(client.ping, f"a TLS redis-server on port {port}")
        yield port
    finally:
        client.close()
        process.terminate()
        process.wait(10)


@SIDES
def test_redis_at_a_tls_only_server_says_tls(tls_server: int, side: str) -> None:
    hit(f"rediss://127.0.0.1:{tls_server}?ssl_cert_reqs=none&{SURE}", side)  # it serves TLS
    # the server drops the plain connection at once; a longer connect timeout than FAST
    # keeps a loaded machine from timing the TCP connect out first
    error = failure(f"redis://127.0.0.1:{tls_server}?{HANDSHAKE}", side)
    assert str(error).endswith(f"({PLAIN_AT_TLS})")
    assert "ConnectionError" in str(error)  # redis-py's own words differ by release


def test_a_timeout_in_the_handshake_is_read_as_tls_at_a_plain_server() -> None:
    """What the slow test above sees on a real server, read from the error alone: a timeout
    raised in the TLS handshake (redis-py's ``do_handshake`` frame) gets the hint; one
    raised elsewhere, none."""

    def do_handshake() -> None:
        raise TimeoutError("timed out")

    def elsewhere() -> None:
        raise TimeoutError("timed out")

    for raising, hint in ((do_handshake, TLS_AT_PLAIN), (elsewhere, "")):
        with pytest.raises(TimeoutError) as caught:
            raising()
        assert mismatch(caught.value, None) == hint


@pytest.fixture(scope="module")
def password_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with servers.standalone(tmp_path_factory.mktemp("auth"), "--requirepass", "s3cretpw") as s:
        yield s


@pytest.mark.parametrize("side", ["sync", "async"])
def test_a_store_that_asks_for_a_password_refused_the_call_and_says_so(
    password_server: RedisServer, side: str
) -> None:
    """A store that needs a password and is given none refuses at the connection's setup,
    and the message says where the password goes. It was reported as a store that did not
    answer, whose call may have been applied (found by an operator's first hour); then as a
    BackendUnavailable, on which on_error="allow" failed open for good: it is a ConfigError
    (tests/backends/test_redis_misconfigured.py)."""
    url = f"redis://127.0.0.1:{password_server.port}/0"
    with pytest.raises(ConfigError, match="password"):
        hit(url, side)
