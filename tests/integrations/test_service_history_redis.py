"""The decision history on a Redis store: the counts and the keys denied most written and
read back on a standalone server and on a Redis Cluster, a denied context kept only as a
digest (content never in Redis) and removed by ``freqguard flush``, and with the history
off nothing written. The rig is ``history_rig.py``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from freqguard import AsyncGuard
from freqguard.service import create_app
from tests.conftest import flush
from tests.integrations.history_rig import SMS, _digest
from tests.servers import RedisServer


@pytest.mark.parametrize("store", ["redis", "cluster"])
def test_the_history_and_top_keys_on_a_redis_store(
    store: str, request: pytest.FixtureRequest
) -> None:
    """The counts and the top keys written and read back on a standalone server and on a
    Redis Cluster (each key of the history in one slot: one policy's keys share a tag)."""
    from freqguard.backends.tallies import RedisTallies
    from freqguard.backends.urls import async_backend_from_url
    from freqguard.service.history import History

    if store == "redis":
        url = request.getfixturevalue("redis_server").url
    else:
        url = "redis+cluster://" + request.getfixturevalue("redis_cluster")[0].url.split("//")[1]
    prefix = f"hist{time.monotonic_ns()}"  # apart from the session's other tests

    async def run() -> tuple[Any, Any]:
        guard = AsyncGuard(async_backend_from_url(url), [SMS], prefix=prefix)
        history = History(guard)
        assert isinstance(history._tallies, RedisTallies)  # in the store, not in memory
        contexts = [{"recipient": "a", "content": "x"}] * 3
        try:
            decisions = await guard.hit_many("sms", contexts)
            await history.record("sms", decisions, contexts, SMS.dimensions)
            read = await history.read({"sms": ["rcpt-1m", "content-59s"]})
            top = await history.top(["sms"], 2, None)
        finally:
            await history.aclose()
            await guard.aclose()
        return read, top

    read, top = asyncio.run(run())
    # summed over the hour: a minute's edge between the write and the read moves nothing
    series = {(s.policy, s.rule): (sum(s.allowed), sum(s.denied)) for s in read.series}
    assert series == {
        ("sms", None): (2, 1),
        ("sms", "rcpt-1m"): (2, 1),
        ("sms", "content-59s"): (3, 0),
    }
    assert [(k.key, k.denied) for k in top.keys] == [(_digest("a"), 1)]


def _everything(client: Any) -> bytes:
    """Every key of a server, and what each holds (strings, hash fields and values, sorted
    set members), as one text to search."""
    found = []
    for key in client.scan_iter(count=1000):
        found.append(key)
        kind = client.type(key)
        if kind == b"hash":
            for field, value in client.hgetall(key).items():
                found += [field, value]
        elif kind == b"zset":
            found += [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
        elif kind == b"string":
            found.append(client.get(key))
    return b"\n".join(found)


def test_a_denied_context_is_kept_as_a_digest_and_flush_leaves_nothing(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """docs/redis.md: content never appears in Redis. The keys denied most are kept as
    digests of their context (the page matches a context typed in to its digest), and
    ``freqguard flush`` removes every key freqguard wrote, the history's too."""
    from freqguard.backends.urls import async_backend_from_url
    from tests.project.cli_run import run as run_cli

    flush([redis_server])
    content = "Your code is 4711"
    context = {"recipient": "+15550001", "content": content}

    async def run() -> tuple[Any, Any]:
        guard = AsyncGuard(async_backend_from_url(redis_server.url), [SMS])
        transport = httpx.ASGITransport(app=create_app(guard))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            for _ in range(3):
                await http.post("/v1/policies/sms/hit", json={"context": context})
            top = (await http.get("/v1/stats/top")).json()
            matched = await http.post("/v1/policies/sms/denials", json={"context": context})
            await guard.aclose()
            return top, matched.json()

    top, matched = asyncio.run(run())
    stored = _everything(redis_server.client)
    assert content.encode() not in stored
    assert b"4711" not in stored
    assert [(row["key"], row["denied"]) for row in top["keys"]] == [(matched["key"], 1)]
    assert matched["denied"] == 1
    assert "+15550001" not in matched["key"]
    config = tmp_path / "c.toml"
    config.write_text(
        f'backend = "{redis_server.url}"\n[[policy]]\nname = "sms"\n'
        'rules = [{ rate = "2/minute", by = "recipient", name = "rcpt-1m" }]\n'
    )
    assert run_cli("flush", str(config), "--yes").code == 0
    assert redis_server.client.dbsize() == 0


def test_with_the_history_off_nothing_is_written_and_its_reads_say_so(
    redis_server: RedisServer,
) -> None:
    """``--history off``: hits decide as ever, the store holds only the decisions' own keys,
    and the chart's reads are a 404 that says the history is off (not a quiet chart)."""
    from freqguard.backends.urls import async_backend_from_url

    prefix = f"off{time.monotonic_ns()}"
    one = {"context": {"recipient": "a", "content": "x"}}

    async def run() -> list[httpx.Response]:
        guard = AsyncGuard(async_backend_from_url(redis_server.url), [SMS], prefix=prefix)
        app = create_app(guard, keep_history=False)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            hits = [await http.post("/v1/policies/sms/hit", json=one) for _ in range(3)]
            reads = [await http.get(path) for path in ("/v1/stats/history", "/v1/stats/top")]
        await guard.aclose()
        return hits + reads

    answers = asyncio.run(run())
    assert [a.json()["allowed"] for a in answers[:3]] == [True, True, False]
    for read in answers[3:]:
        assert read.status_code == 404
        assert read.headers["content-type"] == "application/problem+json"
        assert "history is off" in read.json()["detail"]
    keys = redis_server.client.keys(f"*{prefix}*")
    assert keys, "the decisions' own keys"
    assert not [k for k in keys if b":stats:" in k]
