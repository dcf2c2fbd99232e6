"""HeaderPlan: the headers built once per policy say exactly what they said when they were
built per request, as text and as ASGI byte pairs; the memoised peer keeps each client_ip's
own trust."""

from __future__ import annotations

import pytest

from freqguard import Decision, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.decision import binding_rule
from freqguard.headers import PROFILES, _sf_string, header_plan, whole_seconds
from freqguard.integrations._http import RequestInfo
from freqguard.integrations.starlette import client_ip

POLICY = Policy(
    "p",
    Rule("3/second", by="k", name="fast"),
    Rule("5 per 10 seconds", by="k", strategy="fixed-window"),
    Rule("4/minute", by="k", strategy="gcra", burst=2),
    Rule("2/second", by="k", shadow=True, name="watch"),
)


def reference(decision: Decision, profile: str) -> dict[str, str]:
    """The headers as ``rate_limit_headers`` wrote them per request, before HeaderPlan."""
    if profile == "none":
        return {}
    wait = whole_seconds(decision.reset_after if decision.allowed else decision.retry_after)
    headers: dict[str, str] = {}
    if profile == "ietf":
        rules = [entry[0] for entry in decision.raw]
        headers["RateLimit-Policy"] = ", ".join(
            f"{_sf_string(r.id)};q={r.limit};w={whole_seconds(r.rate.window_seconds)}"
            for r in rules
            if not r.shadow
        )
        binding = binding_rule(decision.raw)[0]
        headers["RateLimit"] = f"{_sf_string(binding.id)};r={decision.remaining};t={wait}"
    else:
        prefix = "RateLimit" if profile == "draft6" else "X-RateLimit"
        headers[f"{prefix}-Limit"] = str(decision.limit)
        headers[f"{prefix}-Remaining"] = str(decision.remaining)
        headers[f"{prefix}-Reset"] = str(wait)
    if not decision.allowed:
        headers["Retry-After"] = str(wait)
    return headers


def _decisions(clock: ManualClock) -> list[Decision]:
    guard = Guard(MemoryBackend(), [POLICY], clock=clock)
    decisions = []
    for step in range(30):
        decisions.append(guard.hit("p", cost=1 + step % 2, k="a"))
        clock.advance(0.35)
    assert {d.allowed for d in decisions} == {True, False}
    return decisions


@pytest.mark.parametrize("profile", PROFILES)
def test_the_plan_says_what_the_per_request_headers_said(clock: ManualClock, profile: str) -> None:
    plan = header_plan(POLICY.rules, profile)
    for decision in _decisions(clock):
        expected = reference(decision, profile)
        assert decision.headers(profile) == expected
        assert plan.fields(decision) == expected
        assert plan.raw(decision) == [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in expected.items()
        ]


def test_a_plan_serves_an_equal_policy_registered_apart(clock: ManualClock) -> None:
    # the guard holds its own Rule objects: the plan finds the binding rule by id
    copy = Policy("p", *(Rule(r.rate, by=r.by, name=r.name) for r in POLICY.rules[:1]))
    decision = Guard(MemoryBackend(), [copy], clock=clock).hit("p", k="a")
    plan = header_plan(POLICY.rules[:1], "ietf")
    assert plan.fields(decision) == reference(decision, "ietf")


def test_each_client_ip_keeps_its_own_trust() -> None:
    def info(peer: str) -> RequestInfo:
        return RequestInfo("GET", "/", lambda: {"x-forwarded-for": ["203.0.113.9"]}, peer)

    behind_proxy, direct = client_ip(["10.0.0.0/8"]), client_ip()
    for _ in range(2):  # the second time from the memo
        assert behind_proxy(info("10.0.0.1")) == {"client": "203.0.113.9"}
        assert direct(info("10.0.0.1")) == {"client": "10.0.0.1"}
        assert behind_proxy(info("unix:/run/app.sock")) == {"client": "unix:/run/app.sock"}
        assert direct(info("")) == {"client": ""}
