"""Redis URLs: every option is checked where the URL is given, never at the first call."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from redis import Redis

from freqguard import ConfigError, async_backend_from_url, backend_from_url
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from tests.servers import free_port

Make = Callable[[str], object]
MAKERS = [backend_from_url, async_backend_from_url]
SECONDS = "a number of seconds > 0 and <= 86400"


@pytest.fixture(scope="module")
def dead_port() -> int:
    """A port nothing listens on: a URL that gets past its checks would try to connect."""
    return free_port()


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("socket_timeout=-1", f"socket_timeout must be {SECONDS}, got '-1'"),
        ("socket_timeout=0", f"socket_timeout must be {SECONDS}, got '0'"),
        ("socket_timeout=nan", "got 'nan'"),
        ("socket_timeout=inf", "got 'inf'"),
        ("socket_timeout=1e400", "got '1e400'"),
        ("socket_timeout=100000", "got '100000'"),
        ("socket_timeout=abc", "got 'abc'"),
        ("socket_timeout=", "got ''"),
        ("socket_connect_timeout=0", f"socket_connect_timeout must be {SECONDS}"),
        ("max_connections=0", "max_connections must be an integer >= 1 and <= 2147483647"),
        ("max_connections=1.5", "got '1.5'"),
        ("max_connections=" + "9" * 5000, "got '99999999999999999999...'"),
        ("socket_read_size=0", "socket_read_size must be an integer >= 1"),
        ("health_check_interval=-1", "health_check_interval must be an integer >= 0"),
        ("db=-1", "db must be an integer >= 0"),
        ("protocol=4", "protocol must be an integer >= 2 and <= 3, got '4'"),
        ("socket_keepalive=maybe", "socket_keepalive must be one of"),
        ("socket_timeout=1&socket_timeout=2", "socket_timeout is given twice"),
        ("timeout=1", "unknown option 'timeout'"),
        ("foo=1", "unknown option 'foo'"),
        ("ssl_certfile=/x.pem", "'ssl_certfile' needs rediss://"),
    ],
)
def test_bad_url_options_are_refused_at_construction(
    make: Make, query: str, message: str, dead_port: int
) -> None:
    for url in (
        f"redis://127.0.0.1:{dead_port}/0?{query}",
        f"redis+cluster://127.0.0.1:{dead_port}?{query}",
    ):
        with pytest.raises(ConfigError, match=re.escape(message)) as caught:
            make(url)
        assert "redis://" in str(caught.value) or "redis+cluster://" in str(caught.value)


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://127.0.0.1:99999", "port must be an integer >= 1 and <= 65535, got '99999'"),
        ("redis://127.0.0.1:0", "got '0'"),
        ("redis://127.0.0.1:63x79", "got '63x79'"),
        ("redis://127.0.0.1:" + "1" * 5000, "got '11111111111111111111...'"),
        ("redis://127.0.0.1:6379/abc", "the path of a redis:// URL is the database number"),
        ("redis://127.0.0.1:6379/1/2", "got '/1/2'"),
        ("redis://127.0.0.1:6379/" + "1" * 5000, "db must be an integer >= 0"),
        ("redis://127.0.0.1:6379/1?db=2", "db is given twice"),
        ("redis+cluster://127.0.0.1:6379/1", "a Redis Cluster has only db 0, got 1"),
        ("redis+cluster://127.0.0.1:6379?db=3", "a Redis Cluster has only db 0, got 3"),
        ("unix:///tmp/redis.sock?socket_keepalive=1", "'socket_keepalive' needs a TCP"),
    ],
)
def test_bad_url_addresses_are_refused_at_construction(make: Make, url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        make(url)


def test_passwords_stay_out_of_messages() -> None:
    with pytest.raises(ConfigError) as caught:
        backend_from_url("redis://user:s3cret@127.0.0.1:6379?socket_timeout=0")
    assert "s3cret" not in str(caught.value)
    assert "redis://user:***@127.0.0.1:6379" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        backend_from_url("rediss://h:1?password=s3cret&ssl_password=s3cret&socket_timeout=0")
    assert "s3cret" not in str(caught.value)
    assert "?password=***&ssl_password=***&socket_timeout=0" in str(caught.value)


def test_good_options_reach_the_client(dead_port: int) -> None:
    url = (
        f"redis://127.0.0.1:{dead_port}/3?socket_timeout=2.5&socket_connect_timeout=.25"
        "&max_connections=10&health_check_interval=0&protocol=3&socket_keepalive=yes"
        "&client_name=fg"
    )
    backend = backend_from_url(url)
    assert isinstance(backend, RedisBackend)
    assert isinstance(backend.client, Redis)
    pool = backend.client.connection_pool
    options = pool.connection_kwargs
    assert (options["db"], options["socket_timeout"], options["socket_connect_timeout"]) == (
        3,
        2.5,
        0.25,
    )
    assert (pool.max_connections, options["protocol"], options["client_name"]) == (10, 3, "fg")
    assert isinstance(async_backend_from_url(url), AsyncRedisBackend)
    default = backend_from_url(f"redis://127.0.0.1:{dead_port}")
    assert isinstance(default, RedisBackend)
    assert isinstance(default.client, Redis)
    kwargs = default.client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == 0.5  # fail fast unless told
