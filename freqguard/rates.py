"""Rates: ``limit`` per ``window``, parsed once from the grammar of ``limits``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar, overload

import limits

from freqguard.bounds import MAX_LIMIT, MAX_WINDOW_US
from freqguard.errors import ConfigError, shown

__all__ = [
    "Rate",
    "as_rate",
    "item_rate",
    "parse_rate",
    "parse_rates",
    "peer_rate",
    "several_rates",
    "written",
]

T = TypeVar("T")

_GRAMMAR = (
    "'N per M unit' or 'N/M unit' (M optional, unit one of second, minute, hour, day, "
    "week, month, year, plural allowed; or, as django-ratelimit and DRF write them, s, m, h or d "
    "('5/m', '100/10s'), sec, min or hr, plural allowed)"
)
_SEVERAL = ", several joined by ';', ',' or '|'"
#: django-ratelimit's and DRF's short units, read as they read them; a month and a year
#: are spelled out (DRF reads any word by its first letter: "1/month" is 1 a minute there).
_SHORT_UNITS = {"s": "second", "sec": "second", "m": "minute", "min": "minute"}
_SHORT_UNITS |= {"h": "hour", "hr": "hour", "d": "day"}
_SHORT = re.compile(r"(\d\s*(?:/|per)\s*\d*)\s*(?:(sec|min|hr)s?|([smhd]))(?![a-z])")
#: A week, which limits' grammar has not: read as 7 days (a weekly calendar rule is listed
#: as ``3/week``, and typed back).
_WEEKS = re.compile(r"(/|per)\s*(\d*)\s*(?:weeks?|wks?|w)(?![a-z])")  # throttled-py's w, wk
# limits reads "5/0 minutes" as 5 per 1 minute; we refuse a zero multiple instead.
_ZERO_MULTIPLE = re.compile(r"(?:/|per)\s*0+\s*[a-z]")
#: The longest rate text: longer than any rate anyone writes, short enough that the
#: grammar's regular expression (quadratic on runs of spaces) stays fast.
MAX_RATE_TEXT = 256
_LONGEST = f"10 years ({MAX_WINDOW_US // 86_400_000_000} days)"


@dataclass(frozen=True, slots=True)
class Rate:
    """``limit`` hits per rolling ``window``.

    Args:
        limit: how many hits (cost units) a window admits, an integer >= 1.
        window: the window length, at least one microsecond and at most ten years.

    Raises:
        ConfigError: when either value is out of range.
    """

    limit: int
    window: timedelta

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int):
            raise ConfigError(f"rate limit must be an integer >= 1, got {shown(self.limit)}")
        if not 1 <= self.limit <= MAX_LIMIT:
            raise ConfigError(
                f"rate limit must be an integer from 1 to {MAX_LIMIT}, got {shown(self.limit)}"
            )
        if not isinstance(self.window, timedelta):
            raise ConfigError(f"rate window must be a datetime.timedelta, got {shown(self.window)}")
        if not 0 < _us(self.window) <= MAX_WINDOW_US:
            raise ConfigError(
                f"rate window must be longer than 0 and at most {_LONGEST}, got {self.window}"
            )

    @property
    def window_us(self) -> int:
        """The window in integer microseconds."""
        return _us(self.window)

    @property
    def window_seconds(self) -> float:
        return self.window.total_seconds()

    def __str__(self) -> str:
        seconds = self.window.total_seconds()
        if seconds == int(seconds):
            unit = "second" if seconds == 1 else f"{int(seconds)} seconds"
        else:
            unit = f"{seconds:g} seconds"
        return f"{self.limit} per {unit}"


def _us(window: timedelta) -> int:
    return (window.days * 86_400 + window.seconds) * 1_000_000 + window.microseconds


_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def parse_rates(text: str | limits.RateLimitItem, several: bool = True) -> tuple[Rate, ...]:
    """Parse one or several rates: ``"15/minute; 50 per day"`` (or one rate item of
    ``limits``, ``RateLimitItemPerMinute(10)``, as a Rule takes it).

    Raises:
        ConfigError: naming the text and the grammar when it does not parse (``several``:
            the grammar says rates may be joined).
    """
    grammar = _GRAMMAR + _SEVERAL * several
    if isinstance(text, limits.RateLimitItem):
        return (item_rate(text),)
    if not isinstance(text, str):
        joined = ""
        if (
            isinstance(text, (list, tuple))
            and 0 < len(text) <= 8
            and all(isinstance(t, str) and len(t) <= 64 for t in text)
        ):
            joined = f"; several rates join with ';' in one string: {'; '.join(text)!r}"
        raise ConfigError(f"a rate must be a string like '15/minute', got {shown(text)}{joined}")
    if len(text) > MAX_RATE_TEXT:
        raise ConfigError(
            f"a rate is at most {MAX_RATE_TEXT} characters, got one of {len(text)} "
            f"({text[:20]!r}...)"
        )
    if not text.isascii():  # no digit or letter of another script reads as an ASCII one
        raise ConfigError(f"cannot parse rate {text!r}: expected {grammar}, in ASCII")
    normalized = _SHORT.sub(_long_unit, text.strip().lower())
    normalized = _WEEKS.sub(_in_days, normalized)
    if _ZERO_MULTIPLE.search(normalized):
        raise ConfigError(f"rate {text!r} has a window of 0 units; it must be at least 1")
    try:
        items = limits.parse_many(normalized)
    except ValueError:
        dotted = ""
        if _DOTTED.fullmatch(text.strip()):  # django-ratelimit's rate="myapp.rates.get"
            dotted = (
                "; a dotted path to a function is not taken: give a rate, or a rule's "
                "rate_for (TierRates for a table) for a rate that varies"
            )
        piece = next((p for p in re.split(r"[;,|]", text) if "burst" in p.lower()), "")
        head, burst, tail = piece.strip().lower().partition(" burst")
        if burst and not dotted:  # throttled-py's "100/s burst 200"
            try:
                meant = written(parse_rate(head))
            except ConfigError:
                meant = head.strip()[:40]
            dotted = f"; a burst is a bucket rule's burst=: Rule({meant!r}, strategy='gcra', "
            dotted += f"burst={tail.strip()[:12] or 'N'})"
        raise ConfigError(f"cannot parse rate {text!r}: expected {grammar}{dotted}") from None
    rates = []
    for item in items:
        if item.amount < 1:
            raise ConfigError(f"rate {text!r} has limit {item.amount}; a limit must be >= 1")
        rates.append(item_rate(item, repr(text)))
    return tuple(rates)


@overload
def item_rate(item: limits.RateLimitItem, named: str | None = None) -> Rate: ...


@overload
def item_rate(item: T, named: str | None = None) -> T: ...


def item_rate(item: object, named: str | None = None) -> object:
    """A rate item of ``limits`` (``parse("10/minute")``, ``RateLimitItemPerMinute(10)``)
    as a Rate (anything else as it is); ``named``: the text it was parsed from, for a
    message.

    Raises:
        ConfigError: its amount or window out of a Rate's range.
    """
    if not isinstance(item, limits.RateLimitItem):
        return item
    window = item.GRANULARITY.seconds * item.multiples
    if window * 1_000_000 > MAX_WINDOW_US:  # before timedelta, which overflows
        raise ConfigError(
            f"rate {named or repr(str(item))} has a window of {window} seconds; the longest "
            f"is {_LONGEST}"
        )
    return Rate(item.amount, timedelta(seconds=window))


def as_rate(value: object) -> Rate:
    """A Rule's rate from what it was given: a Rate, a rate string or a rate item of limits.

    Raises:
        ConfigError: anything else (naming the string to write for throttled-py's Quota),
            or a string that does not parse.
    """
    rate = parse_rate(value) if isinstance(value, str) else item_rate(value)
    if not isinstance(rate, Rate):
        several = ""
        if isinstance(rate, (list, tuple)) and rate:  # limits' parse_many, a list of them
            several = "; several rates: one Rule per rate, each its own state"
        raise ConfigError(
            f"rate must be a Rate, a rate string or limits' item, got "
            f"{shown(rate)}{peer_rate(rate)}{several}"
        )
    return rate


def peer_rate(value: object) -> str:
    """For a message refusing ``value`` as a rate: the rate string to write when it is a
    throttled-py ``Quota`` (``per_min(10)``: ``; throttled-py's Quota is '10/minute'
    here``), else ``""``. Read by its attributes: throttled-py is not a dependency."""
    if type(value).__name__ != "Quota" or not type(value).__module__.startswith("throttled"):
        return ""
    given = getattr(value, "rate", None)
    period, limit = getattr(given, "period", None), getattr(given, "limit", None)
    try:
        rate = Rate(limit, period)  # type: ignore[arg-type]  # checked by Rate
    except ConfigError:
        return ""
    text = written(rate)
    burst = getattr(value, "burst", limit)
    kept = (
        ""
        if burst in (0, limit)
        else f", and its burst={burst} is a bucket's: Rule({text!r}, strategy='gcra' (or "
        f"'token-bucket'), burst={burst})"
    )
    return f"; throttled-py's Quota is {text!r} here{kept}"


def _in_days(found: re.Match[str]) -> str:
    weeks = int(found[2] or 1)  # at most MAX_RATE_TEXT digits; 0 stays 0, refused below
    return f"{found[1]} {7 * weeks} days"


def _long_unit(found: re.Match[str]) -> str:
    return f"{found[1]} {_SHORT_UNITS[found[2] or found[3]]}"


def several_rates(text: str) -> bool:
    """Whether ``text`` holds more than one rate (joined by ``;``, ``,`` or ``|``); False
    for one, or for text that does not parse (whose own error says why)."""
    try:
        return len(parse_rates(text)) > 1
    except ConfigError:
        return False


def parse_rate(text: str) -> Rate:
    """Parse exactly one rate: ``"2 per 59 seconds"``.

    Raises:
        ConfigError: when the text does not parse or holds more than one rate.
    """
    rates = parse_rates(text, several=False)
    if len(rates) != 1:
        raise ConfigError(
            f"expected one rate, got {len(rates)} in {text!r}: a rule, a tier and a "
            "per-key limit each take one (several rates: one rule each)"
        )
    return rates[0]


def seconds_window(what: str, seconds: object) -> timedelta:
    """A window given in seconds (``lease=60``, ``0.5``), checked as a rate's window is.

    Raises:
        ConfigError: naming ``what`` when ``seconds`` is no finite number of seconds from
            one microsecond to ten years.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ConfigError(f"{what} must be a number of seconds, got {shown(seconds)}")
    finite = not isinstance(seconds, float) or math.isfinite(seconds)  # an int is, any size
    if not finite or not 0 < seconds * 1_000_000 <= MAX_WINDOW_US:
        raise ConfigError(
            f"{what} must be a number of seconds longer than 0 and at most {_LONGEST}, "
            f"got {shown(seconds)}"
        )
    us = round(seconds * 1_000_000)
    if us < 1:
        raise ConfigError(f"{what} must be at least one microsecond, got {shown(seconds)}")
    return timedelta(microseconds=us)


#: The units a written rate uses, largest first (the grammar's month and year are left
#: out: they are 30 and 360 days there, not what a reader takes them for).
_UNITS = (("day", 86_400), ("hour", 3_600), ("minute", 60), ("second", 1))


def written(rate: Rate) -> str:
    """``rate`` as a person writes it: ``2/minute``, ``50/day``, ``2 per 59 seconds``,
    ``3 per 2 hours``; a window of a fraction of a second as :class:`Rate` says it. It
    parses back to the same rate (:func:`parse_rate`)."""
    us = rate.window_us
    if us % 1_000_000:
        return str(rate)
    seconds = us // 1_000_000
    for unit, size in _UNITS:
        if seconds % size == 0:
            count = seconds // size
            return f"{rate.limit}/{unit}" if count == 1 else f"{rate.limit} per {count} {unit}s"
    raise AssertionError(seconds)  # pragma: no cover - a second divides every whole window
