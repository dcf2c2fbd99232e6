"""Cross-channel fatigue (docs/messaging.md): one recipient across SMS, push and email, at
most 5 touches a local day across channels and a cap per channel, one call per message on
memory, Redis and Cluster, sync and async."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from freqguard import ManualClock, Policy, Rule
from tests.conftest import AnyGuardFactory

CHANNEL_CAPS = {"sms": "1/day", "push": "3/day", "email": "2/day"}
FATIGUE = Policy(
    "touch",
    Rule("5/day", by="recipient", name="touches", calendar=True, tz_from="tz"),
    Rule(
        "1/day",
        by=("recipient", "channel"),
        name="per-channel",
        rate_for=lambda context: CHANNEL_CAPS[context["channel"]],
    ),
)


def test_five_touches_a_local_day_across_channels_each_within_its_cap(
    make_any_guard: AnyGuardFactory, clock: ManualClock
) -> None:
    guard = make_any_guard([FATIGUE])
    plan = guard.guard._policies.plan("touch")
    assert plan.single_part  # both rules in the recipient's record: one call a message
    tokyo = ZoneInfo("Asia/Tokyo")
    clock.set(datetime(2026, 6, 11, 9, tzinfo=tokyo).timestamp(), backwards=True)

    def touch(channel: str) -> tuple[bool, list[str]]:
        d = guard.hit("touch", recipient="eve", channel=channel, tz="Asia/Tokyo")
        return d.allowed, [r.id for r in d.denied_by]

    assert touch("sms") == (True, [])
    assert touch("sms") == (False, ["per-channel"])
    assert [touch("push") for _ in range(4)] == [(True, [])] * 3 + [(False, ["per-channel"])]
    assert touch("email") == (True, [])
    assert touch("email") == (False, ["touches"])  # the sixth touch of the day
    # another recipient is untouched, and eve's local day ends at Tokyo's midnight
    assert guard.hit("touch", recipient="zoe", channel="sms", tz="Asia/Tokyo").allowed
    clock.set(datetime(2026, 6, 12, tzinfo=tokyo).timestamp())
    assert touch("email") == (True, [])
