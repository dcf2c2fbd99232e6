"""A store answer that says the configuration is wrong is a ConfigError, whatever
``on_error`` says: a database the server does not have (``redis://host:port/99``: "DB index
is out of range"), credentials it refuses. It was a BackendUnavailable, so under
``on_error="allow"`` every hit was admitted without a word (found by a new user coming from
limits): a configuration that can never work is no outage to ride out. A store that is
down stays a BackendUnavailable (and fails open when asked to)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator

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
from tests import servers
from tests.servers import RedisServer, free_port

FAST = "socket_connect_timeout=0.5&socket_timeout=0.5"


def _hits(url: str, side: str, on_error: str) -> list[bool]:
    """Three hits through a guard on ``url`` with ``on_error``, sync or async: allowed each."""
    name = f"misconfigured-{uuid.uuid4().hex}"  # the session's server is shared
    policy = Policy(name, Rule("1/minute"), on_error=on_error)
    if side == "sync":
        guard = Guard(backend_from_url(url), [policy])
        try:
            return [guard.hit(name).allowed for _ in range(3)]
        finally:
            guard.close()

    async def main() -> list[bool]:
        aguard = AsyncGuard(async_backend_from_url(url), [policy])
        try:
            return [(await aguard.hit(name)).allowed for _ in range(3)]
        finally:
            await aguard.aclose()

    return asyncio.run(main())


@pytest.mark.parametrize("side", ["sync", "async"])
@pytest.mark.parametrize("on_error", ["raise", "allow", "deny"])
def test_a_database_the_server_lacks_is_a_config_error_whatever_on_error_says(
    redis_server: RedisServer, side: str, on_error: str
) -> None:
    url = f"redis://127.0.0.1:{redis_server.port}/99"
    with pytest.raises(ConfigError) as refused:
        _hits(url, side, on_error)
    text = str(refused.value)
    assert "/99" in text  # the URL's database part
    assert "database 99" in text
    assert "/0" in text  # the fix: a database it has
    assert "databases" in text  # or more of them
    assert isinstance(refused.value.__cause__, Exception)  # redis-py's error, kept


@pytest.fixture(scope="module")
def password_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with servers.standalone(tmp_path_factory.mktemp("auth"), "--requirepass", "s3cretpw") as s:
        yield s


@pytest.mark.parametrize("side", ["sync", "async"])
@pytest.mark.parametrize("credentials", ["", ":wrongpw@", "nobody:s3cretpw@"])
def test_credentials_the_store_refuses_are_a_config_error_under_allow(
    password_server: RedisServer, side: str, credentials: str
) -> None:
    """None (NOAUTH), a wrong password or user (WRONGPASS): a ConfigError naming the
    password's place in the URL, not a fail-open."""
    url = f"redis://{credentials}127.0.0.1:{password_server.port}/0"
    with pytest.raises(ConfigError, match="password"):
        _hits(url, side, "allow")


@pytest.mark.parametrize("side", ["sync", "async"])
def test_a_user_the_acl_refuses_the_scripts_is_a_config_error_under_allow(
    password_server: RedisServer, side: str
) -> None:
    """NOPERM for every call: the ACL refuses this user freqguard's commands."""
    admin = redis.Redis(port=password_server.port, password="s3cretpw")
    scripts = ["-fcall", "-fcall_ro", "-evalsha", "-evalsha_ro", "-eval", "-eval_ro"]
    admin.acl_setuser(
        "noscripts", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", *scripts]
    )
    url = f"redis://noscripts:pw@127.0.0.1:{password_server.port}/0"
    try:
        with pytest.raises(ConfigError, match="ACL refuses"):
            _hits(url, side, "allow")
    finally:
        admin.acl_deluser("noscripts")
        admin.close()


@pytest.mark.parametrize("side", ["sync", "async"])
def test_the_right_database_and_password_still_decide(
    redis_server: RedisServer, password_server: RedisServer, side: str
) -> None:
    assert _hits(f"redis://127.0.0.1:{redis_server.port}/15", side, "raise") == [True, False, False]
    url = f"redis://:s3cretpw@127.0.0.1:{password_server.port}/1"
    assert _hits(url, side, "raise") == [True, False, False]


@pytest.mark.parametrize("side", ["sync", "async"])
def test_a_store_that_is_down_is_still_an_outage(
    side: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing listens there: BackendUnavailable, and on_error="allow" admits (an outage
    is what it is for)."""
    url = f"redis://127.0.0.1:{free_port()}/99?{FAST}"
    with pytest.raises(BackendUnavailable):
        _hits(url, side, "raise")
    with caplog.at_level(logging.DEBUG):
        assert _hits(url, side, "allow") == [True, True, True]
