"""``limits_for`` reads what the context names: a policy of per-recipient rules and a
global one (the vendor's 200/s beside the recipients' caps, docs/celery.md) tells its
global rule's limit with no context, as ``set_limit`` sets it with none; it raised "got
none" (found by a Celery user's port). A partition of no part given is still an error, and
a name that is no dimension names itself."""

from __future__ import annotations

from datetime import timedelta

import pytest

from freqguard import ConfigError, Guard, ManualClock, Policy, Rate, Rule
from freqguard.backends.base import SyncBackend


def _guard(store: SyncBackend, clock: ManualClock) -> Guard:
    rules = [Rule("15/minute", by="recipient", name="r1m"), Rule("200/second", name="vendor")]
    return Guard(store, [Policy("sms", *rules), Policy("own", rules[0])], clock=clock)


def test_a_global_rules_limit_is_read_without_a_context(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    guard = _guard(any_store, clock)
    guard.set_limit("sms", "vendor", "100/second")
    assert guard.limits_for("sms") == {"vendor": Rate(100, timedelta(seconds=1))}
    assert guard.limits_for("sms", recipient="a") == {
        "r1m": Rate(15, timedelta(minutes=1)),
        "vendor": Rate(100, timedelta(seconds=1)),
    }


def test_what_no_part_can_read_is_still_refused(any_store: SyncBackend, clock: ManualClock) -> None:
    guard = _guard(any_store, clock)
    with pytest.raises(ConfigError, match=r"partition \(recipient\).*got none"):
        guard.limits_for("own")
    with pytest.raises(ConfigError, match=r"recipent is no dimension of it.*recipient"):
        guard.limits_for("sms", recipent="a")
