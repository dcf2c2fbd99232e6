"""What the rolling window's tests share (``test_rolling_window.py``,
``test_rolling_window_refunds.py``, ``test_rolling_window_limits.py``): a microsecond, and
a policy of one rolling-window rule of a limit and a window in microseconds."""

from __future__ import annotations

from datetime import timedelta

from freqguard import Policy, Rate, Rule

US = 1_000_000


def _ring(limit: int, window_us: int) -> Policy:
    rate = Rate(limit, timedelta(microseconds=window_us))
    return Policy("p", Rule(rate, by="u", strategy="rolling-window"))
