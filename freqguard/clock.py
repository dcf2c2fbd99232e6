"""Where "now" comes from.

freqguard computes in integer microseconds; clocks expose both float seconds (``now``) and
integer microseconds (``now_us``). :class:`ManualClock` pins time for tests and replays: its
``sleep`` advances it at once, so code that waits (``acquire``) is testable without sleeping.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol, runtime_checkable

from freqguard.errors import ConfigError

__all__ = ["Clock", "ManualClock", "SystemClock"]

_US = 1_000_000


@runtime_checkable
class Clock(Protocol):
    """A source of time and a way to wait on it."""

    def now(self) -> float:
        """Seconds since the epoch (or since the clock's start) as a float."""
        ...

    def now_us(self) -> int:
        """The same instant in integer microseconds."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds``."""
        ...

    async def asleep(self, seconds: float) -> None:
        """Suspend the calling task for ``seconds``."""
        ...


class SystemClock:
    """Wall-clock time (``time.time_ns``), real sleeps."""

    def now(self) -> float:
        return time.time()

    def now_us(self) -> int:
        return time.time_ns() // 1000

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))

    def __repr__(self) -> str:
        return "SystemClock()"


def seconds_to_us(seconds: float) -> int:
    """Convert float seconds to integer microseconds, rounding to the nearest."""
    return round(seconds * _US)


class ManualClock:
    """A clock that moves only when told to; for tests and replays.

    Time is kept in integer microseconds so that repeated ``advance`` calls never drift.

    Args:
        start: the initial time in seconds.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._us = seconds_to_us(start)

    def now(self) -> float:
        return self._us / _US

    def now_us(self) -> int:
        return self._us

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``.

        Raises:
            ConfigError: ``seconds`` is negative.
        """
        if seconds < 0:
            raise ConfigError(f"ManualClock.advance takes seconds >= 0, got {seconds!r}")
        self._us += seconds_to_us(seconds)

    def set(self, seconds: float, *, backwards: bool = False) -> None:
        """Jump to ``seconds``, now or later: time does not go back.

        Args:
            seconds: the new time.
            backwards: allow an earlier time, to play a clock that lags (a failover to a
                server whose clock is behind); freqguard then judges a hit no earlier than
                the latest time its states were written at (docs/strategies.md, Time).

        Raises:
            ConfigError: ``seconds`` is earlier than the clock's current time, and
                ``backwards`` was not given.
        """
        target = seconds_to_us(seconds)
        if target < self._us and not backwards:
            raise ConfigError(
                f"ManualClock.set({seconds!r}) is earlier than now ({self.now()!r}): time "
                "does not go back; pass backwards=True to play a lagging clock, or make a "
                "new ManualClock to start over"
            )
        self._us = target

    def sleep(self, seconds: float) -> None:
        """Advance at once instead of blocking."""
        if seconds > 0:
            self._us += seconds_to_us(seconds)

    async def asleep(self, seconds: float) -> None:
        """Advance at once, then yield to the event loop so other tasks run."""
        self.sleep(seconds)
        await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"ManualClock(start={self.now()!r})"
