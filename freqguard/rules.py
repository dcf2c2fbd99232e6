"""Rules: one cap, keyed by dimensions, enforced by one strategy."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import limits

from freqguard.bounds import MAX_LIMIT, MAX_LOG_LIMIT
from freqguard.clock import PERIODS, check_calendar
from freqguard.errors import ConfigError, shown
from freqguard.options import (
    NAME_PATTERN,
    RESERVED_DIMENSIONS,
    QuietHours,
    TierRates,
    check_name,
    dimension_names,
    fit_name,
    priority_names,
)
from freqguard.rates import Rate, as_rate, seconds_window
from freqguard.strategy import Strategy, check_bounds

__all__ = [
    "NAME_PATTERN",
    "RESERVED_DIMENSIONS",
    "Rule",
    "Strategy",
    "TierRates",
    "check_name",
    "concurrent_rate",
    "fit_name",
    "limited_rule",
    "quiet_rule",
]

#: The id of a policy's quiet-hours pseudo-rule (a rule may not take it).
QUIET_RULE = "quiet-hours"


_CONCURRENT = re.compile(r"\s*(\d{1,12})\s+concurrent\s*", re.IGNORECASE)


def _leased(
    rate: Rate | str | limits.RateLimitItem, strategy: Strategy | str | None, lease: object
) -> tuple[Rate | str | limits.RateLimitItem, Strategy | str | None]:
    """A rate ``"N concurrent"`` with ``lease`` seconds: N per lease, strategy concurrency;
    each of the three without the others is refused, naming what it lacks."""
    concurrent = _CONCURRENT.fullmatch(rate) if isinstance(rate, str) else None
    if concurrent is None:
        if lease is not None:
            raise ConfigError(
                f"lease={shown(lease)} applies to a concurrency rule only: write its rate as "
                f"'N concurrent', e.g. Rule('10 concurrent', by='user', lease=60), "
                f"not {shown(rate)}"
            )
        concurrency = strategy is not None and Strategy.parse(strategy) is Strategy.CONCURRENCY
        if concurrency and isinstance(rate, str):  # a Rate: its window is the lease
            raise ConfigError(
                f"a concurrency rule's rate is written 'N concurrent' with lease=SECONDS, "
                f"e.g. Rule('10 concurrent', by='user', lease=60), not {shown(rate)}"
            )
        return rate, strategy
    if lease is None:
        raise ConfigError(
            f"rule {rate!r} needs lease=SECONDS: how long a lease not given back (its holder "
            "died) is held before it frees itself"
        )
    told = None if strategy is None else Strategy.parse(strategy)
    if told is not None and told is not Strategy.CONCURRENCY:
        raise ConfigError(f"rule {rate!r} counts leases (strategy concurrency), not {told.value}")
    limit = int(concurrent.group(1))
    if not 1 <= limit <= MAX_LOG_LIMIT:
        raise ConfigError(
            f"rule {rate!r}: at most {MAX_LOG_LIMIT} leases at once (one entry each), "
            f"at least 1, got {shown(limit)}"
        )
    return Rate(limit, seconds_window("lease", lease)), Strategy.CONCURRENCY


def concurrent_rate(rule: Rule, text: str) -> Rate | None:
    """A per-key limit written ``"N concurrent"`` for a concurrency rule: N leases of the
    rule's own lease; None for any other text (parsed as a rate) or rule."""
    if rule.strategy is not Strategy.CONCURRENCY:
        return None
    concurrent = _CONCURRENT.fullmatch(text)
    if concurrent is None:
        raise ConfigError(
            f"rule {rule.id!r} counts leases: its per-key limit is written 'N concurrent' "
            f"(N leases of {rule.lease} seconds), not {text!r}"
        )
    return Rate(int(concurrent.group(1)), rule.rate.window)


def _rate_for(function: object, name: str | None, rate: Rate) -> Any:
    if function is None:
        return None
    if not callable(function):
        raise ConfigError(f"rate_for must be a function of the context, got {shown(function)}")
    if name is None:
        raise ConfigError(
            f"a rule with rate_for needs a name (its keys must not change with its rate): "
            f"give Rule({str(rate)!r}, ..., name=...)"
        )
    return function


def _reads(
    reads: str | Sequence[str], by: tuple[str, ...], rate_for: object, tz_from: object
) -> tuple[str, ...]:
    names = dimension_names(reads)
    if names and rate_for is None and not (names == (tz_from,)):
        raise ConfigError(f"reads={names!r} is read by rate_for only, and the rule has none")
    unread = set(names) - {getattr(rate_for, "read", None), tz_from}
    if isinstance(rate_for, TierRates) and unread:  # a table says what it reads
        raise ConfigError(
            f"reads={names!r}: {sorted(unread)} read by nothing, as the rule's TierRates "
            f"reads {rate_for.read!r} (TierRates(name, ...) picks the rate by that name)"
        )
    shared = sorted(set(names) & set(by))
    if shared:
        raise ConfigError(f"reads names values that are no dimension; {shared} are in by")
    return names


@dataclass(frozen=True, slots=True, init=False)
class Rule:
    """One cap: ``rate`` per set of ``by`` values, enforced by ``strategy``.

    Args:
        rate: a :class:`Rate`, a rate string (``"15/minute"``) or limits' ``parse(...)``.
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
        lease: with a rate ``"N concurrent"``: at most N leases held at once per set of
            ``by`` values (strategy concurrency), taken by ``Guard.lease``; a lease not
            given back frees itself ``lease`` seconds after it was taken.

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
    only: tuple[str, ...] | None = field(repr=False)
    caps: tuple[tuple[str, int], ...] = field(repr=False)
    quiet: QuietHours | None = field(repr=False)  # the policy's quiet-hours pseudo-rule

    def __init__(
        self,
        rate: Rate | str | limits.RateLimitItem,
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
        only: Sequence[str] | None = None,
        caps: Mapping[str, int] | None = None,
        lease: float | None = None,
    ) -> None:
        rate, strategy = _leased(rate, strategy, lease)
        rate = as_rate(rate)
        if not isinstance(calendar, bool):
            raise ConfigError(f"calendar must be a bool, got {shown(calendar)}")
        default = Strategy.FIXED_WINDOW if calendar else Strategy.SLIDING_LOG
        strategy = default if strategy is None else Strategy.parse(strategy)
        check_calendar(calendar, strategy.value, rate, tz, tz_from)
        if tz_from is not None:
            dimension_names(tz_from)
        if name is not None:
            check_name("rule name", name)
        check_bounds(rate, strategy, burst, name)
        if not isinstance(shadow, bool):
            raise ConfigError(f"shadow must be a bool, got {shown(shadow)}")
        set_ = object.__setattr__
        set_(self, "rate", rate)
        set_(self, "by", dimension_names(by))
        set_(self, "strategy", strategy)
        set_(self, "name", name)
        set_(self, "burst", None if burst is None else int(burst))  # an int subclass: plain
        set_(self, "shadow", shadow)
        set_(self, "calendar", calendar)
        set_(self, "tz", tz)
        set_(self, "tz_from", tz_from)
        set_(self, "id", name if name is not None else self._derived_id())
        set_(self, "rate_for", _rate_for(rate_for, name, rate))
        if isinstance(rate_for, TierRates):  # each rate of a table, as the rule's own
            for tier, tier_rate in rate_for.rates.items():
                try:
                    check_bounds(tier_rate, strategy, burst, name)
                except ConfigError as exc:
                    raise ConfigError(f"tier {tier!r} ({tier_rate}): {exc}") from None
        set_(self, "reads", _reads(reads, self.by, rate_for, tz_from))
        if isinstance(rate_for, TierRates) and rate_for.read not in (*self.reads, *self.by):
            set_(self, "reads", (*self.reads, rate_for.read))  # it says what it reads
        if tz_from is not None:
            if tz_from in self.by:
                raise ConfigError(f"tz_from={tz_from!r} is a dimension of the rule (by)")
            if tz_from not in self.reads:
                set_(self, "reads", (*self.reads, tz_from))  # read, never part of a key
        if rate_for is not None and (calendar or self.strategy is Strategy.CONCURRENCY):
            kind, own = ("calendar", "daily cap") if calendar else ("concurrency", "count")
            raise ConfigError(
                f"rule {self.id!r}: rate_for is not supported on a {kind} rule; set a per-key "
                f"limit (set_limit; 'N concurrent' for leases) for a caller's own {own}"
            )
        set_(self, "only", None if only is None else priority_names(f"rule {self.id!r} only", only))
        if self.only == ():
            raise ConfigError(f"rule {self.id!r}: only= names no priority; leave it out instead")
        set_(self, "caps", _caps(self, caps))
        set_(self, "quiet", None)

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
        if self.quiet is not None:  # the policy's quiet hours: their pseudo-rule's rate is no one's
            return f"Rule(quiet={self.quiet!r}, by={self.by!r}, name={self.name!r})"
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
        if self.only is not None:
            parts.append(f"only={self.only!r}")
        if self.caps:
            parts.append(f"caps={dict(self.caps)!r}")
        if self.strategy is Strategy.CONCURRENCY:
            parts[0] = repr(f"{self.rate.limit} concurrent")
            parts[2] = f"lease={self.lease}"
        return f"Rule({', '.join(parts)})"

    @property
    def lease(self) -> float | None:
        """A concurrency rule's lease, in seconds (how long a lease not given back is
        held); None for any other rule."""
        if self.strategy is not Strategy.CONCURRENCY:
            return None
        seconds = self.rate.window_us / 1_000_000
        return int(seconds) if seconds.is_integer() else seconds


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
    "only",
    "caps",
    "quiet",
)
#: The defaults of the fields added after 0.1 (``rate_for`` on), for rules pickled before.
_LATER: tuple[object, ...] = (None, (), False, None, None, None, (), None)


def _caps(rule: Rule, caps: object) -> tuple[tuple[str, int], ...]:
    """A rule's caps per priority, checked: each below the rule's capacity, on a priority
    the rule applies to."""
    if caps is None:
        return ()
    where = f"rule {rule.id!r} caps"
    if not isinstance(caps, Mapping) or not caps:
        raise ConfigError(f"{where}: a table of priority -> cap, got {shown(caps)}")
    names = priority_names(where, list(caps))
    for name in names:
        cap = caps[name]
        if isinstance(cap, bool) or not isinstance(cap, int) or not 0 < cap < rule.capacity:
            raise ConfigError(
                f"{where}: the cap of {name!r} is an integer from 1 to {rule.capacity - 1} "
                f"(below the rule's {'burst' if rule.strategy.uses_burst else 'limit'} "
                f"{rule.capacity}), got {shown(cap)}"
            )
        if rule.only is not None and name not in rule.only:
            raise ConfigError(
                f"{where}: {name!r} is capped, yet the rule applies only to {rule.only}"
            )
    return tuple(sorted((name, caps[name]) for name in names))


def quiet_rule(quiet: QuietHours, by: tuple[str, ...]) -> Rule:
    """The pseudo-rule ``"quiet-hours"`` a policy with ``quiet`` decides, keyed by ``by``
    (its first part's partition, so it is decided before any count is taken): it denies a
    hit inside the quiet hours, counts nothing, and is never the narrowest rule."""
    made = Rule(Rate(MAX_LIMIT, timedelta(days=1)), by, "fixed-window", name=QUIET_RULE)
    object.__setattr__(made, "quiet", quiet)
    if quiet.tz_from is not None:
        object.__setattr__(made, "reads", (quiet.tz_from,))
    return made


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
