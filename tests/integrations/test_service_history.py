"""Decisions over time (``GET /v1/stats/history``) and the keys denied most
(``/v1/stats/top``), in process on memory with a manual clock (the minutes move as the test
says): counts per minute, top keys as digests, bounded and forgotten, a context's denials,
the history switch, and a history that cannot be written. A real ``freqguard serve
--workers 2`` and the page's chart are in ``test_service_history_served.py``; the history
on a Redis store in ``test_service_history_redis.py``; the rig is ``history_rig.py``."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from freqguard import AsyncGuard, ManualClock, MemoryBackend
from freqguard.service import create_app
from freqguard.service.history import MINUTES, History
from tests.integrations.history_rig import SMS, START, _digest, _series


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


def test_a_history_that_cannot_be_written_is_logged_once_a_while(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counts the store refuses to take never fail a decision; the failure is logged at
    once, then not again within the minute (``observe.base.RepeatFilter``), and again
    once the minute has passed."""
    guard = AsyncGuard(MemoryBackend(), [SMS], clock=ManualClock(START))
    history = History(guard)
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
