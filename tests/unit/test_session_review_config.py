"""A review of the Envoy/redis-cell commit (peer keys, tiers by the rule's own dimension, a
policy named once) and of the service's ``exempt``: each test a case the change missed."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rate, Rule, TierRates
from freqguard.config import load
from tests.conftest import START


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "edge.yaml"
    path.write_text(text)
    return path


def test_a_peer_key_hint_does_not_hide_a_missing_required_key(tmp_path: Path) -> None:
    """A policy of an Envoy user's ``replaces`` and no ``rules``: ``replaces`` is close to
    ``rules``, so the missing ``rules`` was left unsaid as "a misspelt one said so
    already", but the peer hint took the did-you-mean's place: nothing told the user the
    policy has no rules."""
    path = _file(tmp_path, "policy:\n  - name: edge\n    replaces: [{name: per-ip}]\n")
    with pytest.raises(ConfigError, match="'rules' is missing"):
        load(path)


def test_a_policys_priorities_error_names_the_policy_once(tmp_path: Path) -> None:
    """Priorities given twice: the place says ``policy 'edge'`` and the message said it
    again (``policy 'edge': policy 'edge' priorities: ...``): ``unnamed`` took off only
    ``policy 'edge': `` and ``policy 'edge' has ``."""
    path = _file(
        tmp_path,
        "policy:\n  - name: edge\n    priorities: [a, a]\n    rules:\n"
        "      - {rate: 10/second, by: u, name: x, only: [a]}\n",
    )
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert str(caught.value).count("policy 'edge'") == 1, str(caught.value)


def test_a_route_limit_may_tier_by_the_key_it_is_keyed_by() -> None:
    """The commit lets a tier pick by the rule's own dimension (one address, one API key at
    a rate of its own), but a route's unkeyed rule tiered by the value its key gives
    (``Limit(..., Rule(..., rate_for=TierRates("x_api_key", ...)), key=header(...))``, the
    docs' per-key example with a tier instead of a run-time limit) is rekeyed with the
    rule's ``reads`` kept, and refused: "reads names values that are no dimension"."""
    from freqguard.integrations.starlette import Limit, header

    rule = Rule("5/minute", name="per-key", rate_for=TierRates("x_api_key", {"k1": "50/minute"}))
    limit = Limit("/api/{rest:path}", rule, key=header("X-API-Key"), name="api")
    assert limit is not None


def test_limits_for_a_value_tiered_by_its_own_dimension_says_its_rate() -> None:
    """``limits_for`` is documented as "every rule's rate ... as it applies now"; for
    ``remote_address=50.0.0.5``, which the rule's own-dimension tier decides at 5/second
    (the file's in-place way of what a per-key limit does), it says the rule's 2/second, as
    does ``freqguard limit show``: an operator reads a rate no hit of that value meets.
    Not fixed here: limits_for reads per-key limits only, not tiers."""
    rule = Rule(
        "2/second",
        by="remote_address",
        strategy="fixed-window",
        name="per-ip",
        rate_for=TierRates("remote_address", {"50.0.0.5": "5/second"}),
    )
    guard = Guard(MemoryBackend(), [Policy("edge", rule)], clock=ManualClock(START))
    assert guard.limits_for("edge", remote_address="50.0.0.5")["per-ip"] == Rate(
        5, timedelta(seconds=1)
    )


def test_a_shadow_rule_a_per_key_limit_exempts_is_answered_shadow_not_exempt() -> None:
    """The review's finding, decided as documented (docs/service.md): ``exempt`` is a rule
    that binds others but not this context; a shadow rule binds none, so a per-key limit
    of none on it changes nothing a client sees: ``shadow`` true, ``exempt`` false (the
    decided rule carries no mark of its limit; ``freqguard inspect`` lists the limit)."""
    import freqguard.service.schema as schema

    watch = Rule("1/minute", by="u", name="watch", shadow=True)
    policy = Policy("p", watch, Rule("5/minute", by="u", name="main"))
    guard = Guard(MemoryBackend(), [policy], clock=ManualClock(START))
    guard.set_limit("p", "watch", None, u="a")
    states = schema.decision(guard.hit("p", u="a"), frozenset({"watch"})).rules
    assert {s.rule: (s.shadow, s.exempt) for s in states} == {
        "watch": (True, False),
        "main": (False, False),
    }


def test_a_rule_of_other_priorities_is_answered_exempt_for_this_hit() -> None:
    """A rule counting only ``marketing``, for a ``transactional`` hit: it binds others
    but not this hit, which is what ``exempt`` says (docs/service.md)."""
    import freqguard.service.schema as schema

    policy = Policy(
        "p",
        Rule("5/minute", by="u", name="main"),
        Rule("1/minute", by="u", name="promo", only=("marketing",)),
        priorities=("transactional", "marketing"),
    )
    guard = Guard(MemoryBackend(), [policy], clock=ManualClock(START))
    states = schema.decision(guard.hit("p", u="a", priority="transactional")).rules
    assert {s.rule: (s.shadow, s.exempt) for s in states} == {
        "main": (False, False),
        "promo": (True, True),
    }
