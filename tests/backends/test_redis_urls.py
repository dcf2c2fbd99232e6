"""Redis URLs: every option is checked where the URL is given, never at the first call."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelConnectionPool
from redis.sentinel import SentinelConnectionPool

from freqguard import ConfigError, async_backend_from_url, backend_from_url
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from tests.servers import free_port

Make = Callable[[str], object]
MAKERS = [backend_from_url, async_backend_from_url]
SECONDS = "a number of seconds > 0 and <= 86400"


def _retries(retry: Any) -> int:
    """How many times a redis-py Retry retries (``get_retries`` from redis-py 6.0)."""
    found = getattr(retry, "get_retries", None)
    return int(found() if found is not None else retry._retries)


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
        ("wait_replica=1", "unknown option 'wait_replica' (did you mean 'wait_replicas'?)"),
        ("ssl_certfile=/x.pem", "'ssl_certfile' needs rediss://"),
    ],
)
def test_bad_url_options_are_refused_at_construction(
    make: Make, query: str, message: str, dead_port: int
) -> None:
    for url in (
        f"redis://127.0.0.1:{dead_port}/0?{query}",
        f"redis+cluster://127.0.0.1:{dead_port}?{query}",
        f"redis+sentinel://127.0.0.1:{dead_port}/svc?{query}",
    ):
        with pytest.raises(ConfigError, match=re.escape(message)) as caught:
            make(url)
        assert re.search(r"redis(\+cluster|\+sentinel)?://", str(caught.value))


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
        ("redis+sentinel://127.0.0.1:26379", "no service name in"),
        ("redis+sentinel://127.0.0.1:26379/", "no service name in"),
        ("redis+sentinel://127.0.0.1:26379?db=1", "no service name in"),
        ("redis+sentinel://h:26379,h:99999/svc", "port must be an integer >= 1 and <= 65535"),
        ("redis+sentinel://h:26379,h:/svc", "port must be an integer >= 1 and <= 65535, got ''"),
        ("redis+sentinel://h:26379,,h:2/svc", "a sentinel's address must be host:port"),
        ("redis+sentinel://h:1:2/svc", "port must be an integer >= 1 and <= 65535, got '1:2'"),
        ("redis+sentinel://h:1/svc/abc", "after the service name comes the database number"),
        ("redis+sentinel://h:1/svc/1/2", "got '/1/2'"),
        ("redis+sentinel://h:1/svc/-1", "got '/-1'"),
        ("redis+sentinel://h:1/svc/" + "1" * 5000, "db must be an integer >= 0"),
        ("redis+sentinel://h:1/svc/1?db=2", "db is given twice"),
        ("redis+sentinel://h:1/my%20svc", "a service name is 1-256 characters without spaces"),
        ("redis+sentinel://u:pw@h:1/svc?password=x", "password is given twice"),
        ("redis+sentinel://h:1/svc?ssl_certfile=/x.pem", "'ssl_certfile' needs rediss://"),
        ("redis+sentinel://h:1/svc?sentinel_port=1", "unknown option 'sentinel_port'"),
        ("redis+sentinel://h:1/svc?min_other_sentinels=-1", "min_other_sentinels must be"),
        ("redis://h:1?sentinel_password=x", "'sentinel_password' needs a redis+sentinel:// URL"),
        ("redis+cluster://h:1?min_other_sentinels=1", "needs a redis+sentinel:// URL"),
        ("sentinel://h:1/svc", "unsupported backend URL scheme 'sentinel'"),
        # limits' forms (storage_from_string) name the one to write here
        ("redis+unix:///tmp/r.sock", "limits' redis+unix:// is unix:// here"),
        ("async+redis://h:1", "limits' async+redis:// is redis:// here (async_backend_from_url"),
        ("valkey://h:1", "a Valkey server speaks Redis's protocol: redis:// here"),
        ("async+valkeys://h:1", "a Valkey server speaks Redis's protocol: rediss:// here"),
        ("memcached://h:1", "unsupported backend URL scheme 'memcached'"),
        ("valkey+unix:///tmp/v.sock", "Redis's protocol: unix:// here; use"),
        ("async+valkey://h:1", "redis:// here (async_backend_from_url for an AsyncGuard)"),
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


@pytest.mark.parametrize("typo", ["pasword", "passwrd", "PASSWORD"])
def test_a_misspelt_password_option_is_never_printed(typo: str) -> None:
    """An unknown option named like a password is masked as a password is: a typo of
    ``password`` is where its value needs it most (found by an operator's first hour)."""
    with pytest.raises(ConfigError) as caught:
        backend_from_url(f"redis://127.0.0.1:6379/0?{typo}=s3cretpw&socket_timeout=1")
    message = str(caught.value)
    assert "s3cretpw" not in message
    assert f"unknown option {typo!r}" in message


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


def test_sentinel_passwords_stay_out_of_messages() -> None:
    with pytest.raises(ConfigError) as caught:
        backend_from_url("redis+sentinel://:s3cret@h:1/svc?sentinel_password=s3cret&db=x")
    assert "s3cret" not in str(caught.value)
    assert "redis+sentinel://:***@h:1/svc?sentinel_password=***&db=x" in str(caught.value)


def test_a_sentinel_url_makes_a_client_that_asks_the_sentinels(dead_port: int) -> None:
    url = (
        f"redis+sentinel://app:pw@127.0.0.1:{dead_port},[::1]:{dead_port},localhost/orders/2"
        "?socket_timeout=2&sentinel_username=watch&sentinel_password=spw&min_other_sentinels=1"
        "&client_name=fg"
    )
    backend = backend_from_url(url)  # no I/O yet: the sentinels are asked at the first call
    assert isinstance(backend, RedisBackend)
    assert isinstance(backend.client, Redis)
    pool = backend.client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "orders"
    kwargs = pool.connection_kwargs
    assert (kwargs["db"], kwargs["username"], kwargs["password"]) == (2, "app", "pw")
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (2.0, 0.5)
    assert kwargs["client_name"] == "fg"
    assert _retries(kwargs["retry"]) == 0  # a hit sent again could count twice
    manager = pool.sentinel_manager
    assert manager.min_other_sentinels == 1
    addresses = [s.connection_pool.connection_kwargs for s in manager.sentinels]
    assert [(a["host"], a["port"]) for a in addresses] == [
        ("127.0.0.1", dead_port),
        ("::1", dead_port),
        ("localhost", 26379),
    ]
    own = addresses[0]  # the sentinels' credentials are their own; the timeouts are shared
    assert (own["username"], own["password"], own["db"]) == ("watch", "spw", 0)
    assert (own["socket_timeout"], own["socket_connect_timeout"]) == (2.0, 0.5)
    assert _retries(own["retry"]) == 0
    backend.close()


def test_the_async_twin_reads_a_sentinel_url_alike(dead_port: int) -> None:
    url = f"rediss+sentinel://127.0.0.1:{dead_port}/orders?db=1&ssl_cert_reqs=none"
    backend = async_backend_from_url(url)
    assert isinstance(backend, AsyncRedisBackend)
    assert isinstance(backend.client, AsyncRedis)
    pool = backend.client.connection_pool
    assert isinstance(pool, AsyncSentinelConnectionPool)
    assert (pool.service_name, pool.connection_kwargs["db"]) == ("orders", 1)
    assert pool.connection_class.__name__ == "SentinelManagedSSLConnection"  # TLS to the master
    own = pool.sentinel_manager.sentinels[0].connection_pool
    assert own.connection_class.__name__ == "SSLConnection"  # and to the sentinels
    assert own.connection_kwargs["ssl_cert_reqs"] == "none"
    asyncio.run(backend.aclose())


def test_a_scheme_limits_does_not_have_is_not_called_theirs() -> None:
    with pytest.raises(ConfigError) as refused:
        backend_from_url("async+unix:///tmp/r.sock")
    assert "limits'" not in str(refused.value)
