"""Where "now" comes from, and the zones calendar rules count in.

freqguard computes in integer microseconds; clocks expose both float seconds (``now``) and
integer microseconds (``now_us``). :class:`ManualClock` pins time for tests and replays: its
``sleep`` advances it at once, so code that waits (``acquire``) is testable without sleeping.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
import zoneinfo
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from freqguard.errors import ConfigError, shown

if TYPE_CHECKING:
    from freqguard.rates import Rate

__all__ = [
    "PERIODS",
    "Clock",
    "ManualClock",
    "SystemClock",
    "check_calendar",
    "check_clock",
    "zone_named",
]

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


def check_clock(clock: Clock | None, where: str) -> Clock | None:
    """``clock`` if it is one (None stays None).

    Raises:
        ConfigError: something without ``now_us()`` (a string, a number, a function) or a
            clock's class (``SystemClock`` for ``SystemClock()``), named by ``where``: it
            failed at the first call, far from the mistake.
    """
    if clock is None or (callable(getattr(clock, "now_us", None)) and not isinstance(clock, type)):
        return clock
    raise ConfigError(
        f"{where} must be a clock (its now_us() read; freqguard.SystemClock() or "
        f"ManualClock(start)), got {shown(clock)}"
    )


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


def _clock_us(seconds: object, call: str) -> int:
    """``seconds`` (a real number: a Fraction, a Decimal too) in µs.

    Raises:
        ConfigError: no finite number of seconds, or one past what µs hold (1.797e302).
    """
    try:
        if isinstance(seconds, (bool, str, bytes)) or not math.isfinite(seconds):  # type: ignore[arg-type]
            raise ValueError(seconds)
        return seconds_to_us(seconds)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(
            f"{call} takes a finite number of seconds, at most {_MOST_SECONDS:g} either way, "
            f"got {shown(seconds)}"
        ) from None


#: About the most seconds a clock's µs hold (past 1.7976e302, ``seconds * 1e6`` overflows a
#: float), as the refusal names it
_MOST_SECONDS = 1.797e302


class ManualClock:
    """A clock that moves only when told to; for tests and replays.

    Time is kept in integer microseconds so that repeated ``advance`` calls never drift.

    Args:
        start: the initial time in seconds.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._us = _clock_us(start, "ManualClock(start)")

    def now(self) -> float:
        return self._us / _US

    def now_us(self) -> int:
        return self._us

    def advance(self, seconds: float | timedelta) -> None:
        """Move time forward by ``seconds`` (or a ``timedelta``).

        Raises:
            ConfigError: ``seconds`` is negative, or no number of seconds.
        """
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        try:  # a number of seconds as the clock takes one (a Fraction, a Decimal too)
            finite = not isinstance(seconds, (bool, str, bytes)) and 0 <= float(seconds) < math.inf
        except (TypeError, ValueError, OverflowError):
            finite = False
        try:
            moved = seconds_to_us(seconds) if finite else None  # (a float past µs: overflow)
        except OverflowError:
            moved = None
        if moved is None:  # also refuses nan
            raise ConfigError(
                f"ManualClock.advance takes seconds >= 0 (or a timedelta), got {shown(seconds)}"
            )
        self._us += moved

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
        target = _clock_us(seconds, "ManualClock.set")
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


# -- zones ---------------------------------------------------------------------------------

#: A calendar rule's period, by its rate's window (µs): "N/day", "N per 7 days", "N/month".
PERIODS = {86_400_000_000: "day", 7 * 86_400_000_000: "week", 30 * 86_400_000_000: "month"}


def check_calendar(calendar: bool, strategy: str, rate: Rate, tz: object, tz_from: object) -> None:
    """A rule's calendar options (``strategy``: the name of the rule's).

    Raises:
        ConfigError: naming the option that cannot apply.
    """
    if not calendar:
        if tz is not None or tz_from is not None:
            raise ConfigError(
                f"tz and tz_from apply to calendar rules only: give calendar=True (rule {rate})"
            )
        return
    if strategy != "fixed-window":
        raise ConfigError(
            f"a calendar rule counts per calendar period (fixed-window), not {strategy}"
        )
    if rate.window_us not in PERIODS:
        raise ConfigError(
            f"a calendar rule's rate is per day ('3/day'), per 7 days (a week, from Monday: "
            f"'10 per 7 days') or per month ('20/month'), got {rate}"
        )
    if (tz is None) == (tz_from is None):
        raise ConfigError(
            f"a calendar rule ({rate}) needs exactly one of tz (a zone, 'Europe/Berlin') and "
            "tz_from (the context value naming each hit's zone)"
        )
    if tz is not None:
        zone_named(tz)


#: Not zones, though the zone database's folder may hold them: the machine's own zone
#: (which differs from machine to machine) and POSIX's default rules.
_NOT_ZONES = frozenset({"localtime", "posixrules"})
_EXAMPLE = "an IANA name like 'Europe/Berlin' or 'America/New_York'"


@functools.cache
def _known() -> frozenset[str]:
    """The zones the zone database holds, by their exact names (read once: a walk of it)."""
    return frozenset(zoneinfo.available_timezones() - _NOT_ZONES)


@functools.cache
def _folded() -> dict[str, str]:
    return {name.casefold(): name for name in _known()}


@functools.lru_cache(maxsize=1024)
def _zone(name: str) -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(name)


def _unknown(name: str) -> ConfigError:
    meant = _folded().get(name.casefold())
    if meant is not None:
        why = f"names are case-sensitive: did you mean {meant!r}? Give {_EXAMPLE}"
    else:
        region = sorted(zone for zone in _known() if zone.startswith(name + "/"))
        why = (
            f"that is a region of the zone database, not a zone: give one of its zones, like "
            f"{region[0]!r} ({_EXAMPLE})"
            if region
            else f"give {_EXAMPLE} (the tzdata package supplies them where the system has none)"
        )
    return ConfigError(f"unknown time zone {name!r}: {why}")


def zone_named(name: object) -> zoneinfo.ZoneInfo:
    """The IANA zone ``name`` names.

    Raises:
        ConfigError: a value that is not the exact name of a zone this machine's zone
            database holds (a folder of it, a path, a file that is not a zone, the
            machine's own ``localtime``, another case, a non-string), naming it.
    """
    if not isinstance(name, str) or not 0 < len(name) <= 64:
        raise ConfigError(f"a time zone is {_EXAMPLE}, got {shown(name)}")
    if name not in _known():
        raise _unknown(name)
    try:
        return _zone(name)
    except (OSError, ValueError) as exc:  # listed, yet unreadable: changed under us
        raise ConfigError(f"time zone {name!r} cannot be read ({exc}): give {_EXAMPLE}") from None
