"""The service's ``limits`` answer writes each rule's rate as ``PUT .../limits/RULE`` takes
it, a concurrency rule's ``N concurrent`` (its lease apart) included: an answer read back
and sent again sets what it said (as ``freqguard limit show``, ``test_cli_limits_written.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from freqguard import AsyncGuard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.service import create_app


def test_limits_write_a_concurrency_rule_as_a_limit_is_set() -> None:
    llm = Policy(
        "llm",
        Rule("5 concurrent", by="user", lease=30, name="inflight"),
        Rule("2 per 59 seconds", by="user", name="calls"),
    )
    guard = AsyncGuard(MemoryBackend(), [llm], clock=ManualClock(1_700_000_000))
    body = {"context": {"user": "u1"}}

    async def run() -> list[Any]:
        transport = httpx.ASGITransport(app=create_app(guard))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            shown = (await http.post("/v1/policies/llm/limits", json=body)).json()["limits"]
            puts = [
                await http.put(f"/v1/policies/llm/limits/{rule}", json={**body, "rate": rate})
                for rule, rate in shown.items()
            ]
            lowered = {**body, "rate": "2 concurrent"}
            put = await http.put("/v1/policies/llm/limits/inflight", json=lowered)
            return [shown, [p.status_code for p in puts], put.json()["limits"]]

    shown, statuses, after = asyncio.run(run())
    assert shown == {"inflight": "5 concurrent", "calls": "2 per 59 seconds"}
    assert statuses == [200, 200]
    assert after["inflight"] == "2 concurrent"


def test_a_limit_s_rate_refusals_speak_of_one_rate_and_no_python() -> None:
    """An operator's first hour: ``"rate": "banana"`` was refused saying rates may be
    "several joined by ';', ',' or '|'", and ``"1/2 minutes;5/hour"`` then "expected
    exactly one rate ...; use parse_rates() or one Rule per rate": a Python hint in an HTTP
    answer, after a grammar that offered what the call refuses."""
    sms = Policy("sms", Rule("2/minute", by="recipient", name="rcpt"))
    guard = AsyncGuard(MemoryBackend(), [sms], clock=ManualClock(1_700_000_000))
    body = {"context": {"recipient": "r1"}}

    async def run() -> list[Any]:
        transport = httpx.ASGITransport(app=create_app(guard))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return [
                (await http.put("/v1/policies/sms/limits/rcpt", json={**body, "rate": r})).json()
                for r in ("banana", "1/2 minutes;5/hour")
            ]

    banana, two = asyncio.run(run())
    assert banana["field"] == two["field"] == "rate"
    assert "several" not in banana["detail"]
    assert "parse_rates" not in two["detail"]
    assert "Rule" not in two["detail"]
    assert "one rate" in two["detail"]
