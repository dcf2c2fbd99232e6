"""What only Redis can show: processes racing, TTLs, stored bytes, a flushed library, outages,
async."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.exceptions as rex
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.retry import Retry

from freqguard import (
    AsyncGuard,
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
from freqguard.backends import _lanes
from freqguard.backends._lanes import AsyncLane
from freqguard.backends.base import FINISHING
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from freqguard.script.contract import STALE_GRACE_US
from freqguard.script.strategies import rolling_window
from tests.conftest import SMS, START, flush, in_threads, run_and_shut_down
from tests.reference import RATE_STRATEGIES
from tests.servers import RedisServer, cluster, cluster_settled, standalone, state_keys

CONTENT = "Your verification code is 918273"
PING = b"*1\r\n$4\r\nPING\r\n"
INCR = b"*2\r\n$4\r\nINCR\r\n$7\r\ncounted\r\n"


def _blpop(seconds: str) -> bytes:
    """``BLPOP empty <seconds>``: answered (nil) once the server waited that long."""
    return b"*3\r\n$5\r\nBLPOP\r\n$5\r\nempty\r\n$%d\r\n%s\r\n" % (
        len(seconds),
        seconds.encode(),
    )


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


def _client(where: str, nodes: list[RedisServer]) -> Redis | RedisCluster:
    if where == "redis":
        return Redis(port=nodes[0].port)
    return RedisCluster(host="127.0.0.1", port=nodes[0].port)


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


def test_every_key_expires_once_its_windows_have_passed(redis_server: RedisServer) -> None:
    """On the server's own clock (no pinned time, so no pinned grace): every key is due to
    expire within the longest its states matter (the window; a rolling window's, a
    sub-window more), plus the 1/32 slack and the 1 s stale grace, of the server's TIME.
    Redis then empties the database by itself; reading absolute expiry times needs no
    waiting."""
    flush([redis_server])
    guard = Guard(
        RedisBackend(Redis(port=redis_server.port)),
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


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server that accepts and never answers: the hang a timeout must cut short."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def test_a_hanging_server_times_out_as_configured(silent_server: int) -> None:
    guard = Guard(backend_from_url(f"redis://127.0.0.1:{silent_server}?socket_timeout=0.3"), [SMS])
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="Timeout"):
        guard.hit("sms", recipient="a", content="b")
    assert 0.25 < time.monotonic() - started < 1.5


def test_async_backends_decide_like_memory(
    redis_server: RedisServer, redis_cluster: list[RedisServer]
) -> None:
    flush([redis_server, *redis_cluster])
    batch = [{"recipient": f"r{n % 5}", "content": "c"} for n in range(30)]

    async def run(backend: AsyncRedisBackend | MemoryBackend) -> list[object]:
        guard = AsyncGuard(backend, [SMS], clock=ManualClock(START))
        out: list[object] = [await guard.hit("sms", recipient="a", content="x") for _ in range(4)]
        out.append(await guard.hit_many("sms", batch))
        out.append(await guard.refund("sms", recipient="a", content="x"))
        out.append(await guard.peek("sms", recipient="a", content="x"))
        await guard.aclose()
        return out

    async def main() -> list[list[object]]:
        standalone = AsyncRedisBackend(AsyncRedis(port=redis_server.port))
        cluster = AsyncRedisBackend(AsyncRedisCluster(host="127.0.0.1", port=redis_cluster[0].port))
        # a single-connection client keeps its connection: driven through its own API
        single = AsyncRedisBackend(
            AsyncRedis(port=redis_server.port, single_connection_client=True, client_name="one")
        )
        out = [await run(MemoryBackend()), await run(standalone), await run(cluster)]
        flush([redis_server])
        await AsyncGuard(single, [SMS]).hit("sms", recipient="z", content="z")
        assert _connections_named(redis_server, "one") == 1
        return [*out, await run(single)]

    memory, standalone, cluster, single = asyncio.run(main())
    assert standalone == memory
    assert cluster == memory
    assert single == memory


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
    redis_server: RedisServer, clock: ManualClock
) -> None:
    """Found by the differential test: with a pinned clock, a TTL computed in pinned time (1 ms
    here) expired in real time while the state still mattered in pinned time."""
    flush([redis_server])
    guard = Guard(
        RedisBackend(Redis(port=redis_server.port)),
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


# -- the direct path: connections borrowed from redis-py's pool --------------------------------


@pytest.mark.usefixtures("fast_switching")
@pytest.mark.parametrize("where", ["redis", "cluster"])
def test_threads_sharing_one_backend_admit_exactly_the_limit(
    where: str, redis_server: RedisServer, redis_cluster: list[RedisServer]
) -> None:
    """Threads on one backend never share a connection: crossed replies would misdecide."""
    nodes = [redis_server] if where == "redis" else redis_cluster
    flush(nodes)
    client = _client(where, nodes)
    guard = Guard(RedisBackend(client), [SMS], clock=ManualClock(START))
    admitted = [0] * 8
    barrier = threading.Barrier(8)

    def worker(n: int) -> None:
        barrier.wait()
        for i in range(12):
            content = f"t{n}:{i}"  # unique: only the 15-per-minute rule binds
            if i % 3:
                admitted[n] += guard.hit("sms", recipient="hot", content=content).allowed
            else:
                batch = [{"recipient": "hot", "content": f"{content}:{k}"} for k in range(3)]
                admitted[n] += sum(d.allowed for d in guard.hit_many("sms", batch))

    in_threads(worker, 8)
    assert sum(admitted) == 15
    assert guard.peek("sms", recipient="hot", content="new").remaining == 0
    guard.close()


def test_dropped_connections_reconnect(
    redis_server: RedisServer, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection the server closed fails one call, and is reconnected on the next: also
    when the client has retries (redis-py's default from 6.0), since a call whose reply is
    lost may have run, and is never sent again (test_fault_replies.py: the call killed after
    it ran). The lanes' idle check is off: on a loaded machine the call came after it and
    found the close first (test_faults.py has it on)."""
    monkeypatch.setattr(_lanes, "_CHECK_AFTER", float("inf"))
    flush([redis_server])
    no_retry = Guard(backend_from_url(redis_server.url), [SMS], clock=clock)
    client = Redis(port=redis_server.port, retry=Retry(NoBackoff(), 3))
    retrying = Guard(RedisBackend(client), [SMS], clock=clock)
    assert no_retry.hit("sms", recipient="a", content="x").allowed
    assert retrying.hit("sms", recipient="b", content="x").allowed
    killed = redis_server.client.client_kill_filter(_type="normal", skipme=True)
    assert killed >= 2
    for guard, recipient in ((no_retry, "a"), (retrying, "b")):
        with pytest.raises(BackendUnavailable, match="ConnectionError"):
            guard.hit("sms", recipient=recipient, content="x")
        # the failed call consumed nothing: 2 per 59 s admits one more, then denies
        assert guard.hit("sms", recipient=recipient, content="x").allowed
        assert not guard.hit("sms", recipient=recipient, content="x").allowed
    no_retry.close()
    retrying.close()


def _forked_hits(guard: Guard, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    out.put([guard.hit("sms", recipient="f", content=str(n)).allowed for n in range(20)])


def test_a_forked_child_opens_its_own_connections(
    redis_server: RedisServer, clock: ManualClock
) -> None:
    flush([redis_server])
    guard = Guard(RedisBackend(Redis(port=redis_server.port)), [SMS], clock=clock)
    assert guard.hit("sms", recipient="f", content="parent").allowed  # a connection is kept
    context = multiprocessing.get_context("fork")
    out: multiprocessing.Queue[list[bool]] = context.Queue()
    child = context.Process(target=_forked_hits, args=(guard, out))
    child.start()
    parent = [guard.hit("sms", recipient="g", content=str(n)).allowed for n in range(20)]
    assert out.get(timeout=60) == [True] * 14 + [False] * 6  # 15 per minute, one used above
    child.join(60)
    assert parent == [True] * 15 + [False] * 5
    guard.close()


def _connections_named(server: RedisServer, name: str) -> int:
    return sum(1 for c in server.client.client_list() if c["name"] == name)


@pytest.mark.parametrize(
    "options", [{"single_connection_client": True}, {"decode_responses": True}, {"protocol": 3}]
)
def test_client_options_decide_like_memory(
    options: dict[str, object], redis_server: RedisServer, clock: ManualClock
) -> None:
    flush([redis_server])
    client = Redis(port=redis_server.port, client_name="fg-options", **options)  # type: ignore[arg-type]
    guard = Guard(RedisBackend(client), [SMS], clock=clock)
    reference = Guard(MemoryBackend(), [SMS], clock=clock)
    batch = [{"recipient": f"r{n % 3}", "content": "c"} for n in range(10)]
    for _ in range(3):
        assert guard.hit("sms", recipient="a", content="x") == reference.hit(
            "sms", recipient="a", content="x"
        )
        assert guard.hit_many("sms", batch) == reference.hit_many("sms", batch)
        clock.advance(20)
    if options.get("single_connection_client"):
        assert _connections_named(redis_server, "fg-options") == 1
    guard.close()


@pytest.mark.parametrize("where", ["redis", "cluster"])
def test_async_tasks_share_a_connection_and_admit_exactly_the_limit(
    where: str, redis_server: RedisServer, redis_cluster: list[RedisServer]
) -> None:
    """32 tasks at once: their calls are batched on one connection per node, each task gets
    its own answer, and exactly the limit is admitted."""
    nodes = [redis_server] if where == "redis" else redis_cluster
    flush(nodes)
    for node in nodes:
        node.client.config_resetstat()

    def connected() -> int:
        return sum(int(node.client.info("clients")["connected_clients"]) for node in nodes)

    before = connected()

    async def main() -> tuple[list[list[bool]], int]:
        client: AsyncRedis | AsyncRedisCluster
        if where == "redis":
            client = AsyncRedis(port=nodes[0].port)
        else:
            client = AsyncRedisCluster(host="127.0.0.1", port=nodes[0].port)
        guard = AsyncGuard(AsyncRedisBackend(client), [SMS], clock=ManualClock(START))

        async def task(n: int) -> list[bool]:
            out = []
            for i in range(6):  # unique contents: only the 15-per-minute rule binds
                decision = await guard.hit("sms", recipient="hot", content=f"{n}:{i}")
                out.append(decision.allowed)
                other = await guard.hit("sms", recipient=f"cold{n}", content="x")
                assert other.allowed == (i < 2)  # 2 per 59 s for that recipient and content
            return out

        results = await asyncio.gather(*(task(n) for n in range(32)))
        connections = connected() - before
        await guard.aclose()
        return results, connections

    results, connections = asyncio.run(main())
    assert sum(sum(r) for r in results) == 15
    stats = [node.client.info("commandstats")["cmdstat_fcall"] for node in nodes]
    # every call ran once (the first ones met an empty server: failed, loaded, redone)
    assert sum(int(s["calls"]) - int(s["failed_calls"]) for s in stats) == 32 * 6 * 2
    assert connections <= 2 * len(nodes)  # one per node (and one that loads), not per task


async def _turns_until(condition: Callable[[], bool], limit: int = 1000) -> None:
    """Let the event loop run its other tasks, one turn at a time, until ``condition`` holds.
    No time passes and nothing is waited for but the loop itself."""
    loop = asyncio.get_running_loop()
    for _ in range(limit):
        if condition():
            return
        turn = loop.create_future()
        loop.call_soon(turn.set_result, None)
        await turn
    raise AssertionError(f"not reached in {limit} loop turns")


def _awaits(task: asyncio.Task[Any] | None, name: str) -> bool:
    """Whether ``task`` is suspended in a coroutine called ``name``, at any depth."""
    awaited = None if task is None else task.get_coro()
    while awaited is not None:
        if getattr(awaited, "__name__", None) == name:
            return True
        awaited = getattr(awaited, "cr_await", None)
    return False


def _in_flight(lane: AsyncLane | None) -> bool:
    """Whether a lane's driver has taken every queued call and is sending or reading them."""
    return lane is not None and lane._driver is not None and not lane._pending


def test_async_cancelled_callers_leave_the_lane_working(redis_server: RedisServer) -> None:
    flush([redis_server])

    async def main() -> None:
        backend = AsyncRedisBackend(AsyncRedis(port=redis_server.port))
        guard = AsyncGuard(backend, [SMS], clock=ManualClock(START))
        # a backend's first call first asks the server what it is (I/O, not loop turns)
        await guard.peek("sms", recipient="warm", content="x")
        redis_server.client.function_flush()  # the calls below still meet an empty server
        tasks = [
            asyncio.ensure_future(guard.hit("sms", recipient=f"c{n}", content="x"))
            for n in range(10)
        ]
        # every task has queued its call, and the batch is out
        await _turns_until(
            lambda: _in_flight(next((lane for _, lane in backend._lanes.values()), None))
        )
        for task in tasks[::2]:
            task.cancel()
        done = await asyncio.wait_for(asyncio.gather(*tasks[1::2]), 10)
        assert [d.allowed for d in done] == [True] * 5
        again = [await guard.hit("sms", recipient="c1", content="x") for _ in range(2)]
        assert [d.allowed for d in again] == [True, False]  # 2 per 59 s
        await guard.aclose()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_async_function_flush_and_a_hanging_server(
    redis_server: RedisServer, silent_server: int, clock: ManualClock
) -> None:
    flush([redis_server])
    batch = [{"recipient": f"r{n % 7}", "content": f"c{n % 2}"} for n in range(40)]

    async def main() -> None:
        guard = AsyncGuard(async_backend_from_url(redis_server.url), [SMS], clock=clock)
        reference = AsyncGuard(MemoryBackend(), [SMS], clock=clock)
        for _ in range(3):
            redis_server.client.function_flush()
            assert await guard.hit_many("sms", batch) == await reference.hit_many("sms", batch)
            redis_server.client.function_flush()
            assert await guard.hit("sms", recipient="a", content="x") == await reference.hit(
                "sms", recipient="a", content="x"
            )
        await guard.aclose()
        url = f"redis://127.0.0.1:{silent_server}?socket_timeout=0.3"
        hanging = AsyncGuard(async_backend_from_url(url), [SMS])
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match="Timeout"):
            await asyncio.gather(
                *(hanging.hit("sms", recipient="a", content="b") for _ in range(5))
            )
        assert 0.25 < time.monotonic() - started < 1.5

    asyncio.run(main())


@pytest.mark.slow  # processes, and a cluster's slots moved or lost: seconds each
def test_a_lost_cluster_node_fails_its_calls_and_spares_the_others(
    tmp_path_factory: pytest.TempPathFactory, clock: ManualClock
) -> None:
    """A node that dies under a batch: the batch fails as BackendUnavailable (the live nodes
    did decide their calls), no connection is left out of step, and calls to the live
    nodes go on deciding correctly."""
    with cluster(tmp_path_factory.mktemp("lossy")) as nodes:
        client = RedisCluster(
            host="127.0.0.1", port=nodes[0].port, socket_timeout=1, socket_connect_timeout=1
        )
        guard = Guard(RedisBackend(client), [SMS], clock=clock)
        reference = Guard(MemoryBackend(), [SMS], clock=clock)
        recipients = [f"r{n}" for n in range(30)]
        owner = {
            r: client.nodes_manager.get_node_from_slot(key_slot(r.encode())).port
            for r in recipients
        }
        batch = [{"recipient": r, "content": "c"} for r in recipients]
        assert guard.hit_many("sms", batch) == reference.hit_many("sms", batch)
        # a node that hangs: its replies time out; the other nodes' replies are never read,
        # so their connections must not be reused as they are
        frozen = next(n for n in nodes if n.port == owner[recipients[0]])  # read first
        frozen.process.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(BackendUnavailable, match="Timeout"):
                guard.hit_many("sms", batch)
        finally:
            frozen.process.send_signal(signal.SIGCONT)
        reference.hit_many("sms", batch)  # every node got its calls, and decides them
        assert guard.hit_many("sms", batch) == reference.hit_many("sms", batch)
        doomed = next(n for n in nodes if n is not frozen)
        doomed.stop()
        with pytest.raises(BackendUnavailable):
            guard.hit_many("sms", batch)
        alive = [c for c in batch if owner[c["recipient"]] != doomed.port]
        assert alive
        reference.hit_many("sms", alive)  # a batch is no transaction: the live nodes decided
        for _ in range(2):  # the same answers as memory: nothing half-read, nothing lost
            assert guard.hit_many("sms", alive) == reference.hit_many("sms", alive)
        guard.close()


def _admin(node: RedisServer, *args: object) -> Any:
    return node.client.execute_command(*args)  # type: ignore[no-untyped-call]


def _move_slot(nodes: list[RedisServer], slot: int) -> None:
    """Migrate one slot, keys and all, to another master, as a resharding would."""
    ids = {node.port: _admin(node, "CLUSTER", "MYID").decode() for node in nodes}
    source = next(n for n in nodes if _admin(n, "CLUSTER", "COUNTKEYSINSLOT", slot))
    target = next(n for n in nodes if n is not source)
    _admin(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source.port])
    _admin(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target.port])
    keys = _admin(source, "CLUSTER", "GETKEYSINSLOT", slot, 1000)
    _admin(source, "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
    for node in (target, source, *[n for n in nodes if n not in (source, target)]):
        _admin(node, "CLUSTER", "SETSLOT", slot, "NODE", ids[target.port])
    # bounded polling until every node says so and the cluster is settled: a node's view
    # that lags (the cluster bus, on a loaded machine) would bounce the client's call back
    # and forth until redis-py gives up ("TTL exhausted"), which is not what is tested here
    deadline = time.monotonic() + 15
    while not (all(_owner(n, slot) == target.port for n in nodes) and cluster_settled(nodes)):
        if time.monotonic() > deadline:
            raise AssertionError(f"slot {slot} did not settle on {target.port} in 15 s")
        time.sleep(0.05)


def _owner(node: RedisServer, slot: int) -> int:
    """The port of the primary ``node`` says serves ``slot``."""
    for start, end, primary, *_ in _admin(node, "CLUSTER", "SLOTS"):
        if start <= slot <= end:
            return int(primary[1])
    return 0


def _moved_replies(nodes: list[RedisServer]) -> int:
    return sum(
        int(node.client.info("errorstats").get("errorstat_MOVED", {}).get("count", 0))
        for node in nodes
    )


@pytest.mark.slow  # processes, and a cluster's slots moved or lost: seconds each
def test_a_resharded_slot_is_followed_sync_and_async(
    tmp_path_factory: pytest.TempPathFactory, clock: ManualClock
) -> None:
    """After a slot moves, the node that lost it answers MOVED: the call is redone through
    the cluster client, which learns the new map, and the state moved with the slot."""
    with cluster(tmp_path_factory.mktemp("reshard")) as nodes:
        reference = Guard(MemoryBackend(), [SMS], clock=clock)
        batch = [{"recipient": f"r{n % 4}", "content": "c"} for n in range(6)]

        def expected(content: str) -> list[object]:
            return [
                reference.hit("sms", recipient="r0", content=content),
                reference.hit_many("sms", batch),
            ]

        sync = Guard(
            RedisBackend(RedisCluster(host="127.0.0.1", port=nodes[0].port)), [SMS], clock=clock
        )
        for _ in range(2):
            assert [
                sync.hit("sms", recipient="r0", content="s"),
                sync.hit_many("sms", batch),
            ] == expected("s")
            before = _moved_replies(nodes)
            _move_slot(nodes, key_slot(b"r0"))  # the backend still has the old map
            assert sync.hit("sms", recipient="r0", content="s") == reference.hit(
                "sms", recipient="r0", content="s"
            )
            assert _moved_replies(nodes) > before
        sync.close()

        async def run() -> None:
            client = AsyncRedisCluster(host="127.0.0.1", port=nodes[0].port)
            guard = AsyncGuard(AsyncRedisBackend(client), [SMS], clock=clock)
            for _ in range(2):
                assert [
                    await guard.hit("sms", recipient="r0", content="a"),
                    await guard.hit_many("sms", batch),
                ] == expected("a")
                before = _moved_replies(nodes)
                _move_slot(nodes, key_slot(b"r0"))
                assert await guard.hit_many("sms", batch) == reference.hit_many("sms", batch)
                assert _moved_replies(nodes) > before
            await guard.aclose()

        asyncio.run(run())


def test_an_async_lane_closed_mid_flight_keeps_its_connection_until_answered(
    redis_server: RedisServer,
) -> None:
    """A reroute closes every lane, possibly while a driver still reads: the connection must
    not go back to the pool (and to another caller) before its replies are read."""

    async def main() -> None:
        client = AsyncRedis(port=redis_server.port)
        lane = AsyncLane(client)
        # a script that keeps the server busy, so the replies are still to come
        busy = "local i = 0 while i < 3000000 do i = i + 1 end return 'done'"
        slow = b"*3\r\n$4\r\nEVAL\r\n$%d\r\n%s\r\n$1\r\n0\r\n" % (len(busy), busy.encode())
        echo = [b"*2\r\n$4\r\nECHO\r\n$%d\r\n%d\r\n" % (len(str(n)), n) for n in range(200)]
        assert await lane.exchange(echo[0], 1) == [b"0"]  # the lane holds its connection
        await _turns_until(lambda: lane._driver is None)  # and that call's driver is done
        calls = [asyncio.ensure_future(lane.exchange(p, 1)) for p in [slow, *echo]]
        await _turns_until(lambda: _in_flight(lane))  # the calls are out, replies to come
        await lane.aclose()
        # the pool hands out its idle connections: none may be the lane's, still reading
        others = [asyncio.ensure_future(client.echo(f"other{n}")) for n in range(20)]
        replies = await asyncio.gather(*calls)
        assert [r[0] for r in replies] == [b"done"] + [str(n).encode() for n in range(200)]
        assert await asyncio.gather(*others) == [f"other{n}".encode() for n in range(20)]
        await client.aclose()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_an_async_lane_whose_driver_was_cancelled_before_it_ran_sends_its_calls(
    redis_server: RedisServer,
) -> None:
    """``asyncio.run`` cancels every task when its main returns, a lane's driver among them:
    one cancelled before its first step never ran its ``finally``, so the lane kept it as
    its driver, its callers waited forever and every later call queued behind it (review:
    ``asyncio.run`` hung at shutdown). Then its callers failed ("cut off"), though nothing
    was sent: a lease's release among them, its lease held until it lapsed. Its calls go to
    the next driver, and so do later ones."""

    async def main() -> None:
        client = AsyncRedis(port=redis_server.port)
        lane = AsyncLane(client)
        first = asyncio.ensure_future(lane.exchange(PING, 1))
        await asyncio.sleep(0)  # the call is queued, its driver made and not yet run
        assert lane._driver is not None
        lane._driver.cancel()
        assert await first == [b"PONG"]
        assert await lane.exchange(PING, 1) == [b"PONG"]
        await lane.aclose()
        await client.aclose()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_an_async_lanes_driver_cancelled_while_its_calls_are_out_reads_their_replies_first(
    redis_server: RedisServer,
) -> None:
    """A driver cancelled once it has sent its round reads the replies before it stops, so
    that each caller learns what its call did; calls queued meanwhile go to the next
    driver. The first call blocks in the server for 50 ms (``BLPOP`` on an empty list),
    so the cancellation surely comes while the round is out."""

    async def main() -> None:
        client = AsyncRedis(port=redis_server.port)
        lane = AsyncLane(client)
        assert await lane.exchange(PING, 1) == [b"PONG"]  # connected: no handshake to read
        out = asyncio.ensure_future(lane.exchange(_blpop("0.05"), 1))
        await _turns_until(lambda: _awaits(lane._driver, "read_response"))  # the round is out
        driver = lane._driver
        assert driver is not None
        driver.cancel()
        later = asyncio.ensure_future(lane.exchange(PING, 1))
        assert await out == [None]  # BLPOP's answer once it timed out in the server
        assert await later == [b"PONG"]
        assert driver.cancelled()
        await lane.aclose()
        await client.aclose()

    asyncio.run(asyncio.wait_for(main(), 10))


@pytest.mark.slow  # the server answers after 2.5 s
def test_a_cancelled_driver_whose_round_outlasts_its_grace_never_sends_it_again(
    redis_server: RedisServer,
) -> None:
    """A round (an INCR, then a BLPOP answered after 2.5 s) is out when the driver is
    cancelled; its grace (1 s) runs out. Its "cut off" was raised inside the connection's
    ``Retry``, which sent the round again, ten times (review: INCR ran 11 times, the
    cancelled driver took 14 s and ended as if not cancelled). Now the caller learns "cut
    off" once, the INCR ran once, and the driver ends cancelled."""
    sync = Redis(port=redis_server.port)
    sync.delete("counted", "empty")

    async def main() -> asyncio.Task[None]:
        client = AsyncRedis(port=redis_server.port, socket_timeout=5)
        lane = AsyncLane(client)
        assert await lane.exchange(PING, 1) == [b"PONG"]  # connected
        out = asyncio.ensure_future(lane.exchange(INCR + _blpop("2.5"), 2))
        await _turns_until(lambda: _awaits(lane._driver, "read_response"))
        driver = lane._driver
        assert driver is not None
        driver.cancel()
        with pytest.raises(rex.ConnectionError, match="cut off"):
            await out
        await asyncio.wait((driver,))
        await client.aclose()
        return driver

    driver = asyncio.run(asyncio.wait_for(main(), 60))
    assert int(sync.get("counted") or 0) == 1
    sync.delete("counted")
    assert driver.cancelled()


def _incr(key: str) -> bytes:
    return b"*2\r\n$4\r\nINCR\r\n$%d\r\n%s\r\n" % (len(key), key.encode())


def test_a_batch_to_finish_over_two_lanes_is_sent_when_asyncio_run_ends_at_once(
    redis_server: RedisServer,
) -> None:
    """A call to finish (``FINISHING``: a lease's, a batch's) over two lanes, made as
    ``asyncio.run``'s main returns: the tasks ``asyncio.gather`` made for the lanes were
    cancelled before they ran, nothing was queued, and the caller got a cancellation
    (review: a release over two nodes lost). The lanes' calls are queued without a task."""
    sync = Redis(port=redis_server.port)
    sync.delete("a", "b")

    client = AsyncRedis(port=redis_server.port, socket_timeout=5)

    async def main() -> None:
        one, two = AsyncLane(client), AsyncLane(client)
        assert await one.exchange(PING, 1) == [b"PONG"]
        assert await two.exchange(PING, 1) == [b"PONG"]

        async def caller() -> None:
            FINISHING.set(True)  # as the guard sets it for a release
            await _lanes.aexchange_all([(one, _incr("a"), 1), (two, _incr("b"), 1)])

        asyncio.get_running_loop().create_task(caller())  # main returns at once

    run_and_shut_down(main(), client.aclose)
    assert [int(sync.get(key) or 0) for key in ("a", "b")] == [1, 1]
    sync.delete("a", "b")


@pytest.mark.slow  # a server stalled for seconds
# the connection cut off on a stopped server may still be closing when its loop ends
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("timeout", [None, 1.0])
def test_a_driver_made_for_a_cancelled_ones_calls_sends_them_once_within_its_grace(
    tmp_path: Path, timeout: float | None
) -> None:
    """``asyncio.run`` cancels a lane's driver before its first step, a call to finish
    queued: a new driver sends it, which ``asyncio.run`` waits for and never cancels. On a
    stalled server it waited for ever (no ``socket_timeout``, redis-py's default before
    8), or timed out and the connection's ``Retry`` wrote the call again (review: the
    INCR ran twice). It has the cancelled driver's grace (1 s), and sends once."""
    with standalone(tmp_path) as server:
        pid = server.process.pid
        client = AsyncRedis(port=server.port, socket_timeout=timeout)

        async def main() -> None:
            lane = AsyncLane(client)
            assert await lane.exchange(PING, 1) == [b"PONG"]  # connected
            os.kill(pid, signal.SIGSTOP)

            async def caller() -> None:
                FINISHING.set(True)
                await lane.exchange(_incr("counted"), 1)

            asyncio.get_running_loop().create_task(caller())

        done = threading.Event()

        def run() -> None:
            run_and_shut_down(main(), client.aclose)
            done.set()

        thread = threading.Thread(target=run, daemon=True)
        try:
            thread.start()
            returned = done.wait(10)  # a real stalled server: bounded
        finally:
            os.kill(pid, signal.SIGCONT)
        thread.join(10)
        assert returned
        assert int(server.client.get("counted") or 0) <= 1


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
