"""The decision service's API in process (httpx on the ASGI app, a MemoryBackend and a
ManualClock): hits and their denials, a batch, peek, refund, reset and limits, unknown
names, oversize bodies and batches, and the tokens. The 422s of bodies it cannot take are
in ``test_service_bad_bodies.py``; a real ``freqguard serve`` in
``test_service_served.py``; the rig is ``service_rig.py``."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx

from freqguard import AsyncGuard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.service import MAX_BODY, create_app
from tests.integrations.service_rig import _call

SCRIPT = Path(sys.executable).parent / "freqguard"


def _hit(context: dict[str, Any], **extra: Any) -> tuple[str, str, Any, dict[str, str]]:
    return ("POST", "/v1/policies/sms/hit", {"context": context, **extra}, {})


def test_a_hit_is_allowed_then_denied_with_the_rule_that_said_no() -> None:
    ctx = {"recipient": "+1555", "content": "hi"}
    first, second = _call([_hit(ctx), _hit(ctx)])
    assert first.status_code == 200
    assert first.json()["allowed"] is True
    assert first.json()["remaining"] == 0
    assert second.status_code == 200  # a denial is an answer, not an error
    body = second.json()
    assert body["allowed"] is False
    assert body["denied_by"] == ["content-59s"]
    assert body["retry_after"] == 59.0
    assert [r["rule"] for r in body["rules"]] == ["rcpt-1m", "content-59s"]


def test_a_refund_of_a_policy_with_leases_is_a_422_saying_the_service_holds_none() -> None:
    """A refund by context would give back another caller's lease: refused, nothing given
    back (issue: a third lease was admitted under "2 concurrent"); in an HTTP client's
    words (it pointed to ``guard.release(decision)``, a Python call it cannot make)."""
    llm = Policy("llm", Rule("2 concurrent", by="user", lease=60))
    guard = AsyncGuard(MemoryBackend(), [llm], clock=ManualClock(1_700_000_000))

    async def run() -> tuple[httpx.Response, int]:
        transport = httpx.ASGITransport(app=create_app(guard))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            for _ in range(2):
                assert (await guard.take_lease("llm", user="u")).allowed
            body = {"context": {"user": "u"}}
            answer = await http.post("/v1/policies/llm/refund", json=body)
            return answer, (await guard.peek("llm", user="u")).remaining

    answer, remaining = asyncio.run(run())
    assert answer.status_code == 422
    assert "counts calls in flight" in answer.json()["detail"]
    assert remaining == 0  # both leases still held


def test_a_batch_peek_refund_reset_and_limits() -> None:
    ctx = {"recipient": "+1555", "content": "hi"}
    batch = {"contexts": [ctx, ctx, {"recipient": "+1555", "content": "yo"}]}
    responses = _call(
        [
            ("POST", "/v1/policies/sms/hit-many", batch, {}),
            ("POST", "/v1/policies/sms/peek", {"context": ctx}, {}),
            ("POST", "/v1/policies/sms/refund", {"context": ctx, "cost": 1}, {}),
            ("POST", "/v1/policies/sms/reset", {"context": ctx}, {}),
            ("POST", "/v1/policies/sms/peek", {"context": ctx}, {}),
            (
                "PUT",
                "/v1/policies/sms/limits/rcpt-1m",
                {"context": {"recipient": "+1555"}, "rate": "5/minute", "ttl": 60},
                {},
            ),
            (
                "PUT",
                "/v1/policies/sms/limits/content-59s",
                {"context": {"recipient": "+1555"}, "rate": None},
                {},
            ),
            ("DELETE", "/v1/policies/sms/limits/rcpt-1m", {"context": {"recipient": "+1555"}}, {}),
            ("POST", "/v1/policies/sms/limits", {"context": {"recipient": "+1555"}}, {}),
        ]
    )
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    decisions = responses[0].json()["decisions"]
    assert [d["allowed"] for d in decisions] == [True, False, True]
    assert responses[1].json()["allowed"] is False
    assert responses[3].json() == {"reset": True, "rules": ["content-59s"]}
    assert responses[4].json()["remaining"] == 1
    assert responses[5].json()["limits"]["rcpt-1m"] == "5/minute"
    assert responses[6].json()["limits"]["content-59s"] is None  # exempt
    assert responses[8].json()["limits"] == {"rcpt-1m": "2/minute", "content-59s": None}


def test_unknown_names_oversize_bodies_and_batches() -> None:
    ctx = {"recipient": "a", "content": "x"}
    responses = _call(
        [
            ("POST", "/v1/policies/nope/hit", {"context": ctx}, {}),
            (
                "PUT",
                "/v1/policies/sms/limits/nope",
                {"context": {"recipient": "a"}, "rate": "1/minute"},
                {},
            ),
            ("POST", "/v1/policies/sms/hit", b"{" + b" " * MAX_BODY + b"}", {}),
            ("POST", "/v1/policies/sms/hit-many", {"contexts": [ctx] * 1001}, {}),
            ("POST", "/v1/policies/sms/hit-many", {"contexts": []}, {}),
        ]
    )
    assert [r.status_code for r in responses] == [404, 404, 413, 422, 422]
    assert "no policy 'nope'" in responses[0].json()["detail"]


def test_tokens_guard_every_call_but_health_and_the_document() -> None:
    ctx = {"recipient": "a", "content": "x"}
    hit = ("POST", "/v1/policies/sms/hit", {"context": ctx})
    responses = _call(
        [
            (*hit, {}),
            (*hit, {"authorization": "Bearer wrong"}),
            (*hit, {"authorization": "Basic s3cret"}),
            (*hit, {"authorization": "Bearer s3cret"}),
            ("GET", "/healthz", b"", {}),
            ("GET", "/openapi.json", b"", {}),
        ],
        tokens=("s3cret", "other"),
    )
    assert [r.status_code for r in responses] == [401, 401, 401, 200, 200, 200]
    assert responses[0].headers["www-authenticate"] == "Bearer"
    assert "s3cret" not in responses[1].text
    document = responses[5].json()
    assert document["openapi"] == "3.1.0"
    assert "/v1/policies/{policy}/hit-many" in document["paths"]


def test_a_reset_names_what_it_forgot_and_refuses_what_it_cannot_mean() -> None:
    """Only the states keyed by exactly the context's dimensions, or the rules named; a
    context no rule is keyed by exactly is a 422 on ``context``, a rule on ``rules``."""
    ctx = {"recipient": "+1555", "content": "hi"}
    answers = _call(
        [
            ("POST", "/v1/policies/sms/hit", {"context": ctx}, {}),
            ("POST", "/v1/policies/sms/reset", {"context": {"recipient": "+1555"}}, {}),
            ("POST", "/v1/policies/sms/reset", {"context": {"content": "hi"}}, {}),
            (
                "POST",
                "/v1/policies/sms/reset",
                {"context": {"recipient": "+1555"}, "rules": ["content-59s"]},
                {},
            ),
            ("POST", "/v1/policies/sms/reset", {"context": ctx, "rules": ["nope"]}, {}),
            ("POST", "/v1/policies/sms/peek", {"context": ctx}, {}),
        ],
    )
    assert answers[1].json() == {"reset": True, "rules": ["rcpt-1m"]}
    assert (answers[2].status_code, answers[2].json()["field"]) == (422, "context")
    assert (answers[3].status_code, answers[3].json()["field"]) == (422, "rules")
    assert (answers[4].status_code, answers[4].json()["field"]) == (422, "rules[0]")
    assert [r["remaining"] for r in answers[5].json()["rules"]] == [2, 0]


def test_a_rule_a_per_key_limit_exempts_is_answered_exempt() -> None:
    """A new user's finding: a rule a per-key limit exempts was answered ``"shadow": true``
    only, as a shadow rule is, where ``freqguard inspect`` says ``(exempt)``: an HTTP
    client could not tell the two apart. Now ``exempt`` says which."""
    ctx = {"recipient": "+1555", "content": "hi"}
    responses = _call(
        [
            (
                "PUT",
                "/v1/policies/sms/limits/content-59s",
                {"context": {"recipient": "+1555"}, "rate": None},
                {},
            ),
            ("POST", "/v1/policies/sms/hit", {"context": ctx}, {}),
            ("POST", "/v1/policies/sms/peek", {"context": {**ctx, "recipient": "+1666"}}, {}),
        ]
    )
    exempted = {r["rule"]: (r["shadow"], r["exempt"]) for r in responses[1].json()["rules"]}
    assert exempted == {"rcpt-1m": (False, False), "content-59s": (True, True)}
    plain = {r["rule"]: (r["shadow"], r["exempt"]) for r in responses[2].json()["rules"]}
    assert plain == {"rcpt-1m": (False, False), "content-59s": (False, False)}


def test_a_shadow_rule_is_answered_shadow_not_exempt() -> None:
    import freqguard.service.schema as schema
    from freqguard import Guard

    policy = Policy("p", Rule("1/minute", by="u", name="watch", shadow=True))
    guard = Guard(MemoryBackend(), [policy], clock=ManualClock(1_700_000_000))
    shadows = frozenset(r.id for r in policy.rules if r.shadow)
    [state] = schema.decision(guard.hit("p", u="a"), shadows).rules
    assert (state.shadow, state.exempt) == (True, False)
