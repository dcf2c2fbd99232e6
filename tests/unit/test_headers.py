"""Header profiles: valid Structured Fields, whole seconds rounded up, Retry-After >= t."""

from __future__ import annotations

import pytest
from http_sfv.item import Item
from http_sfv.list import List

from freqguard import ConfigError, Decision, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.decision import binding_rule
from freqguard.headers import whole_seconds
from tests.conftest import SMS


@pytest.fixture
def guard(clock: ManualClock) -> Guard:
    odd = Rule("3/second", by="k", name="weird-name")
    return Guard(MemoryBackend(), [SMS, Policy("q", odd)], clock=clock)


def test_ietf_headers_parse_as_structured_fields(guard: Guard, clock: ManualClock) -> None:
    guard.hit("sms", recipient="r", content="c")
    clock.advance(0.4)
    decision = guard.hit("sms", recipient="r", content="c")
    headers = decision.headers("ietf")
    policies = List()
    policies.parse(headers["RateLimit-Policy"].encode())
    assert [(item.value, item.params["q"], item.params["w"]) for item in policies] == [
        ("rcpt-1m", 15, 60),
        ("rcpt-1d", 50, 86400),
        ("content-59s", 2, 59),
        ("content-59m", 5, 3540),
    ]
    state = Item()
    state.parse(headers["RateLimit"].encode())
    assert state.value == "content-59s"  # the rule nearest exhaustion
    assert state.params["r"] == 0
    assert state.params["t"] == 59  # 59 - 0.4 s, rounded up
    assert "Retry-After" not in headers


def test_denied_headers_retry_after_is_never_earlier_than_t(
    guard: Guard, clock: ManualClock
) -> None:
    for _ in range(3):
        decision = guard.hit("sms", recipient="r", content="c")
        clock.advance(0.25)
    assert not decision.allowed
    headers = decision.headers()
    state = Item()
    state.parse(headers["RateLimit"].encode())
    assert int(headers["Retry-After"]) >= state.params["t"]
    assert int(headers["Retry-After"]) == 59  # 58.75 rounded up


def test_sf_strings_are_escaped() -> None:
    from freqguard.headers import _sf_string

    item = Item()
    item.parse(_sf_string('we"ird\\name').encode())
    assert item.value == 'we"ird\\name'


def test_other_profiles(guard: Guard) -> None:
    decision = guard.hit("sms", recipient="r", content="c")
    assert decision.headers("draft6") == {
        "RateLimit-Limit": "2",
        "RateLimit-Remaining": "1",
        "RateLimit-Reset": "59",
    }
    assert decision.headers("x-ratelimit")["X-RateLimit-Remaining"] == "1"
    assert decision.headers("none") == {}
    with pytest.raises(ConfigError, match="unknown header profile"):
        decision.headers("rfc")


def test_ietf_headers_name_the_decisions_own_binding_rule() -> None:
    # denied by A (2 left, but a hit of cost 3 fits only in 100 s) and by B (0 left, 5 s):
    # the decision reports A (the denier that frees up last); the header must agree
    a = Rule("10 per 100 seconds", by="k", name="a")
    b = Rule("5/second", by="k", name="b")
    raw = ((a, 2, 100_000_000, 100_000_000), (b, 0, 5_000_000, 5_000_000))
    decision = Decision("p", False, 100.0, (a, b), raw)
    state = Item()
    state.parse(decision.headers("ietf")["RateLimit"].encode())
    assert (state.value, state.params["r"], state.params["t"]) == (
        "a",
        decision.remaining,
        whole_seconds(decision.retry_after),
    )
    assert decision.remaining == 2
    assert decision.headers("draft6")["RateLimit-Remaining"] == "2"


def test_ietf_headers_agree_with_the_decision_on_real_hits(
    guard: Guard, clock: ManualClock
) -> None:
    for step in range(40):
        decision = guard.hit("sms", cost=1 + step % 2, recipient="r", content=f"c{step % 2}")
        clock.advance(0.7)
        state = Item()
        state.parse(decision.headers("ietf")["RateLimit"].encode())
        rule = binding_rule(decision.raw)[0]
        assert (state.value, state.params["r"]) == (rule.id, decision.remaining)
