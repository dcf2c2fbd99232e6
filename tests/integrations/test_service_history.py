"""Decisions over time (``GET /v1/stats/history``): in process on memory with a manual
clock (the minutes move as the test says), then a real ``freqguard serve --workers 2`` on
a real redis-server, where a known sequence of hits, on connections either worker may
accept, comes back exactly, whichever worker answers (once both wrote: each writes its
counts at most every ``INTERVAL`` seconds); and the page's chart of them."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from freqguard import AsyncGuard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.script.keys import context_digest
from freqguard.service import create_app
from freqguard.service.history import INTERVAL, MINUTES, history_for
from tests.conftest import flush
from tests.integrations.service_browser import CHROMIUM, Browser
from tests.integrations.service_process import serving, sms_config
from tests.servers import RedisServer

SMS = Policy(
    "sms",
    Rule("2/minute", by="recipient", name="rcpt-1m"),
    Rule("3 per 59 seconds", by=("recipient", "content"), name="content-59s"),
)
START = 1_700_000_040  # a minute's start


def _series(answer: dict[str, Any]) -> dict[tuple[str, str | None], tuple[list[int], list[int]]]:
    return {(s["policy"], s["rule"]): (s["allowed"], s["denied"]) for s in answer["series"]}


def test_counts_per_minute_move_with_the_clock_and_forget_after_an_hour() -> None:
    clock = ManualClock(START)
    guard = AsyncGuard(MemoryBackend(), [SMS], clock=clock)
    one = {"context": {"recipient": "a", "content": "x"}}

    async def run() -> list[dict[str, Any]]:
        transport = httpx.ASGITransport(app=create_app(guard))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            for _ in range(3):  # allowed, allowed, denied by rcpt-1m
                await http.post("/v1/policies/sms/hit", json=one)
            clock.advance(60)
            batch = {"contexts": [{"recipient": "b", "content": "x"}] * 3}
            await http.post("/v1/policies/sms/hit-many", json=batch)
            first = (await http.get("/v1/stats/history")).json()
            clock.advance(60 * MINUTES)
            later = (await http.get("/v1/stats/history?policy=sms")).json()
            missing = await http.get("/v1/stats/history?policy=nope")
            assert missing.status_code == 404
            assert missing.headers["content-type"] == "application/problem+json"
            return [first, later]

    first, later = asyncio.run(run())
    assert len(first["minutes"]) == MINUTES
    assert first["minutes"][-1] == START + 60
    series = _series(first)
    assert series["sms", None] == ([0] * 58 + [2, 2], [0] * 58 + [1, 1])
    assert series["sms", "rcpt-1m"] == ([0] * 58 + [2, 2], [0] * 58 + [1, 1])
    assert series["sms", "content-59s"] == ([0] * 58 + [3, 3], [0] * 60)
    assert all(sum(a) + sum(d) == 0 for a, d in _series(later).values())


@pytest.fixture
def service(tmp_path: Path, redis_server: RedisServer) -> Iterator[str]:
    """``freqguard serve`` with two workers on a shared Redis, stopped by its PID."""
    flush([redis_server])
    with serving(sms_config(tmp_path, redis_server.port), "--workers", "2") as served:
        yield served.url


def _digest(recipient: str, content: str = "x") -> str:
    """A context's key in the keys denied most: its digest, never its values."""
    return context_digest({"recipient": recipient, "content": content}, SMS.dimensions)


def _minute_now() -> int:
    return int(time.time() // 60)


def _until_written(service: str, decided: int, seconds: float = 10) -> None:
    """Until the store holds ``decided`` decisions in its last two minutes (the calls may
    have crossed a minute's edge: the caller then sends them again): each worker writes
    its counts at most every ``INTERVAL`` seconds (bounded polling)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        read = httpx.get(f"{service}/v1/stats/history").json()
        allowed, denied = _series(read)["sms", None]
        if sum(allowed[-2:]) + sum(denied[-2:]) >= decided:
            return
        time.sleep(INTERVAL)
    raise AssertionError(f"the store never held {decided} decisions this minute")


def _now_counts(service: str) -> tuple[dict[str, int], dict[Any, tuple[int, int]]]:
    """The keys denied in the current minute, and each series' current minute."""
    top = httpx.get(f"{service}/v1/stats/top?minutes=1").json()
    series = _series(httpx.get(f"{service}/v1/stats/history").json())
    return (
        {row["key"]: row["denied"] for row in top["keys"]},
        {name: (allowed[-1], denied[-1]) for name, (allowed, denied) in series.items()},
    )


def _written(service: str) -> int:
    """The policy's decisions in the last two minutes, as :func:`_until_written` sums them."""
    allowed, denied = _series(httpx.get(f"{service}/v1/stats/history").json())["sms", None]
    return sum(allowed[-2:]) + sum(denied[-2:])


@pytest.mark.slow  # a real freqguard serve, a real browser, seconds each
def test_two_workers_share_the_counts_exactly(service: str) -> None:
    """The counts of a sequence of calls, read from either worker, are the store's: each
    worker's, added up. A sequence that crossed a minute's edge is sent again; what it left
    in the new minute is read before the next one starts, and taken off (the CI run that
    met such an edge counted the leftovers as the new sequence's)."""
    hit = f"{service}/v1/policies/sms/hit"
    for attempt in range(3):
        minute = _minute_now()
        keys_before, series_before = _now_counts(service)
        already = _written(service)  # in the last two minutes: what _until_written sums
        answers = []
        for recipient in ("a", "b"):  # 3/minute per recipient (the SMS of sms_config)
            one = {"context": {"recipient": f"{recipient}{attempt}", "content": "x"}}
            # each on a new connection, which either worker may accept
            answers += [httpx.post(hit, json=one).json()["allowed"] for _ in range(5)]
        batch = {"contexts": [{"recipient": f"c{attempt}", "content": "x"}] * 4}
        batched = httpx.post(f"{service}/v1/policies/sms/hit-many", json=batch).json()
        _until_written(service, 14 + already)
        reads = [httpx.get(f"{service}/v1/stats/history").json() for _ in range(6)]
        keys_after, _ = _now_counts(service)
        if _minute_now() == minute:
            break
    else:
        raise AssertionError("three sequences in a row crossed a minute's edge")
    assert answers == [True, True, True, False, False] * 2
    assert [d["allowed"] for d in batched["decisions"]] == [True, True, True, False]
    mine = {_digest(f"a{attempt}"): 2, _digest(f"b{attempt}"): 2, _digest(f"c{attempt}"): 1}
    assert {key: keys_after.get(key, 0) - keys_before.get(key, 0) for key in mine} == mine
    assert {k: v for k, v in keys_after.items() if k not in mine} == keys_before
    assert httpx.get(f"{service}/v1/stats/top").json()["digested"] is False  # no tokens
    untouched = [0] * 59 if attempt == 0 else None  # a crossed sequence left counts before
    for read in reads:  # whichever worker answered
        assert read["minutes"][-1] == minute * 60
        series = _series(read)
        for rule, allowed, denied in [(None, 9, 5), ("rcpt-1m", 9, 5), ("content-59s", 14, 0)]:
            got_allowed, got_denied = series["sms", rule]
            was_allowed, was_denied = series_before.get(("sms", rule), (0, 0))
            assert (got_allowed[-1] - was_allowed, got_denied[-1] - was_denied) == (
                allowed,
                denied,
            )
            if untouched is not None:
                assert got_allowed[:-1] == got_denied[:-1] == untouched


def _one_rule(directory: Path) -> Path:
    """A configuration on memory:// (one worker): policy sms, 2/minute per recipient."""
    config = directory / "sms.toml"
    config.write_text(
        'backend = "memory://"\n[[policy]]\nname = "sms"\n'
        'rules = [{ rate = "2/minute", by = "recipient", name = "rcpt-1m" }]\n'
    )
    return config


@pytest.mark.slow  # a real freqguard serve, a real browser, seconds each
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (CI installs it)")
def test_the_page_charts_each_policy_and_refreshes(tmp_path: Path) -> None:
    config = _one_rule(tmp_path)
    totals = """[...document.querySelectorAll('svg.chart polyline')].map((line) =>
      line.dataset.values.split(',').map(Number).reduce((a, b) => a + b, 0))"""
    with serving(config) as served, Browser(tmp_path / "profile") as page:
        hit = f"{served.url}/v1/policies/sms/hit"
        for _ in range(3):
            httpx.post(hit, json={"context": {"recipient": "a"}})
        page.open(served.url + "/")
        assert page.run("document.querySelectorAll('svg.chart').length") == 1
        assert page.run(totals) == [2, 1]  # allowed, denied
        title = page.run("document.querySelector('.history-title').textContent")
        assert title == "sms: 2 allowed, 1 denied (denied by rcpt-1m 1)"
        top = "[...document.querySelectorAll('#top tbody td')].map((td) => td.textContent)"
        key = context_digest({"recipient": "a"}, ("recipient",))
        assert page.run(top) == ["sms", key, "1"]  # a digest, never the context
        page.open(served.url + "/?policy=sms&recipient=a")  # a context looked up: matched
        page.until("document.body.dataset.ready === '1'", "the page", seconds=20)
        assert page.run(top) == ["sms", "recipient=a", "1"]
        assert "denied 1 times in the last 5 minutes" in page.run("$('answer').textContent")
        httpx.post(hit, json={"context": {"recipient": "b"}})
        # the page asks again every five seconds: polled, bounded
        page.until(f"JSON.stringify({totals}) === '[3,1]'", "the refreshed chart", seconds=20)


def test_top_keys_are_digests_without_the_token_and_forget_after_their_minutes() -> None:
    clock = ManualClock(START)
    guard = AsyncGuard(MemoryBackend(), [SMS], clock=clock)
    auth = {"authorization": "Bearer t0ken"}

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=create_app(guard, ("t0ken",)))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            for recipient, hits in (("a", 5), ("b", 3), ("c", 1)):
                batch = {"contexts": [{"recipient": recipient, "content": "x"}] * hits}
                await http.post("/v1/policies/sms/hit-many", json=batch, headers=auth)
            answers = [
                await http.get("/v1/stats/top", headers=auth),
                await http.get("/v1/stats/top"),
                await http.get("/v1/stats/top?minutes=16"),
            ]
            clock.advance(5 * 60)
            answers.append(await http.get("/v1/stats/top?minutes=5", headers=auth))
            return answers

    raw, digested, bad, later = asyncio.run(run())
    assert raw.json() == {
        "minutes": 5,
        "digested": False,
        "keys": [
            {"policy": "sms", "key": _digest("a"), "denied": 3},
            {"policy": "sms", "key": _digest("b"), "denied": 1},
        ],
    }
    assert digested.json()["digested"] is True
    hidden = [row["key"] for row in digested.json()["keys"]]
    assert [len(k) for k in hidden] == [16, 16]
    assert not {_digest("a"), _digest("b")} & set(hidden)  # no context matches without one
    assert bad.status_code == 422
    assert bad.json()["field"] == "minutes"
    assert later.json()["keys"] == []


def test_the_top_list_is_bounded() -> None:
    from collections import Counter

    from freqguard.service.history import TOP_KEPT, bounded

    many = Counter({f"k{i}": i for i in range(TOP_KEPT * 3)})
    kept = bounded(many)
    assert len(kept) == TOP_KEPT
    assert min(kept.values()) == TOP_KEPT * 2


@pytest.mark.parametrize("store", ["redis", "cluster"])
def test_the_history_and_top_keys_on_a_redis_store(
    store: str, request: pytest.FixtureRequest
) -> None:
    """The counts and the top keys written and read back on a standalone server and on a
    Redis Cluster (each key of the history in one slot: one policy's keys share a tag)."""
    from freqguard.backends.tallies import RedisTallies
    from freqguard.backends.urls import async_backend_from_url
    from freqguard.service.history import history_for

    if store == "redis":
        url = request.getfixturevalue("redis_server").url
    else:
        url = "redis+cluster://" + request.getfixturevalue("redis_cluster")[0].url.split("//")[1]
    prefix = f"hist{time.monotonic_ns()}"  # apart from the session's other tests

    async def run() -> tuple[Any, Any]:
        guard = AsyncGuard(async_backend_from_url(url), [SMS], prefix=prefix)
        history = history_for(guard)
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


@pytest.mark.parametrize("value", ["", "no", "OFF", "0", "off " * 30])
def test_a_history_setting_that_is_neither_on_nor_off_is_refused(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from freqguard.errors import ConfigError
    from freqguard.service import HISTORY_ENV, history_from_env

    monkeypatch.setenv(HISTORY_ENV, value)
    with pytest.raises(ConfigError, match=f"{HISTORY_ENV} is on or off, got "):
        history_from_env()
    monkeypatch.setenv(HISTORY_ENV, "off")
    assert history_from_env() is False
    monkeypatch.delenv(HISTORY_ENV)
    assert history_from_env() is True


@pytest.mark.slow  # a real freqguard serve, a real browser, seconds each
def test_serve_history_off_keeps_none(tmp_path: Path, redis_server: RedisServer) -> None:
    flush([redis_server])
    with serving(sms_config(tmp_path, redis_server.port), "--history", "off") as served:
        hit = httpx.post(
            f"{served.url}/v1/policies/sms/hit",
            json={"context": {"recipient": "a", "content": "x"}},
            timeout=5,
        )
        assert hit.status_code == 200, hit.text
        read = httpx.get(f"{served.url}/v1/stats/history", timeout=5)
        assert read.status_code == 404
        assert "history is off" in read.json()["detail"]
    assert not [k for k in redis_server.client.keys("*") if b":stats:" in k]


@pytest.mark.slow  # a real freqguard serve, a real browser, seconds each
@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium)")
def test_with_the_history_off_the_page_says_so(tmp_path: Path) -> None:
    """Not a quiet chart nor an empty top list: both say the history is off."""
    config = _one_rule(tmp_path)
    with (
        serving(config, "--history", "off") as served,
        Browser(tmp_path / "profile") as page,
    ):
        for _ in range(3):
            httpx.post(f"{served.url}/v1/policies/sms/hit", json={"context": {"recipient": "a"}})
        page.open(served.url + "/")
        off = "(the decisions' history is off (freqguard serve --history off))"
        page.until(f"document.getElementById('top-note').textContent === {json.dumps(off)}", "top")
        assert page.run("document.getElementById('history-at').textContent") == off
        assert page.run("document.querySelectorAll('svg.chart').length") == 0


@pytest.mark.parametrize(
    ("context", "field"),
    [
        ({"recipient": "+1555"}, "context.content"),  # a digest of part of a key is no key
        ({"recipient": "+1555", "content": "x", "plan": "pro"}, "context.plan"),
        ({"recipient": 1.5, "content": "x"}, "context.recipient"),
    ],
)
def test_a_context_s_denials_refuse_a_context_that_is_no_key(
    context: dict[str, Any], field: str
) -> None:
    """``denials`` asks no guard: the service names what is missing or unknown itself."""
    app = create_app(AsyncGuard(MemoryBackend(), [SMS], clock=ManualClock(1_700_000_000)))

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return await http.post("/v1/policies/sms/denials", json={"context": context})

    answer = asyncio.run(run())
    assert (answer.status_code, answer.json()["field"]) == (422, field)
    assert "recipient" in answer.json()["detail"] or field == "context.recipient"


def test_a_history_that_cannot_be_written_is_logged_once_a_while(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counts the store refuses to take never fail a decision; the failure is logged at
    once, then not again within the minute (``observe.base.RepeatFilter``), and again
    once the minute has passed."""
    guard = AsyncGuard(MemoryBackend(), [SMS], clock=ManualClock(START))
    history = history_for(guard)
    context: dict[str, Any] = {"recipient": "a", "content": "x"}

    async def refused(*args: object) -> None:
        raise ConnectionError("the store is down")

    monkeypatch.setattr(history, "_add", refused)

    async def writes(times: int) -> None:
        decision = await guard.hit("sms", **context)
        for _ in range(times):
            await history.record("sms", [decision], [context], ("recipient", "content"))
            await history.flush()

    def logged() -> int:
        return sum("history was not written" in r.getMessage() for r in caplog.records)

    with caplog.at_level(logging.WARNING, logger="freqguard.service"):
        asyncio.run(writes(3))
        assert logged() == 1
        monkeypatch.setattr(history._failures, "quiet", 0.0)  # the minute has passed
        asyncio.run(writes(1))
        assert logged() == 2
