"""The service on the wire: TCP_NODELAY on every accepted connection from the socket
``serve`` binds itself, the loop and parser ``serve`` picks (and says), ``/readyz``, and a request
in flight finishing through SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from freqguard import AsyncGuard, ManualClock, MemoryBackend
from freqguard.config import loads
from freqguard.errors import ConfigError
from freqguard.failure import Breaker
from freqguard.service import create_app
from freqguard.service.server import listener as server_listener
from freqguard.service.server import pick
from tests.conftest import flush
from tests.faults import stopped
from tests.integrations.service_process import SMS, refused, serving, sms_config
from tests.servers import RedisServer, free_port

pytestmark = pytest.mark.slow  # real freqguard serve processes over TCP

FAST = find_spec("uvloop") is not None and find_spec("httptools") is not None


def _recording(base: type[asyncio.Protocol], seen: list[int]) -> type[asyncio.Protocol]:
    """``base`` (a test's instrument only), noting each accepted socket's TCP_NODELAY once
    the connection is made."""

    class Recording(base):  # type: ignore[valid-type,misc]
        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    return Recording


def _protocol(parser: str) -> type[asyncio.Protocol]:
    if parser == "h11":
        return H11Protocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    return HttpToolsProtocol


def _accepted_nodelay(parser: str, loop: str, *, ours: bool) -> int:
    """Serve one request with uvicorn on a listener bound as ``serve`` binds it (``ours``)
    or as uvicorn's supervisor binds it for ``--workers N`` (``Config.bind_socket``), and
    say whether the accepted socket had TCP_NODELAY."""
    seen: list[int] = []
    if loop == "asyncio":  # uvicorn before 0.30 leaves uvloop's policy set by an earlier test
        asyncio.set_event_loop_policy(None)
    app = create_app(AsyncGuard(MemoryBackend(), []))
    http = _recording(_protocol(parser), seen)
    if ours:
        listener = server_listener("127.0.0.1", 0)
        config = uvicorn.Config(app, fd=listener.fileno(), loop=loop, http=http, log_level="error")
        sockets = None  # handed to uvicorn as serve hands it: by its descriptor
    else:
        config = uvicorn.Config(app, port=free_port(), loop=loop, http=http, log_level="error")
        listener = config.bind_socket()
        sockets = [listener]
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": sockets})
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)  # bounded polling for the server to start
        port = listener.getsockname()[1]
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        listener.close()
    assert len(seen) == 1
    return seen[0]


def test_the_listener_uvicorn_hands_to_workers_is_not_marked_tcp() -> None:
    """The cause: asyncio sets TCP_NODELAY only where ``sock.proto`` is IPPROTO_TCP, and
    the socket uvicorn binds for its workers carries 0."""
    config = uvicorn.Config(create_app(AsyncGuard(MemoryBackend(), [])), port=free_port())
    listener = config.bind_socket()
    try:
        assert listener.proto == 0
    finally:
        listener.close()


def test_asyncio_leaves_nagle_on_for_such_a_listener() -> None:
    assert _accepted_nodelay("h11", "asyncio", ours=False) == 0


def test_a_socket_accepted_from_serve_s_listener_has_nagle_off() -> None:
    """Linux hands an accepted socket its listener's TCP_NODELAY: set once, on the
    listener, it holds for every connection of every worker."""
    listener = server_listener("127.0.0.1", 0)
    listener.listen()
    try:
        with socket.create_connection(listener.getsockname(), timeout=10):
            accepted, _ = listener.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        listener.close()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("parser", ["h11", "httptools"])
def test_uvicorn_on_serve_s_listener_has_nagle_off_on_every_accepted_socket(
    loop: str, parser: str
) -> None:
    if find_spec(loop if loop == "uvloop" else "asyncio") is None or find_spec(parser) is None:
        pytest.skip(f"{loop} or {parser} is not installed")
    assert _accepted_nodelay(parser, loop, ours=True) != 0


def test_a_taken_address_is_a_config_error() -> None:
    taken = server_listener("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        taken.listen()
        with pytest.raises(ConfigError, match=f"cannot serve on 127.0.0.1:{port}"):
            server_listener("127.0.0.1", port)
    finally:
        taken.close()


def test_pick_takes_the_fast_ones_when_installed_and_refuses_unknown_names() -> None:
    wire = pick()
    if FAST:
        assert (wire.loop, wire.parser) == ("uvloop", "httptools")
    assert (pick("asyncio", "h11").loop, pick("asyncio", "h11").parser) == ("asyncio", "h11")
    with pytest.raises(ConfigError, match="loop must be one of auto, uvloop, asyncio, got 'trio'"):
        pick("trio")


# -- /readyz --------------------------------------------------------------------------------


def _get(guard: AsyncGuard, *paths: str) -> list[httpx.Response]:
    """``paths`` asked of the app on ``guard``, which is closed after, in the same loop."""

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=create_app(guard))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                return [await http.get(path) for path in paths]
        finally:
            await guard.aclose()

    return asyncio.run(run())


def test_readyz_is_200_while_the_store_answers_and_counts_nothing(
    redis_server: RedisServer,
) -> None:
    flush([redis_server])
    guard = loads(f'backend = "redis://127.0.0.1:{redis_server.port}"\n{SMS}').async_guard()
    answers = _get(guard, "/readyz", "/readyz")
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].json() == {"status": "ready", "store": type(guard.backend).__name__}
    # a peek writes nothing: no count kept, and no bins setting recorded (a call that only
    # reads compares with one recorded, and records none)
    assert redis_server.client.keys("*") == []


def test_readyz_is_a_503_problem_when_the_store_is_gone() -> None:
    guard = loads(f'backend = "redis://127.0.0.1:{free_port()}"\n{SMS}').async_guard()
    answer, health = _get(guard, "/readyz", "/healthz")
    assert answer.status_code == 503
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["detail"] == (
        "not ready: the store could not be reached or refused the probe"
    )
    assert health.status_code == 200  # up, not ready: a balancer keeps it, sends it nothing


def test_readyz_is_a_503_while_the_breaker_holds_the_store_off() -> None:
    """An operator's first hour: after a store's outage, /readyz said ready while every hit
    was a 503 ("the circuit is open"): the probe has no breaker, the hits have. Ready
    means the decisions are the store's: not while the circuit is open and waiting (its
    probe due later), with Retry-After; ready again once the probe is due."""
    clock = ManualClock(1_700_000_000)
    breaker = Breaker(failures=2, cooldown=5.0, clock=clock.now)
    guard = AsyncGuard(MemoryBackend(clock), loads(SMS).policies, clock=clock, breaker=breaker)
    breaker.failed(None, ConnectionError("refused"))
    breaker.failed(None, ConnectionError("refused"))
    clock.advance(1.5)
    answer, health = _get(guard, "/readyz", "/healthz")
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "4"
    assert "circuit is open" in answer.json()["detail"]
    assert health.status_code == 200
    clock.advance(3.5)  # the probe is due: a hit now goes to the store
    guard = AsyncGuard(MemoryBackend(clock), loads(SMS).policies, clock=clock, breaker=breaker)
    assert _get(guard, "/readyz")[0].status_code == 200


def test_readyz_says_a_store_that_does_not_answer_in_time(redis_server: RedisServer) -> None:
    """A stopped store (SIGSTOP): the client's own timeout came first and the answer said
    "could not be reached or refused the probe"; it did not answer in time."""
    url = f"redis://127.0.0.1:{redis_server.port}?socket_timeout=0.2"
    guard = loads(f'backend = "{url}"\n{SMS}').async_guard()
    with stopped(redis_server):
        answer = _get(guard, "/readyz")[0]
    assert answer.status_code == 503
    assert answer.json()["detail"].startswith("not ready: the store did not answer in time")


# -- serve: what runs, and a graceful stop ----------------------------------------------------


@pytest.mark.skipif(not FAST, reason="uvloop or httptools is not installed")
def test_serve_says_which_loop_and_parser_run(tmp_path: Path, redis_server: RedisServer) -> None:
    config = sms_config(tmp_path, redis_server.port)
    with serving(config, "--workers", "2") as fast:
        assert "(2 workers, loop uvloop, parser httptools, no token)" in fast.log()
    with serving(config, "--loop", "asyncio", "--http", "h11") as plain:
        assert "(1 worker, loop asyncio, parser h11, no token)" in plain.log()


def _paused_calls(redis_server: RedisServer) -> int:
    """Calls of a function the store holds back (CLIENT PAUSE): flag ``b``."""
    clients = redis_server.client.client_list()
    return sum(1 for c in clients if c.get("cmd") == "fcall" and "b" in c.get("flags", ""))


def _until(condition: Any, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # bounded polling for a real process to get there
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.02)


def test_a_hit_in_flight_during_sigterm_finishes(tmp_path: Path, redis_server: RedisServer) -> None:
    """SIGTERM while the store holds a hit back: the service stops taking connections,
    the hit gets its decision once the store answers, and only then the process ends."""
    flush([redis_server])
    hit = {"context": {"recipient": "inflight", "content": "x"}}
    answers: list[httpx.Response] = []
    with serving(sms_config(tmp_path, redis_server.port), "--shutdown-timeout", "30") as svc:
        url = f"{svc.url}/v1/policies/sms/hit"
        assert httpx.post(url, json=hit, timeout=10).status_code == 200  # functions loaded
        redis_server.client.client_pause(30_000, all=False)  # writes (FCALL) held back
        try:
            sender = threading.Thread(
                target=lambda: answers.append(httpx.post(url, json=hit, timeout=60))
            )
            sender.start()
            _until(lambda: _paused_calls(redis_server) == 1, "the hit reached the store")
            os.killpg(svc.process.pid, signal.SIGTERM)
            _until(lambda: _refused(svc.url), "the service stopped taking connections")
            assert svc.process.poll() is None  # still finishing the hit in flight
        finally:
            redis_server.client.client_unpause()
        sender.join(timeout=60)
        # uvicorn (0.29 on) ends by raising the signal it caught again, once done
        assert svc.process.wait(timeout=60) in (0, -signal.SIGTERM)
    assert [a.status_code for a in answers] == [200]
    assert answers[0].json()["allowed"] is True


def _refused(url: str) -> bool:
    try:
        httpx.get(f"{url}/healthz", timeout=1)
    except httpx.ConnectError:
        return True
    except httpx.HTTPError:
        return False
    return False


def test_serve_refuses_a_loop_it_does_not_know(tmp_path: Path) -> None:
    said = refused(tmp_path, "--loop", "trio")
    assert "loop must be one of auto, uvloop, asyncio, got 'trio'" in said
