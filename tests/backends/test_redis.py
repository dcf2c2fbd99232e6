"""What only Redis can show: processes racing, TTLs, stored bytes and fields, a flushed library,
outages, URLs. The direct path, async, an async lane's driver and a changing cluster have
modules of their own (``test_redis_direct.py``, ``test_redis_async.py``,
``test_redis_lanes.py``, ``test_redis_cluster_changes.py``)."""

from __future__ import annotations

import multiprocessing
import time

import pytest
from redis import Redis
from redis.cluster import RedisCluster

from freqguard import (
    BackendUnavailable,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
    async_backend_from_url,
    backend_from_url,
)
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from freqguard.script.contract import STALE_GRACE_US
from freqguard.script.strategies import rolling_window
from tests.backends.redis_rig import _client
from tests.conftest import SMS, flush
from tests.reference import RATE_STRATEGIES
from tests.servers import RedisServer, state_keys

CONTENT = "Your verification code is 918273"
GRACE_MS = STALE_GRACE_US // 1000


def _hammer(url: str, cluster: bool, strategy: str, hits: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    client = RedisCluster.from_url(url) if cluster else Redis.from_url(url)
    # a window of ten years (the longest): on the server's clock, a fixed window's boundary
    # can fall inside any run, however short, and then admit twice; this one never does
    rule = Rule("15 per 3660 days", by="r", strategy=strategy)
    guard = Guard(RedisBackend(client), [Policy("p", rule)])
    out.put(sum(guard.hit("p", r="hot").allowed for _ in range(hits)))
    client.close()


@pytest.mark.slow  # processes, and a cluster's slots moved or lost: seconds each
@pytest.mark.parametrize("where", ["redis", "cluster"])
@pytest.mark.parametrize("strategy", [s.value for s in RATE_STRATEGIES])
def test_eight_processes_admit_exactly_the_limit(
    where: str,
    strategy: str,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
) -> None:
    nodes = [redis_server] if where == "redis" else redis_cluster
    flush(nodes)
    context = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[int] = context.Queue()
    workers = [
        context.Process(target=_hammer, args=(nodes[0].url, where == "cluster", strategy, 40, out))
        for _ in range(8)
    ]
    for worker in workers:
        worker.start()
    admitted = sum(out.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join(60)
    assert admitted == 15  # the server's clock, whatever the machine's speed


def _all_keys(nodes: list[RedisServer]) -> dict[bytes, tuple[bytes, int]]:
    """Every record, its fields and values run together, and its TTL (ms)."""
    found: dict[bytes, tuple[bytes, int]] = {}
    for node in nodes:
        for key in state_keys(node.client):
            fields: dict[bytes, bytes] = node.client.hgetall(key)  # type: ignore[assignment]
            assert fields
            found[key] = (b"".join(k + v for k, v in fields.items()), node.client.pttl(key))
    return found


@pytest.mark.parametrize("where", ["redis", "cluster"])
def test_every_key_has_a_ttl_bounded_by_its_window_and_no_content_is_stored(
    where: str, redis_server: RedisServer, redis_cluster: list[RedisServer]
) -> None:
    nodes = [redis_server] if where == "redis" else redis_cluster
    flush(nodes)
    client = _client(where, nodes)
    policies = [
        SMS,
        *(
            Policy(f"p-{s.value}", Rule("3/minute", by=("r", "c"), strategy=s))
            for s in RATE_STRATEGIES
        ),
    ]
    guard = Guard(RedisBackend(client), policies)
    for n in range(20):
        guard.hit("sms", recipient=f"+1555{n % 3}", content=CONTENT)
        for s in RATE_STRATEGIES:
            guard.hit(f"p-{s.value}", r="{tag}:x", c=CONTENT)
    stored = _all_keys(nodes)
    assert stored
    # a rolling window's units count until their sub-window leaves: a grain (1 s) longer
    windows_ms = {"sms": 86_400_000, "p-rolling-window": 61_000, "p-": 60_000}
    for key, (value, ttl) in stored.items():
        bound = next(ms for prefix, ms in windows_ms.items() if f":{prefix}".encode() in key)
        # plus 1/32 slack and the stale grace, see policy.lua
        assert 0 < ttl <= bound * 33 // 32 + GRACE_MS, (key, ttl)
        for needle in (CONTENT.encode(), b"918273", b"verification"):
            assert needle not in key
            assert needle not in value
    client.close()


def test_every_key_expires_once_its_windows_have_passed(
    redis_server: RedisServer, redis_backend: RedisBackend
) -> None:
    """On the server's own clock (no pinned time, so no pinned grace): every key is due to
    expire within the longest its states matter (the window; a rolling window's, a
    sub-window more), plus the 1/32 slack and the 1 s stale grace, of the server's TIME.
    Redis then empties the database by itself; reading absolute expiry times needs no
    waiting."""
    guard = Guard(
        redis_backend,  # the suite's, closed after the test (flushed before it)
        [
            Policy(
                "p",
                *(
                    Rule("2 per 1 second", by="r", strategy=s, name=s.short)
                    for s in RATE_STRATEGIES
                ),
            )
        ],
    )
    for n in range(50):
        guard.hit("p", r=f"r{n}")
    client = redis_server.client
    keys = list(state_keys(client))
    assert len(keys) == 50
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    for key in keys:
        expires_at = int(client.execute_command("PEXPIRETIME", key))  # type: ignore[no-untyped-call]
        longest_us = 1_000_000 + rolling_window.grain(1_000_000)
        assert now_ms < expires_at <= now_ms + longest_us * 33 // 32 // 1000 + GRACE_MS + 1, key


@pytest.mark.parametrize("where", ["redis", "cluster"])
def test_function_flush_between_calls_and_between_batches(
    where: str, redis_server: RedisServer, redis_cluster: list[RedisServer], clock: ManualClock
) -> None:
    nodes = [redis_server] if where == "redis" else redis_cluster
    flush(nodes)
    client = _client(where, nodes)
    guard = Guard(RedisBackend(client), [SMS], clock=clock)
    reference = Guard(MemoryBackend(), [SMS], clock=clock)
    batch = [{"recipient": f"r{n % 7}", "content": f"c{n % 2}"} for n in range(40)]
    for _ in range(3):
        for node in nodes:
            node.client.function_flush()
        assert guard.hit("sms", recipient="a", content="x") == reference.hit(
            "sms", recipient="a", content="x"
        )
        for node in nodes:
            node.client.function_flush()
        assert guard.hit_many("sms", batch) == reference.hit_many("sms", batch)
    client.close()


def test_a_stopped_server_gives_backend_unavailable_fast(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    server = RedisServer(tmp_path_factory.mktemp("doomed"))
    guard = Guard(backend_from_url(server.url), [SMS])
    assert guard.hit("sms", recipient="a", content="b").allowed
    server.stop()
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="redis failed") as caught:
        guard.hit("sms", recipient="a", content="b")
    assert time.monotonic() - started < 1.5
    assert caught.value.__cause__ is not None


def test_a_hanging_server_times_out_as_configured(silent_server: int) -> None:
    guard = Guard(backend_from_url(f"redis://127.0.0.1:{silent_server}?socket_timeout=0.3"), [SMS])
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="Timeout"):
        guard.hit("sms", recipient="a", content="b")
    assert 0.25 < time.monotonic() - started < 1.5


def test_backend_urls(redis_server: RedisServer, redis_cluster: list[RedisServer]) -> None:
    assert isinstance(backend_from_url("memory://"), MemoryBackend)
    standalone = backend_from_url(redis_server.url)
    assert isinstance(standalone, RedisBackend)
    assert isinstance(standalone.client, Redis)
    cluster = backend_from_url(f"redis+cluster://127.0.0.1:{redis_cluster[0].port}")
    assert isinstance(cluster, RedisBackend)
    assert isinstance(cluster.client, RedisCluster)
    assert Guard(cluster, [SMS]).hit("sms", recipient="u", content="c").allowed
    standalone.close()
    cluster.close()
    assert isinstance(async_backend_from_url(redis_server.url), AsyncRedisBackend)
    for bad in ("mysql://x", "localhost:6379", "", 42):
        with pytest.raises(ConfigError, match=r"backend URL|scheme"):
            backend_from_url(bad)  # type: ignore[arg-type]


def test_pinned_time_cannot_let_real_expiry_drop_state_early(
    redis_server: RedisServer, redis_backend: RedisBackend, clock: ManualClock
) -> None:
    """Found by the differential test: with a pinned clock, a TTL computed in pinned time (1 ms
    here) expired in real time while the state still mattered in pinned time."""
    guard = Guard(
        redis_backend,  # the suite's, closed after the test (flushed before it)
        [Policy("p", Rule("1000 per second", strategy="gcra"))],
        clock=clock,
    )
    guard.hit("p")
    (key,) = state_keys(redis_server.client)
    assert redis_server.client.pttl(key) > 590_000  # 1 ms of state, plus the pinned grace


def test_unix_socket_url(tmp_path_factory: pytest.TempPathFactory) -> None:
    workdir = tmp_path_factory.mktemp("unix")
    socket_path = workdir / "redis.sock"
    server = RedisServer(workdir, "--unixsocket", str(socket_path), "--unixsocketperm", "700")
    try:
        guard = Guard(backend_from_url(f"unix://{socket_path}"), [SMS])
        assert guard.hit("sms", recipient="a", content="b").allowed
        assert len(state_keys(server.client)) == 1  # one record for the recipient
        guard.close()
    finally:
        server.stop()


def test_rule_names_whose_redis_tags_collide_keep_fields_of_their_own(
    redis_backend: RedisBackend, redis_server: RedisServer
) -> None:
    """Each state is a field of its record named by a 2-byte tag of its key id; "x14@" and
    "x59@" have the same tag. Such a policy was refused ("rename a rule"); their tags are
    now lengthened, and each state keeps its own count in its own field."""
    flush([redis_server])
    policy = Policy(
        "p",
        Rule("1/second", strategy="fixed-window", name="x14"),
        Rule("5/minute", strategy="gcra", name="x59"),
    )
    guard = Guard(redis_backend, [policy], clock=ManualClock(1000))
    assert guard.hit("p").allowed
    assert [state.remaining for state in guard.peek("p").rules] == [0, 4]
    (record,) = state_keys(redis_server.client)
    assert redis_server.client.hlen(record) == 1 + 2  # the meta field and two states
