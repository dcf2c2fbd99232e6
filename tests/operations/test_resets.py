"""Resets forget only what belongs to the context they are given: the states keyed by
exactly its dimensions (or the rules they name), on every store, sync and async; never a
global count or a state other contexts share, and never quietly nothing."""

from __future__ import annotations

import pytest
from redis import Redis

from freqguard import ConfigError, Guard, ManualClock, Policy, QuietHours, Rule
from freqguard.backends.base import SyncBackend
from freqguard.backends.redis import RedisBackend
from freqguard.errors import BackendUnavailable
from tests.conftest import SMS, AnyGuardFactory
from tests.servers import free_port

GLOBAL = Policy(
    "push",
    Rule("2/minute", by="recipient", name="per-recipient"),
    Rule("10/minute", name="all"),
)
PAIR = Policy(
    "login",
    Rule("3/minute", by="user", name="per-user"),
    Rule("3/minute", by="ip", name="per-ip"),
    Rule("2/minute", by=("user", "ip"), name="per-pair"),
)


def test_resetting_a_recipient_leaves_the_global_count_alone(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    guard = Guard(any_store, [GLOBAL], clock=clock)
    admitted = sum(guard.hit("push", recipient=f"r{i % 5}").allowed for i in range(10))
    assert admitted == 10
    assert guard.reset("push", recipient="r0") == ("per-recipient",)
    # the minute's 10 are spent, whatever one recipient's reset
    assert [guard.hit("push", recipient=f"r{i}").allowed for i in range(10)] == [False] * 10
    clock.advance(60)
    assert sum(guard.hit("push", recipient=f"x{i}").allowed for i in range(20)) == 10


def test_resetting_one_user_and_ip_frees_neither_for_the_others(
    make_any_guard: AnyGuardFactory,
) -> None:
    guard = make_any_guard([PAIR])
    hits = [guard.hit("login", user=f"u{i}", ip="1.2.3.4").allowed for i in range(4)]
    assert hits == [True, True, True, False]
    assert guard.reset("login", user="u0", ip="1.2.3.4") == ("per-pair",)
    assert not guard.hit("login", user="u5", ip="1.2.3.4").allowed  # the ip is still full
    assert guard.reset("login", rules=["per-ip"], ip="1.2.3.4") == ("per-ip",)
    assert guard.hit("login", user="u5", ip="1.2.3.4").allowed  # freed on purpose, by name


def test_resetting_a_recipient_keeps_its_per_content_counts(
    make_any_guard: AnyGuardFactory,
) -> None:
    guard = make_any_guard([SMS])
    assert [guard.hit("sms", recipient="a", content="x").allowed for _ in range(3)] == [
        True,
        True,
        False,
    ]
    assert guard.reset("sms", recipient="a") == ("rcpt-1m", "rcpt-1d")
    peek = guard.peek("sms", recipient="a", content="x")
    assert [s.remaining for s in peek.rules] == [15, 50, 0, 3]
    assert guard.reset("sms", recipient="a", content="x") == ("content-59s", "content-59m")
    assert guard.hit("sms", recipient="a", content="x").allowed


def test_a_global_rule_is_reset_by_a_reset_of_no_context(make_any_guard: AnyGuardFactory) -> None:
    guard = make_any_guard([GLOBAL])
    for i in range(10):
        guard.hit("push", recipient=f"r{i}")
    assert guard.reset("push") == ("all",)
    assert guard.hit("push", recipient="z").allowed


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"content": "x"}, r"no rule is keyed by exactly \(content\)"),
        ({"recipient": "a", "typo": "b"}, "got unknown typo"),
        ({"rules": ["nope"], "recipient": "a"}, "has no rule 'nope'"),
        ({"rules": ["rcpt-1m"], "recipient": "a"}, "count in one sliding log"),
        ({"rules": ["content-59s"], "recipient": "a"}, r"keyed by \(recipient, content\)"),
        ({"rules": [], "recipient": "a"}, "names no rule"),
        ({"recipient": 1.5}, "must be a str or an int"),
    ],
)
def test_a_reset_that_could_not_mean_what_it_says_is_refused(
    make_any_guard: AnyGuardFactory, kwargs: dict[str, object], message: str
) -> None:
    guard = make_any_guard([SMS])
    guard.hit("sms", recipient="a", content="x")
    with pytest.raises(ConfigError, match=message):
        guard.reset("sms", **kwargs)
    assert guard.peek("sms", recipient="a", content="x").rules[0].remaining == 14


def test_quiet_hours_keep_nothing_to_reset(make_any_guard: AnyGuardFactory) -> None:
    policy = Policy(
        "night", Rule("3/day", by="r", name="d"), quiet=QuietHours("22:00", "06:00", tz="UTC")
    )
    guard = make_any_guard([policy])
    with pytest.raises(ConfigError, match="quiet hours keep no state"):
        guard.reset("night", rules=["quiet-hours"], r="a")
    assert guard.reset("night", r="a") == ("d",)


@pytest.mark.slow  # a dead store: timeouts
@pytest.mark.parametrize("on_error", ["allow", "deny"])
def test_a_reset_on_a_dead_store_raises_whatever_on_error_says(on_error: str) -> None:
    dead = RedisBackend(Redis(port=free_port(), socket_connect_timeout=0.5))
    guard = Guard(dead, [SMS], on_error=on_error)
    try:
        with pytest.raises(BackendUnavailable):
            guard.reset("sms", recipient="a")
    finally:
        guard.close()
