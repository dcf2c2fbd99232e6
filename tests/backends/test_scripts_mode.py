"""Stores without Redis Functions: the same policy function as EVALSHA scripts, chosen at the
first call when the store refuses FUNCTION (servers started with FUNCTION and FCALL renamed
away, as Redis 6.2, Dragonfly or a managed service would answer), or by ``scripts="eval"``
(``?scripts=eval``); deciding as the Functions do (the differential tests run both), and
loading its scripts again whenever a store lost them."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    ConfigError,
    Guard,
    ManualClock,
    Policy,
    Rule,
)
from freqguard.backends import _inspect, _library
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from freqguard.backends.urls import async_backend_from_url, backend_from_url
from tests.conftest import SMS, START, flush, flush_scripts
from tests.faults import owner, stopped
from tests.servers import RedisServer

#: redis-py before 8.0.1, whose async cluster client cannot spare a hung default node
OLD_ASYNC_CLUSTER = tuple(int(p) for p in redis.__version__.split(".")[:3]) < (8, 0, 1)


def _burst(guard: Guard) -> list[bool]:
    return [guard.hit("sms", recipient="a", content=f"m{i}").allowed for i in range(17)]


def test_a_store_without_functions_is_served_by_scripts_and_says_so(
    scripts_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    flush_scripts([scripts_server])
    _inspect.TOLD.clear()  # told once a process: once for this test
    backend = RedisBackend(Redis(port=scripts_server.port))
    guard = Guard(backend, [SMS], clock=ManualClock(START))
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        assert _burst(guard) == [True] * 15 + [False] * 2
        assert guard.peek("sms", recipient="a", content="m0").rules[0].remaining == 0
    assert caplog.text.count("does not run Redis Functions") == 1
    assert backend._ready.library is _library.SCRIPTS
    assert len(scripts_server.client.script_exists(*_library.SCRIPTS.names)) == 4
    guard.close()


def test_a_store_without_functions_is_told_of_once_a_process(
    scripts_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """However many backends reach it: sync, async, another made later."""
    flush_scripts([scripts_server])
    _inspect.TOLD.clear()
    url = f"redis://127.0.0.1:{scripts_server.port}"
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        for _ in range(2):
            guard = Guard(backend_from_url(url), [SMS], clock=ManualClock(START))
            guard.hit("sms", recipient="a", content="m")
            guard.close()

        async def main() -> None:
            aguard = AsyncGuard(async_backend_from_url(url), [SMS], clock=ManualClock(START))
            await aguard.hit("sms", recipient="a", content="m")
            await aguard.aclose()

        asyncio.run(main())
    assert caplog.text.count("does not run Redis Functions") == 1


@pytest.mark.parametrize("url_option", [True, False])
def test_scripts_are_chosen_on_a_store_with_functions_too(
    redis_server: RedisServer, url_option: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """``scripts="eval"``: the same decisions where Functions would serve, without a word."""
    flush([redis_server])
    if url_option:
        backend = backend_from_url(f"redis://127.0.0.1:{redis_server.port}?scripts=eval")
    else:
        backend = RedisBackend(Redis(port=redis_server.port), scripts="eval")
    guard = Guard(backend, [SMS], clock=ManualClock(START))
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        assert _burst(guard) == [True] * 15 + [False] * 2
    assert "Redis Functions" not in caplog.text
    assert redis_server.client.function_list() == []  # no library was loaded
    guard.close()


def test_scripts_flushed_mid_stream_are_loaded_again(scripts_server: RedisServer) -> None:
    flush_scripts([scripts_server])
    guard = Guard(RedisBackend(Redis(port=scripts_server.port)), [SMS], clock=ManualClock(START))
    decisions = []
    for i in range(40):
        if i % 7 == 3:
            scripts_server.client.script_flush()
        decisions.append(guard.hit("sms", recipient="b", content=f"m{i}").allowed)
        if i % 9 == 0:  # a batch too
            guard.hit_many("sms", [{"recipient": "c", "content": f"n{i}"}] * 3)
    assert decisions == [True] * 15 + [False] * 25
    guard.close()


def test_an_async_backend_and_a_cluster_are_served_by_scripts(
    scripts_server: RedisServer, scripts_cluster: list[RedisServer]
) -> None:
    flush_scripts([scripts_server, *scripts_cluster])

    async def main() -> list[list[bool]]:
        out = []
        for client in (
            AsyncRedis(port=scripts_server.port),
            AsyncRedisCluster(host="127.0.0.1", port=scripts_cluster[0].port),
        ):
            guard = AsyncGuard(AsyncRedisBackend(client), [SMS], clock=ManualClock(START))
            hits = [guard.hit("sms", recipient=f"r{i % 3}", content="x") for i in range(9)]
            out.append([d.allowed for d in await asyncio.gather(*hits)])
            await guard.aclose()
        return out

    # 2 per 59 seconds of one content: two a recipient of three
    assert [sorted(run) for run in asyncio.run(main())] == [[False] * 3 + [True] * 6] * 2
    client = RedisCluster(host="127.0.0.1", port=scripts_cluster[0].port)
    guard = Guard(RedisBackend(client), [SMS], clock=ManualClock(START))
    many = guard.hit_many("sms", [{"recipient": f"s{i}", "content": "y"} for i in range(30)])
    assert all(d.allowed for d in many)
    guard.close()


def test_functions_asked_of_a_store_without_them_fail_clearly(scripts_server: RedisServer) -> None:
    backend = RedisBackend(Redis(port=scripts_server.port), scripts="functions")
    guard = Guard(backend, [SMS], clock=ManualClock(START))
    with pytest.raises(BackendUnavailable, match="unknown command"):
        guard.hit("sms", recipient="a", content="x")
    guard.close()


@pytest.mark.parametrize("bad", ["lua", "", None, 1])
def test_a_bad_scripts_option_is_refused(redis_server: RedisServer, bad: object) -> None:
    with pytest.raises(ConfigError, match="scripts must be one of"):
        RedisBackend(Redis(port=redis_server.port), scripts=bad)  # type: ignore[arg-type]


@pytest.mark.slow  # a hung cluster node: timeouts
@pytest.mark.parametrize("functions", [True, False], ids=["functions", "scripts"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_cluster_asked_with_a_hung_node_is_told_by_the_next_primary(
    redis_cluster: list[RedisServer],
    scripts_cluster: list[RedisServer],
    functions: bool,
    flavour: str,
) -> None:
    """Which way calls go is asked of one node; when it hangs, of the next primary: the
    first calls to the other primaries decide (a regression: the probe failed them all)."""
    if flavour == "async" and OLD_ASYNC_CLUSTER:
        pytest.skip(
            "redis-py before 8.0.1: the async cluster client asks its default node for the "
            "command table whenever it learns the slots, so it fails every call while that "
            "node hangs (docs/redis.md, 'Which redis-py')"
        )
    nodes = redis_cluster if functions else scripts_cluster
    (flush if functions else flush_scripts)(nodes)
    probe = RedisCluster(host="127.0.0.1", port=nodes[0].port)
    hung = next(n for n in nodes if n.port == probe.get_default_node().port)  # type: ignore[no-untyped-call]
    probe.close()
    policy = Policy("p", Rule("3/day", by="r"))
    names = [f"r{n}" for n in range(40) if owner(nodes, policy, r=f"r{n}") is not hung][:5]
    expected = _library.FUNCTIONS if functions else _library.SCRIPTS
    other = next(n for n in nodes if n is not hung)
    timeouts = [n.client.config_get("cluster-node-timeout") for n in nodes]
    for node in nodes:  # not failed by the others while it hangs: the cluster stays up
        node.client.config_set("cluster-node-timeout", 120_000)
    if flavour == "sync":
        client = RedisCluster(host="127.0.0.1", port=other.port, socket_timeout=0.2)
        node = client.get_node("127.0.0.1", hung.port)  # type: ignore[no-untyped-call]
        assert client.set_default_node(node)  # type: ignore[no-untyped-call]
        sync = RedisBackend(client)
        guard = Guard(sync, [policy], clock=ManualClock(START))
        with stopped(hung):
            got = [guard.hit("p", r=r).source for r in names]
        library = sync._ready.library
        guard.close()
    else:

        async def main() -> tuple[list[str], _library.Library]:
            client = AsyncRedisCluster(host="127.0.0.1", port=other.port, socket_timeout=0.2)
            await client.initialize()  # the slots, learnt before the node hangs
            node = client.get_node("127.0.0.1", hung.port)
            assert node is not None
            client.set_default_node(node)
            backend = AsyncRedisBackend(client)
            guard = AsyncGuard(backend, [policy], clock=ManualClock(START))
            with stopped(hung):
                out = [(await guard.hit("p", r=r)).source for r in names]
            await guard.aclose()
            return out, backend._ready.library

        got, library = asyncio.run(main())
    for node, timeout in zip(nodes, timeouts, strict=True):
        node.client.config_set("cluster-node-timeout", str(timeout["cluster-node-timeout"]))
    assert got == ["backend"] * 5
    assert library is expected


def test_a_full_store_without_functions_refuses_every_write_and_loses_nothing(
    scripts_server: RedisServer,
) -> None:
    """Where scripts differ from Functions: on a full store (used memory past ``maxmemory``),
    peeks and refunds are refused with the hits (they write the states' times, which an EVAL
    script may not do on a full server; the Functions have an entry flagged allow-oom for
    them). Nothing is lost: a refund refused then goes through once memory is freed."""
    flush_scripts([scripts_server])
    guard = Guard(RedisBackend(Redis(port=scripts_server.port)), [SMS], clock=ManualClock(START))
    kept = guard.hit("sms", recipient="a", content="x")
    server = scripts_server.client
    used = int(server.info("memory")["used_memory"])
    server.config_set("maxmemory", used // 2)
    try:
        with pytest.raises(BackendUnavailable, match="OutOfMemoryError"):
            guard.hit("sms", recipient="newcomer", content="x")
        with pytest.raises(BackendUnavailable, match="OutOfMemoryError"):
            guard.refund(kept)
    finally:
        server.config_set("maxmemory", 0)
    assert guard.refund(kept).rules[0].remaining == 15
    assert guard.peek("sms", recipient="a", content="x").rules[0].remaining == 15
    guard.close()


def test_an_unbinned_script_leaves_the_bins_code_out_and_fails_loudly_if_it_needs_it(
    scripts_server: RedisServer,
) -> None:
    """The unbinned EVAL scripts declare ``lua/bins.lua``'s names and make none of its
    functions (``library.BINNED_ONLY``: a sixth of a call's server time on Redis 7); the
    binned ones hold it whole. A call that reached a bins function through an unbinned
    script would fail on a nil, never do nothing: a binned call (a CLAIM) sent to one
    shows it."""
    from freqguard.script import library
    from freqguard.script.contract import CLAIM

    policy, nogrow, binned, binned_nogrow = library.scripts()
    made = "local function bin_flush("
    assert made not in policy
    assert made not in nogrow
    assert made in binned
    assert made in binned_nogrow
    assert set(library.declared("lua/bins.lua")) >= {"bin_flush", "claim_bin", "blob_read"}
    flush_scripts([scripts_server])
    client = scripts_server.client
    sha = client.script_load(policy)
    argv = ["", "1", str(CLAIM), "0"]
    with pytest.raises(redis.ResponseError, match="claim_bin"):
        client.evalsha(sha, 1, "fg:{x}:p", *argv)
