"""The ``bins`` option: checked where it is given (a number, a URL, the old name
``buckets`` refused), kept where a guard builds a plan of its own (a fallback backend, an
async face), a ``unix://`` URL left whole around it, and the server's listpack limits a
bin needs warned of, on a Cluster's nodes too. The rig: ``tests/backends/bin_rig.py``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import warnings
from typing import Any

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from freqguard import ConfigError, Guard, Policy, Rule
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from freqguard.backends.urls import backend_from_url
from freqguard.failure import Fallback
from tests.backends.bin_rig import P
from tests.conftest import flush
from tests.servers import RedisServer, state_keys


@pytest.mark.parametrize("bad", [-1, 2**32 + 1, True, 1.5, "8", None])
def test_a_bad_number_of_bins_is_refused(bad: object) -> None:
    with pytest.raises(ConfigError, match="bins must be an integer from 1 to 4294967296"):
        RedisBackend(Redis(), bins=bad)  # type: ignore[arg-type]


def test_bins_from_a_url() -> None:
    backend = backend_from_url("redis://127.0.0.1:1/?bins=65536")
    assert isinstance(backend, RedisBackend)
    assert backend.bins == 65536
    with pytest.raises(ConfigError, match="bins must be an integer >= 1"):
        backend_from_url("redis://127.0.0.1:1/?bins=0")


def test_the_old_name_buckets_is_refused_naming_bins() -> None:
    """The option was ``buckets`` before its release: that spelling is an error that names
    ``bins``, never a silent hash per record (which would count apart from binned clients)."""
    client = Redis()
    with pytest.raises(TypeError, match=r"RedisBackend\(\) has no option 'buckets'.*'bins'"):
        RedisBackend(client, buckets=8)  # type: ignore[arg-type]
    async_client = AsyncRedis()
    with pytest.raises(TypeError, match=r"AsyncRedisBackend\(\) has no option 'buckets'"):
        AsyncRedisBackend(async_client, buckets=8)  # type: ignore[arg-type]
    asyncio.run(async_client.aclose())
    with pytest.raises(TypeError, match="unexpected keyword argument 'bin'"):
        RedisBackend(client, bin=8)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"'buckets': it is called 'bins' now \(\?bins=8\)"):
        backend_from_url("redis://127.0.0.1:1/?buckets=8")
    client.close()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "freqguard" and r.levelno == logging.WARNING
    ]


def test_listpack_limits_too_low_for_bins_are_warned_of(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A bin past the server's listpack limits becomes a hashtable: exact, but several
    times the bytes; the backend says so before its first call, naming each limit."""
    flush([redis_server])
    caplog.set_level(logging.WARNING, logger="freqguard")
    client = redis_server.client
    client.config_set("hash-max-listpack-value", 64)
    client.config_set("hash-max-listpack-entries", 128)
    try:
        guard = Guard(backend_from_url(redis_server.url + "?bins=8"), [P])
        assert guard.hit("p", u="a").allowed
        guard.close()
        (message,) = _warnings(caplog)
        assert "hash-max-listpack-value 64" in message
        assert "hash-max-listpack-entries 128" in message
        caplog.clear()
        client.config_set("hash-max-listpack-value", 4096)
        client.config_set("hash-max-listpack-entries", 256)
        guard = Guard(backend_from_url(redis_server.url + "?bins=8"), [P])
        assert guard.hit("p", u="a").allowed
        guard.close()
        client.config_set("hash-max-listpack-value", 64)
        # no bins (under a prefix of its own: one prefix takes one setting): no warning
        guard = Guard(backend_from_url(redis_server.url), [P], prefix="other")
        assert guard.hit("p", u="b").allowed
        guard.close()
        assert _warnings(caplog) == []
    finally:
        client.config_set("hash-max-listpack-value", 64)
        client.config_set("hash-max-listpack-entries", 128)


def test_a_cluster_node_with_low_listpack_limits_is_named(
    redis_cluster: list[RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    flush(redis_cluster)
    caplog.set_level(logging.WARNING, logger="freqguard")
    for node in redis_cluster:
        node.client.config_set("hash-max-listpack-value", 4096)
        node.client.config_set("hash-max-listpack-entries", 256)
    low = redis_cluster[1]
    low.client.config_set("hash-max-listpack-value", 512)
    try:
        url = f"redis+cluster://127.0.0.1:{redis_cluster[0].port}?bins=64"
        guard = Guard(backend_from_url(url), [P])
        guard.hit_many("p", [{"u": f"r{n}"} for n in range(20)])
        guard.close()
    finally:
        for node in redis_cluster:
            node.client.config_set("hash-max-listpack-value", 64)
            node.client.config_set("hash-max-listpack-entries", 128)
        # redis-py's cluster client can leave a node connection of the first call's
        # CONFIG GET unclosed (as tests/backends/test_redis_cluster_errors.py notes):
        # collected here rather than in whichever test runs next
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
    (message,) = _warnings(caplog)
    assert f"127.0.0.1:{low.port} has hash-max-listpack-value 512" in message
    assert f"127.0.0.1:{redis_cluster[0].port}" not in message


# -- found by review ------------------------------------------------------------------------


@pytest.mark.slow  # ~4 s: the dead primary's connect timeouts
def test_a_binned_fallback_backend_keeps_its_bins(redis_server: RedisServer, db1: Any) -> None:
    """Found by review: the fallback's plan (its limits shared out) was built without the
    fallback backend's bins, so it wrote a hash per record beside them."""
    flush([redis_server])
    dead = RedisBackend(Redis(port=1, socket_connect_timeout=0.2, socket_timeout=0.2))
    spare = RedisBackend(Redis(port=redis_server.port, db=1), bins=4)
    guard = Guard(dead, [P], on_error=Fallback(spare, workers=1))
    assert guard.hit("p", u="a").allowed
    assert state_keys(db1)
    assert all(key.startswith(b"fg:{#") for key in state_keys(db1))
    guard.close()
    spare.close()  # the guard closes its own backend, never its fallback's


def test_freqguards_own_options_leave_a_unix_url_whole(tmp_path: Any) -> None:
    """Found by review: taking ``bins`` (or ``wait_replicas``) out of a ``unix://`` URL
    wrote it back as ``unix:/path``, which redis-py refuses."""
    backend = backend_from_url(f"unix://{tmp_path}/redis.sock?bins=8&socket_timeout=1")
    assert isinstance(backend, RedisBackend)
    assert backend.bins == 8
    assert isinstance(backend.client, Redis)
    kwargs = backend.client.connection_pool.connection_kwargs
    assert kwargs["path"] == f"{tmp_path}/redis.sock"
    assert kwargs["socket_timeout"] == 1.0
    backend.close()


# -- found by the second review -------------------------------------------------------------


def test_an_async_face_of_a_binned_guard_builds_binned_keys(
    redis_server: RedisServer, db1: Any
) -> None:
    """``as_async`` (ThreadedBackend) did not pass the backend's bins on: policies added
    through it kept a hash each."""
    from freqguard.decorators.adapters import as_async

    flush([redis_server])
    guard = Guard(RedisBackend(Redis(port=redis_server.port, db=1), bins=4), [P])
    face = as_async(guard)
    face.add_policy(Policy("q", Rule("2 per 1 second", by="u")))
    asyncio.run(face.hit("q", u="a"))
    assert state_keys(db1)
    assert all(key.startswith(b"fg:{#") for key in state_keys(db1))
    guard.close()
