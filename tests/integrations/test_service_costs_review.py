"""An adversarial review of 33ca5c9 and 92ec053 (design note 107: a cost judged by the capacity
as decided for its hit) at the decision service, in process (httpx on the ASGI app, a
store that fails as a dead Redis does, a ManualClock). Each finding a failing test."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from freqguard import AsyncGuard, ManualClock, MemoryBackend, Policy, Rule, TierRates
from freqguard.policy import Fallback
from freqguard.service import create_app
from tests.conftest import START
from tests.operations.failure_rig import Switch


def _hits_while_down(policy: Policy, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    """``POST /v1/policies/{name}/hit`` of each body, the store down throughout."""
    clock = ManualClock(START)
    store = Switch(clock)
    store.down = True
    guard = AsyncGuard(store, [policy], clock=clock, breaker=None)

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=create_app(guard))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            path = f"/v1/policies/{policy.name}/hit"
            return [await http.post(path, json=body) for body in bodies]

    return asyncio.run(run())


def test_an_outage_with_a_shared_out_fallback_is_not_a_422_blaming_a_tier_s_cost() -> None:
    """Policy ``t``: ``Rule("10/minute", by="u", name="r", rate_for=TierRates("plan",
    {"pro": "100/minute"}))``, ``on_error=Fallback(MemoryBackend(), workers=2)``; the store
    down. ``POST /v1/policies/t/hit {"context": {"u": "a", "plan": "free"}, "cost": 8}``
    answers **422** ``{"field": "cost", "detail": "cost: cost 8 exceeds the capacity 5 of
    rule 'r' (policy 't') for this hit: no hit of that cost could ever be allowed"}``: the
    client is told its cost is invalid, though the store admits it (free: 10) and the
    same client's retry once the store is back succeeds. The same body on a plain rule's
    policy (``Rule("10/minute", by="u")``, same fallback) answers 200 ``{"allowed": false,
    "source": "fail-closed"}`` (asserted first). Cause: ``PolicyPlan.fits`` skips a rule
    with ``rate_for`` since 92ec053, so the hit reaches the shared-out fallback, whose
    denial ``check_fits`` raises. Expected: 200, ``allowed`` false, ``source``
    ``"fail-closed"``."""
    body = {"context": {"u": "a", "plan": "free"}, "cost": 8}
    plain = Policy(
        "p", Rule("10/minute", by="u", name="r"), on_error=Fallback(MemoryBackend(), workers=2)
    )
    [reference] = _hits_while_down(plain, [{"context": {"u": "a"}, "cost": 8}])
    assert reference.status_code == 200, reference.text
    assert (reference.json()["allowed"], reference.json()["source"]) == (False, "fail-closed")
    tiered = Policy(
        "t",
        Rule("10/minute", by="u", name="r", rate_for=TierRates("plan", {"pro": "100/minute"})),
        on_error=Fallback(MemoryBackend(), workers=2),
    )
    [answer] = _hits_while_down(tiered, [body])
    assert answer.status_code == 200, answer.text
    assert (answer.json()["allowed"], answer.json()["source"]) == (False, "fail-closed")
