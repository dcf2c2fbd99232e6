"""The logging observer: denials logged at debug by digest, never by recipient, and at no
cost when debug is off; store failures warned once per quiet period and kind, and still
throttled past the kinds it keeps. A real Guard on MemoryBackend with a pinned clock; the
rig is ``observer_rig.py``.
"""

from __future__ import annotations

import logging

import pytest

from freqguard import BackendUnavailable, Guard, ManualClock, MemoryBackend
from freqguard.observe import LoggingObserver
from freqguard.script.keys import digest
from tests.operations.observer_rig import LOGIN, RECIPIENT, SMS, Outage


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="freqguard")
    return caplog


def test_denials_are_logged_at_debug_by_digest_never_by_recipient(
    logs: pytest.LogCaptureFixture, clock: ManualClock
) -> None:
    guard = Guard(
        MemoryBackend(), [SMS], clock=clock, deny_cache=100, observers=[LoggingObserver()]
    )
    content = "Your code is 1234"
    for _ in range(4):
        guard.hit("sms", recipient=RECIPIENT, content=content)
    denials = [r for r in logs.records if r.name == "freqguard"]
    assert len(denials) == 2  # allowed hits are not logged
    assert all(r.levelno == logging.DEBUG for r in denials)
    key = digest("sms", f"content={content}", f"recipient={RECIPIENT}")
    assert all(f"key={key}" in r.getMessage() for r in denials)
    assert "source=backend" in denials[0].getMessage()
    assert "source=deny-cache" in denials[1].getMessage()
    assert "rules=rcpt-1m,content-59s" in denials[0].getMessage()
    for record in logs.records:
        text = f"{record.getMessage()} {record.args!r} {record.__dict__!r}"
        assert RECIPIENT not in text
        assert content not in text


def test_denials_cost_nothing_when_debug_is_off(
    caplog: pytest.LogCaptureFixture, clock: ManualClock
) -> None:
    caplog.set_level(logging.INFO, logger="freqguard")
    guard = Guard(MemoryBackend(), [LOGIN], clock=clock, observers=[LoggingObserver()])
    guard.hit("login", user="ann")
    assert not guard.hit("login", user="ann").allowed
    assert not caplog.records


def test_store_failures_are_warned_once_per_quiet_period(
    logs: pytest.LogCaptureFixture, clock: ManualClock
) -> None:
    backend = Outage()
    backend.down = True
    ticks = ManualClock(0.0)
    observer = LoggingObserver(quiet=10.0, clock=ticks.now)
    guard = Guard(backend, [SMS], clock=clock, on_error="allow", breaker=None, observers=[observer])

    def warnings() -> list[str]:
        return [r.getMessage() for r in logs.records if r.levelno == logging.WARNING]

    for _ in range(3):  # at 0, 1 and 2 s: one warning, two suppressed
        guard.hit("sms", recipient=RECIPIENT, content="c")
        ticks.advance(1.0)
    assert len(warnings()) == 1
    first = warnings()[0]
    assert "backend=Outage" in first
    assert "error=ConnectionError" in first
    assert "policy=sms" in first
    assert "more since" not in first
    ticks.set(10.0)  # 10 s after the first warning: the next is logged, with the count
    guard.hit("sms", recipient=RECIPIENT, content="c")
    assert len(warnings()) == 2
    assert "(2 more since the last warning)" in warnings()[1]
    ticks.set(25.0)
    guard.hit("sms", recipient=RECIPIENT, content="c")
    assert len(warnings()) == 3
    assert "more since" not in warnings()[2]
    for record in logs.records:
        assert RECIPIENT not in f"{record.getMessage()} {record.args!r}"


def test_store_failures_stay_throttled_past_the_kinds_kept(
    logs: pytest.LogCaptureFixture,
) -> None:
    """Past the 4,096 kinds a LoggingObserver keeps (backend, error, policy), a new kind is
    still throttled (review: it was let through uncounted, a line for every failure of a
    guard of many policies in an outage), and setting ``quiet`` later takes effect."""
    ticks = ManualClock(0.0)
    observer = LoggingObserver(quiet=10.0, clock=ticks.now)
    error = BackendUnavailable("down")
    for index in range(4096):
        observer.failed(error, f"p{index}", "B")
    for _ in range(100):  # no kind can be forgotten yet: the new ones share one count
        observer.failed(error, "late", "B")
        observer.failed(error, "later", "B")
    warned = [r for r in logs.records if r.levelno == logging.WARNING]
    assert len(warned) == 4096 + 1
    ticks.advance(10.0)  # every kind quiet again: the table makes room
    observer.failed(error, "late", "B")
    observer.failed(error, "late", "B")
    assert len([r for r in logs.records if r.levelno == logging.WARNING]) == 4096 + 2
    observer.quiet = 0.0
    observer.failed(error, "late", "B")
    assert len([r for r in logs.records if r.levelno == logging.WARNING]) == 4096 + 3


def test_different_errors_are_not_suppressed_together(
    logs: pytest.LogCaptureFixture, clock: ManualClock
) -> None:
    backend = Outage()
    backend.down = True
    ticks = ManualClock(0.0)
    observer = LoggingObserver(clock=ticks.now)
    guard = Guard(
        backend, [SMS, LOGIN], clock=clock, on_error="allow", breaker=None, observers=[observer]
    )
    guard.hit("sms", recipient=RECIPIENT, content="c")
    guard.hit("login", user="ann")
    warned = [r.getMessage() for r in logs.records if r.levelno == logging.WARNING]
    assert len(warned) == 2
    assert "policy=sms" in warned[0]
    assert "policy=login" in warned[1]
