"""The in-memory backend reclaims idle keys: one-off recipients cost nothing once their
windows pass."""

from __future__ import annotations

import gc
import os

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
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


def test_a_million_one_off_recipients_are_reclaimed() -> None:
    """Freed memory stays with the process for reuse, so the proof is that a second million
    recipients, arriving after the first million's windows passed, fit in the same memory."""
    clock = ManualClock(1e9)
    backend = MemoryBackend(clock)
    guard = Guard(backend, [Policy("p", Rule("15/minute", by="recipient"))])
    gc.collect()
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
