"""Rules: one cap, keyed by dimensions, enforced by one strategy."""

from __future__ import annotations

import hashlib
import keyword
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from freqguard.bounds import MAX_BURST, MAX_LOG_LIMIT, MAX_SPAN_US
from freqguard.clock import PERIODS, check_calendar
from freqguard.errors import ConfigError
from freqguard.rates import Rate, parse_rate

__all__ = [
    "RESERVED_DIMENSIONS",
    "Rule",
    "Strategy",
    "TierRates",
    "limited_rule",
]

NAME_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_DIMENSION = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# Names the Guard's own keyword arguments take; a dimension by these names could not be passed.
RESERVED_DIMENSIONS = frozenset({"policy", "cost", "contexts", "timeout", "self"})


class Strategy(str, Enum):
    """How a rule counts. See docs/strategies.md for the exact guarantee of each."""

    FIXED_WINDOW = "fixed-window"
    SLIDING_LOG = "sliding-log"
    TOKEN_BUCKET = "token-bucket"
    GCRA = "gcra"

    @classmethod
    def parse(cls, value: Strategy | str) -> Strategy:
        """Accept a member, its value (``"sliding-log"``) or its name (``"SLIDING_LOG"``)."""
        if isinstance(value, Strategy):
            return value
        if isinstance(value, str):
            wanted = value.strip().lower().replace("_", "-")
            for member in cls:
                if member.value == wanted:
                    return member
        allowed = ", ".join(repr(m.value) for m in cls)
        raise ConfigError(f"unknown strategy {value!r}; allowed: {allowed}")

    @property
    def uses_burst(self) -> bool:
        return self in (Strategy.TOKEN_BUCKET, Strategy.GCRA)

    @property
    def short(self) -> str:
        return _SHORT[self]


_SHORT = {
    Strategy.FIXED_WINDOW: "fw",
    Strategy.SLIDING_LOG: "sl",
    Strategy.TOKEN_BUCKET: "tb",
    Strategy.GCRA: "gcra",
}


def fit_name(raw: str) -> str:
    """A policy name made from free text (a route, an endpoint, a function's qualname): its
    safe characters, and, when any had to be replaced or it is longer than 64, a digest of
    the text, so that two texts never make one name (one counter)."""
    name = re.sub(r"[^A-Za-z0-9_.\-]", "-", raw)
    if name != raw or len(name) > 64:
        name = name[:51] + "." + hashlib.blake2b(raw.encode(), digest_size=6).hexdigest()
    return name


def check_name(kind: str, value: object) -> str:
    """Validate a policy, rule or prefix name: it appears verbatim in keys."""
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise ConfigError(f"{kind} must be 1 to 64 characters of A-Z a-z 0-9 _ . -, got {value!r}")
    return value


def _check_bounds(rate: Rate, strategy: Strategy, burst: int | None, name: str | None) -> None:
    """Refuse what the encodings cannot hold exactly (see :mod:`freqguard.bounds`)."""
    label = f"rule {name or str(rate)!r}"
    if strategy is Strategy.SLIDING_LOG and rate.limit > MAX_LOG_LIMIT:
        raise ConfigError(
            f"{label}: an exact sliding log keeps one entry per admitted unit, so its limit "
            f"is at most {MAX_LOG_LIMIT}, got {rate.limit}; use strategy='gcra' (or "
            f"'token-bucket') for a smooth rate, or 'fixed-window' for a cheap counter"
        )
    if strategy.uses_burst:
        capacity = burst if burst is not None else rate.limit
        refill = capacity * -(-rate.window_us // rate.limit)
        if refill > MAX_SPAN_US:
            raise ConfigError(
                f"{label}: a bucket of {capacity} at one token per "
                f"{-(-rate.window_us // rate.limit)} µs takes {refill} µs to refill, more "
                f"than the bound of {MAX_SPAN_US} µs (10 years); lower the burst"
            )


class TierRates:
    """A ``rate_for`` that picks the rate by one context value, from a table: a caller whose
    value is not in it keeps the rule's own rate. ``Rule("10/minute", by="user",
    name="per-user", rate_for=TierRates("plan", {"pro": "100/minute"}))`` (the rule then
    reads ``plan``). Configuration files write it ``tiers = {from = "plan", rates = {...}}``.

    Raises:
        ConfigError: a name that is not a valid context name, or a rate that does not parse.
    """

    __slots__ = ("rates", "read")

    def __init__(self, read: str, rates: Mapping[str, Rate | str]) -> None:
        (self.read,) = _dimensions(read)
        if not isinstance(rates, Mapping) or not rates:
            raise ConfigError(f"TierRates takes a table of value -> rate, got {rates!r}")
        self.rates: dict[str, Rate] = {}
        for value, rate in rates.items():
            if not isinstance(value, str):
                raise ConfigError(f"TierRates: a tier is named by a string, got {value!r}")
            self.rates[value] = parse_rate(rate) if isinstance(rate, str) else rate
            if not isinstance(self.rates[value], Rate):
                raise ConfigError(f"TierRates: tier {value!r} has no rate: {rate!r}")

    def __call__(self, context: Mapping[str, str]) -> Rate | None:
        return self.rates.get(context.get(self.read, ""))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TierRates):
            return NotImplemented
        return (self.read, self.rates) == (other.read, other.rates)

    def __hash__(self) -> int:
        return hash((self.read, tuple(self.rates.items())))

    def __repr__(self) -> str:
        table = ", ".join(f"{k!r}: {str(v)!r}" for k, v in self.rates.items())
        return f"TierRates({self.read!r}, {{{table}}})"


def _rate_for(function: object, name: str | None, rate: Rate) -> Any:
    if function is None:
        return None
    if not callable(function):
        raise ConfigError(f"rate_for must be a function of the context, got {function!r}")
    if name is None:
        raise ConfigError(
            f"a rule with rate_for needs a name (its keys must not change with its rate): "
            f"give Rule({str(rate)!r}, ..., name=...)"
        )
    return function


def _reads(
    reads: str | Sequence[str], by: tuple[str, ...], rate_for: object, tz_from: object
) -> tuple[str, ...]:
    names = _dimensions(reads)
    if names and rate_for is None and not (names == (tz_from,)):
        raise ConfigError(f"reads={names!r} is read by rate_for only, and the rule has none")
    shared = sorted(set(names) & set(by))
    if shared:
        raise ConfigError(f"reads names values that are no dimension; {shared} are in by")
    return names


def _dimensions(by: str | Sequence[str]) -> tuple[str, ...]:
    names = (by,) if isinstance(by, str) else tuple(by)
    for name in names:
        if (
            not isinstance(name, str)
            or not _DIMENSION.fullmatch(name)
            or keyword.iskeyword(name)
            or name in RESERVED_DIMENSIONS
        ):
            reserved = ", ".join(sorted(RESERVED_DIMENSIONS))
            raise ConfigError(
                f"dimension {name!r} is not allowed: use a Python identifier of at most 64 "
                f"characters that is not a keyword nor one of {reserved}"
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"dimensions must be distinct, got {names!r}")
    return names


@dataclass(frozen=True, slots=True, init=False)
class Rule:
    """One cap: ``rate`` per set of ``by`` values, enforced by ``strategy``.

    Args:
        rate: a :class:`Rate` or one rate string (``"15/minute"``).
        by: the dimension(s) the rule is keyed by; ``()`` for one global cap.
        strategy: a :class:`Strategy` or its value; sliding-log (exact) by default.
        name: a stable name; it is part of the storage key. Derived from the rate when omitted.
        burst: the capacity of token-bucket and gcra rules (default: the limit).
        shadow: evaluate and report, never block.
        rate_for: a tier decided in code: a function of the hit's context (its values as
            text, by name: the dimensions and ``reads``) that returns the rate for this hit
            (a rate string or a :class:`Rate`), or None for ``rate``. Each distinct rate it
            returns is compiled once. The rule needs a ``name`` (its keys must not change
            with its rate), and a bucket's ``burst``, if set, stays.
        reads: names of context values that are not dimensions (no key is made of them),
            which hits may pass for ``rate_for`` to read, e.g. ``("plan",)``.
        calendar: count per calendar period of a time zone instead of a rolling window: a
            rate per day (local midnight to midnight), per 7 days (a week from Monday) or
            per month (from the 1st); the strategy is fixed-window. Needs ``tz`` or
            ``tz_from``.
        tz: the calendar's IANA zone (``"Asia/Shanghai"``).
        tz_from: the context value that names each hit's zone (the recipient's), read like
            ``reads`` (not part of any key).

    Raises:
        ConfigError: for any invalid argument, naming it.
    """

    rate: Rate
    by: tuple[str, ...]
    strategy: Strategy
    name: str | None
    burst: int | None
    shadow: bool
    id: str = field(compare=False, repr=False)  # the stable identity, computed once
    rate_for: Callable[[Mapping[str, str]], Rate | str | None] | None = field(repr=False)
    reads: tuple[str, ...] = field(repr=False)
    calendar: bool = field(repr=False)
    tz: str | None = field(repr=False)
    tz_from: str | None = field(repr=False)

    def __init__(
        self,
        rate: Rate | str,
        by: str | Sequence[str] = (),
        strategy: Strategy | str | None = None,
        *,
        name: str | None = None,
        burst: int | None = None,
        shadow: bool = False,
        rate_for: Callable[[Mapping[str, str]], Rate | str | None] | None = None,
        reads: str | Sequence[str] = (),
        calendar: bool = False,
        tz: str | None = None,
        tz_from: str | None = None,
    ) -> None:
        rate = parse_rate(rate) if isinstance(rate, str) else rate
        if not isinstance(rate, Rate):
            raise ConfigError(f"rate must be a Rate or a rate string, got {rate!r}")
        if not isinstance(calendar, bool):
            raise ConfigError(f"calendar must be a bool, got {calendar!r}")
        default = Strategy.FIXED_WINDOW if calendar else Strategy.SLIDING_LOG
        strategy = default if strategy is None else Strategy.parse(strategy)
        check_calendar(calendar, strategy.value, rate, tz, tz_from)
        if tz_from is not None:
            _dimensions(tz_from)
        if name is not None:
            check_name("rule name", name)
        if burst is not None:
            if not strategy.uses_burst:
                raise ConfigError(
                    f"burst applies to token-bucket and gcra only, not {strategy.value} "
                    f"(rule {name or rate!s})"
                )
            if (
                isinstance(burst, bool)
                or not isinstance(burst, int)
                or not (1 <= burst <= MAX_BURST)
            ):
                raise ConfigError(f"burst must be an integer from 1 to {MAX_BURST}, got {burst!r}")
        if not isinstance(shadow, bool):
            raise ConfigError(f"shadow must be a bool, got {shadow!r}")
        _check_bounds(rate, strategy, burst, name)
        set_ = object.__setattr__
        set_(self, "rate", rate)
        set_(self, "by", _dimensions(by))
        set_(self, "strategy", strategy)
        set_(self, "name", name)
        set_(self, "burst", burst)
        set_(self, "shadow", shadow)
        set_(self, "calendar", calendar)
        set_(self, "tz", tz)
        set_(self, "tz_from", tz_from)
        set_(self, "id", name if name is not None else self._derived_id())
        set_(self, "rate_for", _rate_for(rate_for, name, rate))
        set_(self, "reads", _reads(reads, self.by, rate_for, tz_from))
        if isinstance(rate_for, TierRates) and rate_for.read not in self.reads:
            set_(self, "reads", (*self.reads, rate_for.read))  # it says what it reads
        if tz_from is not None:
            if tz_from in self.by:
                raise ConfigError(f"tz_from={tz_from!r} is a dimension of the rule (by)")
            if tz_from not in self.reads:
                set_(self, "reads", (*self.reads, tz_from))  # read, never part of a key
        if calendar and rate_for is not None:
            raise ConfigError(
                f"rule {self.id!r}: rate_for is not supported on a calendar rule; set a "
                "per-key limit (set_limit) for a recipient's own daily cap"
            )

    @property
    def period(self) -> str | None:
        """A calendar rule's period: ``"day"``, ``"week"`` or ``"month"``; None otherwise."""
        return PERIODS[self.rate.window_us] if self.calendar else None

    def __getstate__(self) -> list[object]:
        # a rule travels as its description: rate_for (often a lambda) stays behind, but
        # for a table (TierRates), which pickles
        keep = isinstance(self.rate_for, TierRates)
        return [
            None if name == "rate_for" and not keep else getattr(self, name) for name in _FIELDS
        ]

    def __setstate__(self, state: Sequence[object]) -> None:
        # rules pickled before the later fields existed have no values for them
        missing = len(_FIELDS) - len(state)
        values = [*state, *_LATER[len(_LATER) - missing :]] if missing > 0 else state
        for name, value in zip(_FIELDS, values, strict=True):
            object.__setattr__(self, name, value)

    @property
    def limit(self) -> int:
        return self.rate.limit

    @property
    def capacity(self) -> int:
        """The most cost one hit can ever take: the burst for buckets, else the limit."""
        return self.burst if self.burst is not None else self.rate.limit

    def _derived_id(self) -> str:
        """An identity from the rule's parameters: strategy, limit, window, burst, shadow."""
        window_us = self.rate.window_us
        window = f"{window_us // 1_000_000}s" if window_us % 1_000_000 == 0 else f"{window_us}us"
        if self.calendar:
            return f"cal.{self.rate.limit}.{self.period}" + (".shadow" if self.shadow else "")
        ident = f"{self.strategy.short}.{self.rate.limit}.{window}"
        if self.burst is not None:
            ident += f".b{self.burst}"
        if self.shadow:
            ident += ".shadow"
        return ident

    def __repr__(self) -> str:
        parts = [repr(str(self.rate)), f"by={self.by!r}", f"strategy={self.strategy.value!r}"]
        if self.name is not None:
            parts.append(f"name={self.name!r}")
        if self.burst is not None:
            parts.append(f"burst={self.burst}")
        if self.shadow:
            parts.append("shadow=True")
        if self.rate_for is not None:
            parts.append(f"rate_for={self.rate_for!r}")
        if self.reads:
            parts.append(f"reads={self.reads!r}")
        if self.calendar:
            parts.append("calendar=True")
            parts.append(f"tz={self.tz!r}" if self.tz is not None else f"tz_from={self.tz_from!r}")
        return f"Rule({', '.join(parts)})"


_FIELDS = (
    "rate",
    "by",
    "strategy",
    "name",
    "burst",
    "shadow",
    "id",
    "rate_for",
    "reads",
    "calendar",
    "tz",
    "tz_from",
)
#: The defaults of the fields added after 0.1 (``rate_for`` on), for rules pickled before.
_LATER: tuple[object, ...] = (None, (), False, None, None)


def limited_rule(rule: Rule, rate: Rate, exempt: bool) -> Rule:
    """``rule`` as a per-key limit makes it decide for one key: at ``rate``, or (``exempt``)
    as a shadow rule (counted, never denying). Its id stays the rule's, so metrics and
    denials name it as before; its burst, if it set one, stays too."""
    made: Rule = object.__new__(Rule)
    for name in _FIELDS:
        object.__setattr__(made, name, getattr(rule, name))
    object.__setattr__(made, "rate", rate)
    object.__setattr__(made, "shadow", rule.shadow or exempt)
    return made
