"""The direct path: sync calls on connections borrowed from redis-py's pool, by threads
sharing one backend, after the server dropped them, in a forked child, and with the
client's own options."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading

import pytest
from redis import Redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from freqguard import (
    BackendUnavailable,
    Guard,
    ManualClock,
    MemoryBackend,
    backend_from_url,
)
from freqguard.backends import _lanes
from freqguard.backends.redis import RedisBackend
from freqguard.config.load import loads
from tests.backends.redis_rig import _client, _connections_named
from tests.conftest import SMS, START, flush, in_threads
from tests.servers import RedisServer, free_port, wait_for


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


@pytest.mark.parametrize(
    "options",
    [
        {"single_connection_client": True, "retry": Retry(NoBackoff(), 0)},  # retrying: refused
        {"decode_responses": True},
        {"protocol": 3},
    ],
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


def test_closing_a_cluster_backend_made_from_a_url_closes_every_nodes_connections(
    redis_cluster: list[RedisServer],
) -> None:
    """redis-py's cluster client, made from a URL, gives each node's client a pool made for
    it, which that client's close leaves open (it closes only a pool it made itself): the
    backend's close left a connection to every node, reclaimed later by the collector in
    whatever test then ran, whose unclosed socket's ResourceWarning failed that test (CI's
    slow job, once). Its close now disconnects every node's pool."""
    flush(redis_cluster)
    url = f"redis+cluster://127.0.0.1:{redis_cluster[0].port}?client_name=fg-closing"
    guard = Guard(backend_from_url(url), [SMS])
    guard.hit_many("sms", [{"recipient": f"r{n}", "content": "c"} for n in range(20)])
    assert all(_connections_named(node, "fg-closing") for node in redis_cluster)
    guard.close()
    wait_for(
        lambda: not any(_connections_named(node, "fg-closing") for node in redis_cluster),
        "the closed backend's connections to be gone from every node",
    )


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_closing_a_guard_made_from_a_config_closes_its_fallback_store(
    redis_server: RedisServer, kind: str
) -> None:
    """A configuration's ``on_error = { fallback = "redis://..." }`` makes a backend the
    guard owns, as it owns its store; its close closed the store only, and the fallback's
    connections stayed open until the collector found them (an unclosed socket's warning
    in whatever test then ran)."""
    dead = free_port()  # nothing listens there: every call falls back
    text = f"""
backend = "redis://127.0.0.1:{dead}?socket_connect_timeout=1"
on_error = {{ fallback = "redis://127.0.0.1:{redis_server.port}?client_name=fg-fallback" }}
[[policy]]
name = "sms"
rules = [{{ rate = "2/minute", by = "recipient" }}]
"""
    config = loads(text)
    if kind == "sync":
        guard = config.guard()
        assert guard.hit("sms", recipient="r1").source == "fallback"
        guard.close()
    else:

        async def run() -> None:
            guard = config.async_guard()
            assert (await guard.hit("sms", recipient="r1")).source == "fallback"
            await guard.aclose()

        asyncio.run(run())
    wait_for(
        lambda: not _connections_named(redis_server, "fg-fallback"),
        "the fallback store's connections to be closed",
    )
