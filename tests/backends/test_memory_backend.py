"""The in-memory backend reclaims idle keys: one-off recipients cost nothing once their
windows pass."""

from __future__ import annotations

import gc
import logging
import os
import warnings

import pytest

from freqguard import (
    BackendUnavailable,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
)
from freqguard.backends.memory import DEFAULT_MAX_KEYS
from tests.conftest import SMS


def _rss() -> int:
    """This process's resident memory in bytes (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _fill(guard: Guard, clock: ManualClock, prefix: str) -> None:
    for n in range(1_000_000):
        guard.hit("p", recipient=f"{prefix}{n}")
        if n % 1000 == 999:
            clock.advance(0.001)  # a million recipients within one second


@pytest.mark.slow  # a minute or two: two million hits, to measure memory
def test_a_million_one_off_recipients_are_reclaimed() -> None:
    """Freed memory stays with the process for reuse, so the proof is that a second million
    recipients, arriving after the first million's windows passed, fit in the same memory."""
    clock = ManualClock(1e9)
    backend = MemoryBackend(clock, max_keys=None)  # unbounded: the sweep alone reclaims
    guard = Guard(backend, [Policy("p", Rule("15/minute", by="recipient"))])
    with warnings.catch_warnings():  # what an earlier test of this worker left unclosed is
        warnings.simplefilter("ignore", ResourceWarning)  # its leak, not this measure's
        gc.collect()  # (CI failed here once on another test's Redis client socket)
    base = _rss()
    _fill(guard, clock, "a")
    assert len(backend) == 1_000_000
    first = _rss() - base
    clock.advance(61)  # every window has passed
    _fill(guard, clock, "b")  # ordinary traffic reclaims the idle keys as it goes
    assert len(backend) <= 1_000_000
    second = _rss() - base
    assert first > 50_000_000, first  # a million keys do take room...
    assert second < first * 1.25, (first, second)  # ...but two million in turn take no more
    clock.advance(61)
    for n in range(100):
        guard.hit("p", recipient=f"c{n}")
    backend.sweep()
    assert len(backend) == 100


def test_keys_expire_when_their_state_stops_mattering() -> None:
    clock = ManualClock(1e9)
    backend = MemoryBackend(clock)
    guard = Guard(backend, [SMS])
    guard.hit("sms", recipient="a", content="x")
    assert len(backend) == 2  # one log per dimension set: recipient, recipient+content
    clock.advance(3540)  # the content log (longest window 59 min) no longer matters...
    assert guard.peek("sms", recipient="a", content="x").rules[2].remaining == 2
    assert backend.sweep() == 0  # ...but is kept for the stale grace (1 s), in case the
    clock.advance(1)  # clock steps back
    assert backend.sweep() == 1
    clock.advance(86_400 - 3541 - 1)
    assert backend.sweep() == 0  # the recipient log still matters, for one more second
    clock.advance(1)
    assert backend.sweep() == 0  # expired, within the grace
    clock.advance(1)
    assert backend.sweep() == 1
    assert len(backend) == 0


def test_sweep_on_write_outpaces_new_keys() -> None:
    clock = ManualClock(1e9)
    backend = MemoryBackend(clock)
    guard = Guard(backend, [Policy("p", Rule("1/second", by="r", strategy="fixed-window"))])
    for n in range(10_000):
        guard.hit("p", r=n)
        clock.advance(0.01)  # each key matters for at most one second: ~100 alive at once
    assert len(backend) <= 200


def test_max_keys_rejects_new_states_when_full_and_changes_nothing() -> None:
    """A million distinct client IPs took the process from 27 to 425 MB: max_keys bounds it.
    Rejecting, a full backend refuses new states (every cap stays exact)."""
    clock = ManualClock(1e9)
    backend = MemoryBackend(clock, max_keys=3, when_full="reject")
    guard = Guard(backend, [SMS])
    guard.hit("sms", recipient="a", content="x")  # two states: recipient, recipient+content
    with pytest.raises(BackendUnavailable, match="max_keys=3"):
        guard.hit("sms", recipient="b", content="x")  # would need two more
    assert len(backend) == 2  # nothing half-written
    assert guard.hit("sms", recipient="a", content="x").allowed  # known states still work
    guard.hit("sms", recipient="a", content="y")  # one more state: fits exactly
    assert len(backend) == 3
    clock.advance(86_400 + 2)  # every state expired and past its grace: reclaimed on demand
    assert guard.hit("sms", recipient="b", content="x").allowed
    assert len(backend) == 2


def test_max_keys_with_eviction_stays_bounded_under_a_flood() -> None:
    clock = ManualClock(1e9)
    backend = MemoryBackend(clock, max_keys=100, when_full="evict")
    guard = Guard(backend, [Policy("p", Rule("5/minute", by="ip"))])
    for n in range(10_000):
        assert guard.hit("p", ip=f"10.0.{n // 256}.{n % 256}").allowed
        assert len(backend) <= 100
    # the states evicted first are those that expire soonest: the oldest
    assert guard.peek("p", ip="10.0.39.15").remaining == 4  # the newest is still counted


@pytest.mark.parametrize(("max_keys", "when_full"), [(0, "reject"), (True, "reject"), (5, "lru")])
def test_bad_memory_bounds_are_refused(max_keys: int, when_full: str) -> None:
    with pytest.raises(ConfigError, match=r"max_keys|when_full"):
        MemoryBackend(max_keys=max_keys, when_full=when_full)


def test_pinned_and_backend_time_states_are_kept_apart() -> None:
    """A pinned-clock guard's states were wiped by a real-clock guard on the same backend:
    the sweep judged them by the backend's clock."""
    backend = MemoryBackend()
    pinned = Guard(backend, [Policy("p", Rule("1/minute", by="u"))], clock=ManualClock(1000))
    real = Guard(backend, [Policy("q", Rule("1/minute", by="u"))])
    assert pinned.hit("p", u="x").allowed
    for n in range(100):  # enough calls on the real clock to sweep
        real.hit("q", u=str(n))
    backend.sweep()
    assert not pinned.hit("p", u="x").allowed  # still counted


class _Scripted:
    """A backend clock that answers a scripted series of times (a clock read out of order)."""

    def __init__(self, *seconds: float) -> None:
        self.times = [round(s * 1_000_000) for s in seconds]

    def now(self) -> float:
        return self.times[0] / 1_000_000

    def now_us(self) -> int:
        return self.times.pop(0) if len(self.times) > 1 else self.times[0]

    def sleep(self, seconds: float) -> None:
        raise AssertionError("no waits here")

    async def asleep(self, seconds: float) -> None:
        raise AssertionError("no waits here")


def test_the_backends_own_clock_stepping_back_is_judged_at_the_states_latest_time() -> None:
    """The thread race of the issue, as a scripted clock: 3 per second, three hits 100 µs
    apart, one at 1.00035 s, then two calls that read the clock earlier (1.0001 s). Judged
    there they counted too few; they are judged at 1.00035 s."""
    start = 1_700_000_000
    clock = _Scripted(*(start + t for t in (0.0001, 0.0002, 0.0003, 1.00035, 1.0001, 1.0001)))
    guard = Guard(MemoryBackend(clock), [Policy("p", Rule("3/second", by="u"))])
    decisions = [guard.hit("p", u="x") for _ in range(6)]
    assert all(d.allowed for d in decisions)
    late = [d.receipt.times_us for d in decisions[3:] if d.receipt is not None]
    assert late == [(round((start + 1.00035) * 1e6),)] * 3


@pytest.mark.parametrize("timeout", ["1", float("nan"), float("inf"), -1, True])
def test_acquire_refuses_a_timeout_that_is_not_finite_seconds(timeout: object) -> None:
    guard = Guard(MemoryBackend(), [Policy("p", Rule("1/second", by="u"))])
    with pytest.raises(ConfigError, match="timeout must be None or finite seconds"):
        guard.acquire("p", timeout=timeout, u="x")  # type: ignore[arg-type]


# -- issue 17: a bound by default ------------------------------------------------------------


def test_the_default_backend_is_bounded_and_says_so_when_it_first_evicts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """1M unique keys took 429 MB with nothing to stop them: the default now keeps at most
    DEFAULT_MAX_KEYS states, evicting those nearest their expiry, and logs it once."""
    clock = ManualClock(1e9)
    backend = MemoryBackend(clock)
    assert (backend.max_keys, backend.when_full) == (DEFAULT_MAX_KEYS, "evict")
    small = MemoryBackend(clock, max_keys=50)
    assert small.when_full == "evict"
    guard = Guard(small, [Policy("p", Rule("5/minute", by="ip"))])
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        for n in range(200):
            assert guard.hit("p", ip=f"10.0.0.{n}").allowed
    assert len(small) == 50
    warned = [r for r in caplog.records if "max_keys=50" in r.getMessage()]
    assert len(warned) == 1  # once, not per eviction
    assert "when_full='reject'" in warned[0].getMessage()


def test_max_keys_none_is_the_explicit_unbounded_backend() -> None:
    assert MemoryBackend(max_keys=None).max_keys is None


def test_expired_per_key_limits_are_reclaimed() -> None:
    """50,000 limits with a ttl of a minute were still held two hours later: a record's
    limits now go once none of them lives, by ordinary traffic, as expired states do; a
    limit for ever stays."""
    clock = ManualClock(1e9)
    backend = MemoryBackend(clock, max_keys=1000)
    guard = Guard(backend, [SMS])
    for n in range(5000):
        guard.set_limit("sms", "rcpt-1m", "1/minute", recipient=f"r{n}", ttl=60)
    guard.set_limit("sms", "rcpt-1d", None, recipient="vip")  # for ever
    assert backend.limits_held == 5001
    clock.advance(59)
    for n in range(100):
        guard.hit("sms", recipient=f"x{n}", content="y")
    assert backend.limits_held == 5001  # all still live
    clock.advance(2)
    for n in range(100):
        guard.hit("sms", recipient=f"z{n}", content="y")
    assert backend.limits_held == 1
    assert guard.limits_for("sms", recipient="vip")["rcpt-1d"] is None


def test_pinned_limits_are_reclaimed_in_real_time_as_redis_expires_their_records() -> None:
    real, pinned = ManualClock(1e9), ManualClock(5e8)
    backend = MemoryBackend(real)
    guard = Guard(backend, [SMS], clock=pinned)
    guard.set_limit("sms", "rcpt-1m", "1/minute", recipient="a", ttl=60)
    pinned.advance(86_400)  # pinned time jumps ahead: the limit has lapsed there...
    backend.sweep()
    assert backend.limits_held == 1  # ...but the record lives on in real time, as in Redis
    real.advance(61 + 600)  # its ttl and the pinned grace (PINNED_GRACE_MS)
    backend.sweep()
    assert backend.limits_held == 0


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # a log shared by a rule of a longer window: the log's horizon grows
        (
            [Rule("3/second", by="u", name="x")],
            [Rule("3/second", by="u", name="x"), Rule("1 per 2 seconds", by="u", name="y")],
        ),
        # a bucket's burst lowered: its horizon (the time to refill) shrinks
        (
            [Rule("1/second", by="u", name="x", strategy="gcra", burst=2)],
            [Rule("1/second", by="u", name="x", strategy="gcra")],
        ),
    ],
)
def test_a_deploy_that_changes_a_states_horizon_keeps_the_state(
    before: list[Rule], after: list[Rule]
) -> None:
    """States are filed by their horizon; a deploy that changes it (a longer window in a
    shared log, a smaller burst) must find them where they were filed, as Redis does."""
    clock = ManualClock(1e9)
    backend = MemoryBackend()
    old = Guard(backend, [Policy("p", *before)], clock=clock)
    assert [old.hit("p", u="a").allowed for _ in range(2)] == [True, True]
    new = Guard(backend, [Policy("p", *after)], clock=clock)
    assert not new.hit("p", u="a").allowed  # what was sent is still counted
    new.reset("p", u="a")
    assert new.hit("p", u="a").allowed  # and a reset finds it too
