"""Per-key limits across a deploy that keys a rule by another dimension: a limit was set
for one value of the rule's partition (tenant ``17``); deployed keyed by the user, the rule's
partition is another dimension, and the limit must not become user ``17``'s (docs/limits.md,
Parts: "user 17's limit and tenant 17's are two limits"). On every store, time pinned.

A limit is stored by its rule's tag (from the rule's name) with a keying entry naming the
partition's dimension it was set for (design note 117): read by the rule keyed by another
dimension, it does not apply; keyed by its own again, it does.
"""

from __future__ import annotations

from freqguard import Guard, ManualClock, Policy, Rule
from freqguard.backends.base import SyncBackend
from freqguard.rates import parse_rate
from tests.conftest import START


def _policy(by: str) -> Policy:
    return Policy(
        "p", Rule("3/second", by="user", name="anchor"), Rule("2/minute", by=by, name="d")
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


def test_a_tenants_limit_applies_again_when_the_rule_is_keyed_by_tenant_again(
    any_store: SyncBackend,
) -> None:
    clock = ManualClock(START)
    by_tenant = Guard(any_store, [_policy("tenant")], clock=clock)
    by_tenant.set_limit("p", "d", "1000/minute", tenant="17")
    by_user = Guard(any_store, [_policy("user")], clock=clock)
    assert [by_user.hit("p", user="17").allowed for _ in range(3)] == [True, True, False]
    assert by_tenant.limits_for("p", tenant="17")["d"] == parse_rate("1000/minute")
    assert all(by_tenant.hit("p", user=f"u{n}", tenant="17").allowed for n in range(10))


def test_a_users_limit_set_after_the_rule_is_keyed_by_user_is_the_users(
    any_store: SyncBackend,
) -> None:
    """Set under the new keying, the limit replaces the old keying's (one rule, one value:
    one limit) and is read as the user's; the old keying no longer finds one."""
    clock = ManualClock(START)
    by_tenant = Guard(any_store, [_policy("tenant")], clock=clock)
    by_tenant.set_limit("p", "d", "1000/minute", tenant="17")
    by_user = Guard(any_store, [_policy("user")], clock=clock)
    by_user.set_limit("p", "d", "3/minute", user="17")
    assert by_user.limits_for("p", user="17")["d"] == parse_rate("3/minute")
    assert [by_user.hit("p", user="17").allowed for _ in range(4)] == [True] * 3 + [False]
    assert by_tenant.limits_for("p", tenant="17")["d"] == parse_rate("2/minute")
    by_user.clear_limit("p", "d", user="17")
    assert by_user.limits_for("p", user="17")["d"] == parse_rate("2/minute")


def test_an_exemption_keeps_to_its_keying_and_another_rules_limit_stays(
    any_store: SyncBackend,
) -> None:
    """Exempt under one keying, counted under the other; a change of one rule's limit keeps
    another rule's limit and keying entry in the same record."""
    clock = ManualClock(START)
    by_tenant = Guard(any_store, [_policy("tenant")], clock=clock)
    by_tenant.set_limit("p", "d", None, tenant="17")
    by_tenant.set_limit("p", "anchor", "5/second", user="17")
    by_user = Guard(any_store, [_policy("user")], clock=clock)
    assert by_user.limits_for("p", user="17") == {
        "anchor": parse_rate("5/second"),
        "d": parse_rate("2/minute"),
    }
    by_user.set_limit("p", "anchor", "6/second", user="17")
    assert by_tenant.limits_for("p", tenant="17", user="17")["d"] is None
