"""The rolling window's refunds (docs/strategies/rolling-window.md), on every store: given
back to the hit's own sub-window, and nothing given back once the hit no longer counts
there (its sub-window left, a reset, the ring moved to another window or grain). The rig is
``rolling_rig.py``."""

from __future__ import annotations

from freqguard import Guard, ManualClock
from freqguard.backends.base import SyncBackend
from tests.conformance.rolling_rig import US, _ring


def test_a_refund_goes_back_to_the_hit_s_own_sub_window(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    """2 per minute (sub-windows of 1 s): A at 0 s, B at 30 s, A refunded, C at 31 s. B and C
    are both in (1 s, 61 s], so D at 61 s must wait for B's sub-window to leave (at 90.999999
    s). Given back to the newest sub-window instead, A's would have kept counting one unit
    until 60.999999 s and then freed it: D admitted, three in one minute."""
    guard = Guard(any_store, [_ring(2, 60 * US)], clock=clock)
    a = guard.hit("p", u="x")
    clock.advance(30)
    assert guard.hit("p", u="x").allowed
    guard.refund(a)
    clock.advance(1)
    assert guard.hit("p", u="x").allowed
    clock.advance(30)
    d = guard.hit("p", u="x")
    assert not d.allowed
    assert d.retry_after == 29.999999


def test_a_refund_gives_back_nothing_once_its_hit_no_longer_counts_there(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    """Once the hit's sub-window has left, after a reset, and after the ring moved to
    another window (a per-key limit): another hit's units stay counted."""
    guard = Guard(any_store, [_ring(5, 60 * US)], clock=clock)
    left = guard.hit("p", u="x")
    clock.advance(61)  # the sub-window [0 s, 1 s) left at 60.999999 s
    assert guard.hit("p", u="x").allowed
    assert guard.refund(left).remaining == 4
    clock.advance(61)
    reset = guard.hit("p", u="x")
    guard.reset("p", u="x")
    assert guard.hit("p", u="x").allowed  # the same sub-window, a new ring
    assert guard.refund(reset).remaining == 4
    moved = guard.hit("p", u="x")  # two units now
    guard.set_limit("p", "rw.5.60s", "6 per 120 seconds", u="x")  # sub-windows of 2 s
    assert guard.hit("p", u="x").allowed
    assert guard.refund(moved).remaining == 3  # three units counted: the refund found none


def test_a_refund_after_a_reset_finds_no_ring_of_another_grain(any_store: SyncBackend) -> None:
    """A ring moved to another grain is born at the next µs; a reset on a pinned clock
    judges the next call there too, so the ring after it was born at the same µs at another
    grain: the refund's mark named it, memory gave back the later hit's unit and the Lua
    failed on a sub-window index that was not whole (review). A mark names its grain."""
    clock = ManualClock(1_700_000_000.004)
    guard = Guard(any_store, [_ring(5, 1 * US)], clock=clock)
    guard.hit("p", u="a")
    guard.set_limit("p", "rw.5.1s", "5 per 10 seconds", u="a")
    decision = guard.hit("p", u="a")
    guard.reset("p", u="a")
    guard.clear_limit("p", "rw.5.1s", u="a")
    guard.hit("p", u="a")
    assert guard.refund(decision).remaining == 4  # the later hit's unit stays
