"""Per-key limits across a deploy that keys a rule by another dimension: a limit was set
for one value of the rule's partition (tenant ``17``); deployed keyed by the user, the rule's
partition is another dimension, and the limit must not become user ``17``'s (docs/limits.md,
Parts: "user 17's limit and tenant 17's are two limits"). On every store, time pinned."""

from __future__ import annotations

import pytest

from freqguard import Guard, ManualClock, Policy, Rule
from freqguard.backends.base import SyncBackend
from freqguard.rates import parse_rate
from tests.conftest import START


def _policy(by: str) -> Policy:
    return Policy(
        "p", Rule("3/second", by="user", name="anchor"), Rule("2/minute", by=by, name="d")
    )


@pytest.mark.xfail(
    strict=True,
    reason="a limit is stored by its rule's tag (from the rule's name alone) in the record of "
    "the partition value, whatever dimension that value was of (docs/limits.md, Parts, names "
    "the gap): re-keyed by the user, rule d "
    "reads tenant 17's limit as user 17's (a storage change: the tag, or the limit, must "
    "name the partition's dimension)",
)
def test_a_tenants_limit_does_not_become_a_users_when_the_rule_is_keyed_by_user(
    any_store: SyncBackend,
) -> None:
    clock = ManualClock(START)
    before = Guard(any_store, [_policy("tenant")], clock=clock)
    before.set_limit("p", "d", "1000/minute", tenant="17")
    after = Guard(any_store, [_policy("user")], clock=clock)
    assert after.limits_for("p", user="17")["d"] == parse_rate("2/minute")
    assert [after.hit("p", user="17").allowed for _ in range(3)] == [True, True, False]
