"""Clients of one prefix must keep a policy's records one way: in a hash each, or shared in
the same number of bins. Two settings would count apart, each client up to the cap (3-4
times it between them), so a client whose setting differs from the one the store's clients
already use is refused at its first call of the policy, writing nothing, with an error that
names both settings; on a standalone server and a Cluster, sync and async."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.cluster import RedisCluster

from freqguard import AsyncGuard, ConfigError, Guard, ManualClock, Policy, Rule
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from freqguard.script.keys import raw_digest
from tests import servers
from tests.conftest import START, flush, flush_scripts
from tests.faults import kill, restart
from tests.servers import RedisServer, state_keys

P = Policy("p", Rule("2/minute", by="r", name="m"))


def _guard(client: Redis | RedisCluster, bins: int) -> Guard:
    return Guard(RedisBackend(client, bins=bins), [P], clock=ManualClock(START))


@pytest.mark.parametrize(("first", "second"), [(0, 4), (4, 0), (4, 16), (1, 2)])
def test_a_client_with_another_bins_setting_is_refused_and_writes_nothing(
    redis_server: RedisServer, first: int, second: int
) -> None:
    flush([redis_server])
    _refused(redis_server, first, second)


@pytest.mark.parametrize(("first", "second"), [(0, 4), (4, 0), (4, 16)])
def test_redis_6_2_refuses_another_bins_setting_alike(
    redis62_server: RedisServer, first: int, second: int
) -> None:
    # its scripts' errors are text, not Redis 7's error tables: found by their words alike
    flush_scripts([redis62_server])
    _refused(redis62_server, first, second)


def _refused(redis_server: RedisServer, first: int, second: int) -> None:
    one = _guard(Redis(port=redis_server.port), first)
    assert [one.hit("p", r=f"u{i}").allowed for i in range(3)] == [True] * 3
    keys = sorted(state_keys(redis_server.client))
    other = _guard(Redis(port=redis_server.port), second)
    for _ in range(2):  # refused every time, not only the first
        with pytest.raises(ConfigError) as refused:
            other.hit("p", r="u0")
        assert f"bins={first}" in str(refused.value)
        assert f"bins={second}" in str(refused.value)
        assert "'p'" in str(refused.value)
    assert sorted(state_keys(redis_server.client)) == keys
    assert one.hit("p", r="u0").allowed  # the first setting goes on
    assert not one.hit("p", r="u0").allowed
    with pytest.raises(ConfigError):
        other.peek("p", r="u0")
    with pytest.raises(ConfigError):
        other.hit_many("p", [{"r": "u0"}, {"r": "u1"}])
    one.close()
    other.close()


def test_the_same_setting_is_shared_and_a_cluster_refuses_another(
    redis_cluster: list[RedisServer],
) -> None:
    flush(redis_cluster)
    port = redis_cluster[0].port
    one, same = (_guard(RedisCluster(host="127.0.0.1", port=port), 8) for _ in range(2))
    assert [one.hit("p", r="a").allowed, same.hit("p", r="a").allowed] == [True, True]
    assert not one.hit("p", r="a").allowed  # one count between them
    other = _guard(RedisCluster(host="127.0.0.1", port=port), 0)
    with pytest.raises(ConfigError, match="bins=8"):
        other.hit("p", r="b")
    for guard in (one, same, other):
        guard.close()


def test_an_async_client_with_another_setting_is_refused(redis_server: RedisServer) -> None:
    flush([redis_server])
    _guard(Redis(port=redis_server.port), 0).hit("p", r="a")

    async def other() -> None:
        backend = AsyncRedisBackend(AsyncRedis(port=redis_server.port), bins=4)
        guard = AsyncGuard(backend, [P], clock=ManualClock(START))
        try:
            with pytest.raises(ConfigError, match=r"bins=0.*bins=4"):
                await guard.hit("p", r="a")
        finally:
            await guard.aclose()

    asyncio.run(other())


def test_a_server_that_refuses_the_check_is_still_decided_on_and_says_so(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """An ACL that allows FCALL but not SET or GET: the check cannot be made, which is
    logged once; the calls go on."""
    flush([redis_server])
    admin = redis_server.client
    admin.acl_setuser(
        "nosets", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-set", "-get"]
    )
    try:
        client = Redis(port=redis_server.port, username="nosets", password="pw")
        guard = _guard(client, 4)
        with caplog.at_level("WARNING", logger="freqguard"):
            assert [guard.hit("p", r="a").allowed for _ in range(3)] == [True, True, False]
        assert caplog.text.count("cannot check that every client keeps") == 1
        guard.close()
    finally:
        admin.acl_deluser("nosets")


THREE = Policy("p", Rule("3/minute", by="r", name="m"))


# a recipient whose record is in bin k of 16 and in bin k + 16 of 32: the two settings
# keep it in different bins (another would share one by chance, and count together)
APART = next(
    r for r in (f"r{i}" for i in range(100)) if int.from_bytes(raw_digest(r), "big") % 32 >= 16
)


def _admitted(guard: Guard, n: int) -> tuple[int, list[ConfigError]]:
    admitted, refused = 0, []
    for _ in range(n):
        try:
            admitted += guard.hit("p", r=APART).allowed
        except ConfigError as exc:
            refused.append(exc)
    return admitted, refused


@pytest.mark.parametrize("store", ["flush", "restart", "cluster-flush"])
def test_after_a_flush_or_a_restart_the_setting_is_checked_before_a_write(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A flush (or a restart without persistence) takes the store's record of the setting
    with everything else: a client started then with another setting claims it, while the
    clients already running still believe theirs checked. Each bin records the setting its
    records were written with, and a bin that holds none is claimed (the store's record
    checked again) before a call writes it: the client whose setting no longer holds is
    refused, and between them no more than the cap is admitted."""
    with contextlib.ExitStack() as stack:
        if store == "cluster-flush":
            nodes: list[RedisServer] = request.getfixturevalue("redis_cluster")
            flush(nodes)

            def client() -> Any:
                return RedisCluster(host="127.0.0.1", port=nodes[0].port)
        else:
            server = stack.enter_context(servers.standalone(tmp_path / "alone"))
            nodes = [server]

            def client() -> Any:
                return Redis(port=server.port)

        old = Guard(RedisBackend(client(), bins=16), [THREE], clock=ManualClock(START))
        assert old.hit("p", r="warm").allowed  # its setting claimed and checked
        if store == "restart":
            kill(server)
            restart(server)
        else:
            flush(nodes)
        new = Guard(RedisBackend(client(), bins=32), [THREE], clock=ManualClock(START))
        admitted_new, refused_new = _admitted(new, 3)
        admitted_old, refused_old = _admitted(old, 3)
        assert admitted_new + admitted_old <= 3
        assert (admitted_new, len(refused_old)) == (3, 3)  # the first to write after wins
        assert not refused_new
        assert "bins=32" in str(refused_old[0])
        assert "bins=16" in str(refused_old[0])
        old.close()
        new.close()


@pytest.mark.parametrize("bins", [0, 4])
def test_a_peek_writes_no_claim_and_a_later_write_still_records_it(
    redis_server: RedisServer, bins: int
) -> None:
    """``freqguard ping`` and ``/readyz`` peek a policy of their own: a call that only reads
    compares with a recorded setting and records none (they left a key for a day)."""
    flush([redis_server])
    client = Redis(port=redis_server.port)
    guard = _guard(client, bins)
    assert guard.peek("p", r="u0").allowed
    assert guard.limits_for("p", r="u0") == {"m": P.rules[0].rate}
    assert client.keys("*") == []
    guard.hit("p", r="u0")
    assert client.get("fg:{*p}:p:bins") == str(bins).encode()
    other = _guard(Redis(port=redis_server.port), bins + 2)
    with pytest.raises(ConfigError):  # a peek still compares with what is recorded
        other.peek("p", r="u0")
    guard.close()
    other.close()


def test_an_async_peek_writes_no_claim(redis_server: RedisServer) -> None:
    flush([redis_server])

    async def peek() -> bool:
        guard = AsyncGuard(AsyncRedisBackend(AsyncRedis(port=redis_server.port)), [P])
        try:
            return (await guard.peek("p", r="u0")).allowed
        finally:
            await guard.aclose()

    assert asyncio.run(peek())
    assert redis_server.client.keys("*") == []
