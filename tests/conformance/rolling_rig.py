"""What the rolling window's tests share (``test_rolling_window.py``,
``test_rolling_window_refunds.py``, ``test_rolling_window_limits.py``): a microsecond, and
a policy of one rolling-window rule of a limit and a window in microseconds."""

from __future__ import annotations

from datetime import timedelta

from freqguard import Decision, Policy, Rate, Rule

US = 1_000_000


def _ring(limit: int, window_us: int) -> Policy:
    rate = Rate(limit, timedelta(microseconds=window_us))
    return Policy("p", Rule(rate, by="u", strategy="rolling-window"))


def units_of(decisions: list[Decision], refunded: tuple[Decision, ...] = ()) -> list[int]:
    """Each admitted unit's time (µs, as judged), but the refunded decisions'."""
    return [
        d.receipt.times_us[0]
        for d in decisions
        if d.allowed and d.receipt is not None and d not in refunded
        for _ in range(d.receipt.cost)
    ]
