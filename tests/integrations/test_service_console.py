"""The operator's console in process (httpx on the ASGI app): ``/v1/policies`` lists each
rate as written, with its lease, zone, caps, and the policy's priorities and quiet hours."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
import pytest

from freqguard import AsyncGuard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.options import QuietHours
from freqguard.rates import Rate, parse_rate, written
from freqguard.service import create_app

PROMO = Policy(
    "promo",
    Rule("50/day", by="user", calendar=True, tz_from="tz", name="daily"),
    Rule("10 concurrent", by="user", lease=60, name="open"),
    Rule("3 per 2 hours", by="user", caps={"marketing": 1}, name="two-hours"),
    Rule("5/second", by="user", strategy="token-bucket", burst=8, name="burst"),
    priorities=["transactional", "marketing"],
    quiet=QuietHours("21:00", "08:00", tz="Europe/Berlin", exempt=["transactional"]),
)


def _get(guard: AsyncGuard, path: str) -> httpx.Response:
    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app(guard))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return await http.get(path)

    return asyncio.run(run())


def test_policies_list_rates_as_written_with_priorities_and_quiet_hours() -> None:
    guard = AsyncGuard(MemoryBackend(), [PROMO], clock=ManualClock(1_700_000_000))
    listed: dict[str, Any] = _get(guard, "/v1/policies").json()["policies"][0]
    rules = {r["rule"]: r for r in listed["rules"]}
    assert listed["priorities"] == ["transactional", "marketing"]
    assert listed["quiet"] == {
        "start": "21:00",
        "end": "08:00",
        "zone": "Europe/Berlin",
        "exempt": ["transactional"],
    }
    assert rules["daily"]["written"] == "50/day"
    assert rules["daily"]["zone"] == "from tz"
    assert (rules["open"]["written"], rules["open"]["lease"]) == ("10 concurrent", 60)
    assert rules["two-hours"]["written"] == "3 per 2 hours"
    assert rules["two-hours"]["caps"] == {"marketing": 1}
    assert (rules["burst"]["written"], rules["burst"]["burst"]) == ("5/second", 8)
    assert rules["burst"]["rate"] == "5/second"  # as the limits calls say it
    assert rules["quiet-hours"]["written"] == "quiet hours"


def test_a_rule_s_listed_rate_is_what_the_limits_call_answers_for_a_key_without_one() -> None:
    """The page tells a key's own limit from its rule's rate by comparing the two texts:
    ``/v1/policies``' ``rate`` and the limits call's must be said alike (as written), for a
    calendar rule, a bucket and a lease too."""
    rules = [r for r in PROMO.rules if r.quiet is None]
    policy = Policy("promo", *rules, priorities=PROMO.priorities)
    guard = AsyncGuard(MemoryBackend(), [policy], clock=ManualClock(1_700_000_000))
    listed = {
        r["rule"]: r["rate"] for r in _get(guard, "/v1/policies").json()["policies"][0]["rules"]
    }

    async def run() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=create_app(guard))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            answer = await http.post("/v1/policies/promo/limits", json={"context": {"user": "u"}})
            limits: dict[str, Any] = answer.json()["limits"]
            return limits

    assert asyncio.run(run()) == listed
    assert listed["daily"] == "50/day"


@pytest.mark.parametrize(
    "text",
    ["2/minute", "50/day", "2 per 59 seconds", "3 per 2 hours", "7 per 90 minutes", "1/second"],
)
def test_a_written_rate_is_its_text_and_parses_back(text: str) -> None:
    assert written(parse_rate(text)) == text
    assert parse_rate(written(parse_rate(text))) == parse_rate(text)


def test_a_window_of_a_fraction_of_a_second_is_said_as_rate_says_it() -> None:
    rate = Rate(3, timedelta(milliseconds=1500))
    assert written(rate) == "3 per 1.5 seconds"


SMS = Policy("sms", Rule("2/minute", by="recipient", name="rcpt-1m"))


def _send(tokens: tuple[str, ...], *calls: tuple[str, str, Any, dict[str, str]]) -> list[int]:
    guard = AsyncGuard(MemoryBackend(), [SMS], clock=ManualClock(1_700_000_000))

    async def run() -> list[int]:
        transport = httpx.ASGITransport(app=create_app(guard, tokens))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            out = []
            for method, path, body, headers in calls:
                sent = {"content-type": "application/json", **headers}
                answer = await http.request(method, path, content=body, headers=sent)
                out.append(answer.status_code)
            return out

    return asyncio.run(run())


def test_the_page_s_writes_are_the_api_s_calls_with_its_gate() -> None:
    """What the page sends (a PUT and a DELETE of JSON from its own origin, the token as a
    bearer) passes the gate; the same call without the token, from another origin, or
    not JSON, does not."""
    path = "/v1/policies/sms/limits/rcpt-1m"
    put = b'{"context": {"recipient": "a"}, "rate": "5/minute", "ttl": null}'
    clear = b'{"context": {"recipient": "a"}}'
    bearer = {"authorization": "Bearer t0ken"}
    page = {**bearer, "origin": "http://t", "sec-fetch-site": "same-origin"}
    assert _send(
        ("t0ken",),
        ("PUT", path, put, page),
        ("DELETE", path, clear, page),
        ("PUT", path, put, {"origin": "http://t"}),
        ("PUT", path, put, {**bearer, "origin": "http://evil.example"}),
        ("PUT", path, put, {**bearer, "sec-fetch-site": "cross-site"}),
        ("PUT", path, put, {**bearer, "content-type": "text/plain"}),
    ) == [200, 200, 401, 403, 403, 415]


def test_the_page_sends_every_call_through_one_json_function() -> None:
    """The page's script calls ``fetch`` in one place, which sends JSON and the token; its
    writes are the limits routes' PUT and DELETE."""
    from freqguard.service.app import PAGE

    assert PAGE.count("fetch(") == 5  # send(), and the four open GETs it reads
    assert 'fetch("/v1/policies")' in PAGE
    assert 'fetch("/v1/stats")' in PAGE
    assert 'fetch("/v1/stats/history")' in PAGE
    assert '{"content-type": "application/json"}' in PAGE
    assert 'headers.authorization = "Bearer " + token' in PAGE
    assert 'writeLimit("PUT"' in PAGE
    assert 'writeLimit("DELETE"' in PAGE
