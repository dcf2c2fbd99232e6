"""Calendar rules (``Rule(..., calendar=True, tz=... | tz_from=...)``): the periods each hit
is decided over, in its zone, sent with the call. No I/O.

The store decides on its own time, which only it knows; the client knows time zones. So for
each calendar state a call carries four instants around the client's clock (the starts of
the period before, of the current one and of the next, and the next one's end: see
:mod:`freqguard.script.strategies.calendar`), and the store takes the period holding its
time. A part with those instants in its specs is made once per distinct set of periods (a
zone's day: a dozen zones make a dozen parts a day) and kept.

Periods are local calendar dates: a day starts at the first instant of its date (local
midnight; where a DST change skips midnight, the first instant after it), a week on Monday,
a month on the 1st; a DST change makes a day of 23 or 25 hours, never two days.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta, timezone, tzinfo

from freqguard.clock import zone_named
from freqguard.errors import ConfigError, ContextError
from freqguard.options import PRIORITY, QuietHours
from freqguard.policy import Policy
from freqguard.rules import Rule
from freqguard.script.calls import Part, spec_text

__all__ = ["MAX_VARIANTS", "Calendar", "period_bounds", "quiet_bounds"]

#: The most parts with periods kept per policy (past this, all are made again when met).
MAX_VARIANTS = 1024

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US = timedelta(microseconds=1)
_DAY = timedelta(days=1)
_SECOND = 1_000_000  # µs


def _first(period: str, day: date) -> date:
    """The first date of the period holding ``day``."""
    if period == "day":
        return day
    if period == "week":
        return day - timedelta(days=day.weekday())  # Monday
    return day.replace(day=1)


def _after(period: str, first: date) -> date:
    """The first date of the period after the one beginning on ``first``."""
    if period == "day":
        return first + _DAY
    if period == "week":
        return first + 7 * _DAY
    return (first.replace(day=28) + 4 * _DAY).replace(day=1)


def _us(local: datetime) -> int:
    return (local - _EPOCH) // _US


def _offset(zone: tzinfo, second: int) -> timedelta | None:
    return datetime.fromtimestamp(second, zone).utcoffset()


def _change(zone: tzinfo, before: int, after: int) -> int:
    """µs of the change of ``zone``'s offset between two instants (µs): the first whole
    second at the new offset (a zone's changes fall on whole seconds)."""
    lo, hi = before // _SECOND, -(-after // _SECOND)
    old = _offset(zone, lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _offset(zone, mid) == old else (lo, mid)
    return hi * _SECOND


def _instant(zone: tzinfo, day: date, minute: int = 0, *, last: bool = False) -> int:
    """µs of the wall time ``minute`` after midnight of ``day`` in ``zone``: where a change of
    the clocks skips it, the change (the first instant whose wall time is at or after it);
    where one repeats it, its first occurrence, or with ``last`` (an end, exclusive) the
    last instant after which the wall time is never again before it."""
    hour, minute = divmod(minute, 60)
    wall = datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)
    early, late = _us(wall), _us(wall.replace(fold=1))
    if early > late:
        # skipped: fold 0 reads it at the offset before the change, which puts it after the
        # change, and fold 1 at the offset after, before it; the change is between them
        return _change(zone, late, early)
    if not last or early == late:
        return early  # one instant, or the first occurrence of a repeated time
    # its last occurrence, unless that is the change itself: the end is where the repeated
    # stretch begins, and the wall times before it came only once
    just_before = (_EPOCH + (late - 1) * _US).astimezone(zone).replace(tzinfo=None)
    return late if just_before < wall.replace(tzinfo=None) else early


def period_bounds(period: str, tz: str, now: int) -> tuple[int, int, int, int]:
    """The starts of the period before the one holding ``now`` (µs), of that one and of the
    next, and the next one's end, in zone ``tz``.

    Raises:
        ConfigError: ``tz`` names no zone.
    """
    zone = zone_named(tz)
    today = (_EPOCH + now * _US).astimezone(zone).date()
    current = _first(period, today)
    before = _first(period, current - _DAY)
    nxt = _after(period, current)
    return (
        _instant(zone, before),
        _instant(zone, current),
        _instant(zone, nxt),
        _instant(zone, _after(period, nxt)),
    )


def quiet_bounds(quiet: QuietHours, tz: str, now: int, exempt: bool) -> tuple[int, ...]:
    """The span of three local days around ``now`` (the day before to the day after, in
    zone ``tz``), then the quiet intervals of the nights that begin on the day before it and
    on each of its days (in order, those that overlap or touch made one, then ``(0, 0)``
    for none): none when ``exempt``.

    A night is one stretch of time, from the first instant whose wall time is in the range
    to the last: it begins at a repeated start's first occurrence and ends at a repeated
    end's last (at its first, for an end where the repeated stretch begins); a start or end
    the clocks skip is taken at the change.

    Raises:
        ConfigError: ``tz`` names no zone.
    """
    zone = zone_named(tz)
    today = (_EPOCH + now * _US).astimezone(zone).date()
    nights: list[tuple[int, int]] = []
    for offset in (-2, -1, 0, 1) if not exempt else ():
        first = today + offset * _DAY
        last = first if quiet.end > quiet.start else first + _DAY  # crossing midnight
        begin = _instant(zone, first, quiet.start)
        end = _instant(zone, last, quiet.end, last=True)
        if nights and begin <= nights[-1][1]:  # a change of the clocks joins two nights
            nights[-1] = (nights[-1][0], max(end, nights[-1][1]))
        elif begin < end:  # not both in one skipped hour
            nights.append((begin, end))
    out = [_instant(zone, today - _DAY), _instant(zone, today + 2 * _DAY)]
    for begin, end in nights + [(0, 0)] * (4 - len(nights)):
        out += (begin, end)
    return tuple(out)


class Calendar:
    """The parts of a policy with calendar rules or quiet hours, with the periods (and quiet
    intervals) of a hit in their specs."""

    __slots__ = ("_bounds", "_made", "_policy", "_rules", "_where")

    def __init__(self, policy: Policy, parts: Sequence[Part]) -> None:
        self._policy = policy
        indices = [
            i for i, rule in enumerate(policy.rules) if rule.calendar or rule.quiet is not None
        ]
        self._rules = tuple(policy.rules[i] for i in indices)
        at_rule: dict[int, tuple[int, int]] = {}  # a rule's state: (part, spec)
        for p, part in enumerate(parts):
            at = 0
            for s, state in enumerate(part.specs):
                for i in part.rule_index[at : at + len(state.rules)]:
                    at_rule[i] = (p, s)
                at += len(state.rules)
        where = [at_rule[i] for i in indices]  # a calendar rule's state is its own
        self._where = tuple(where)
        # per (period, zone): the last bounds computed, reused while now is in [lo, hi)
        self._bounds: dict[tuple[str, str], tuple[int, int, tuple[int, ...]]] = {}
        # per (parts, periods): the parts made (with the parts they were made of, whose id
        # could be another's once they are gone)
        self._made: dict[
            tuple[int, tuple[tuple[int, ...], ...]], tuple[tuple[Part, ...], tuple[Part, ...]]
        ] = {}

    def parts(
        self, parts: tuple[Part, ...], texts: Mapping[str, str], now: int, bare: bool = False
    ) -> tuple[Part, ...]:
        """``parts`` with each calendar state's periods around ``now`` in the hit's zone
        (``bare``: in UTC where the texts name none).

        Raises:
            ConfigError: a hit without the zone a ``tz_from`` rule reads, or a zone unknown.
        """
        found = tuple([self._periods(rule, texts, now, bare) for rule in self._rules])
        key = (id(parts), found)
        entry = self._made.get(key)
        if entry is not None and entry[0] is parts:
            return entry[1]
        made = self._make(parts, found)
        if len(self._made) >= MAX_VARIANTS:
            self._made.clear()
        self._made[key] = (parts, made)
        return made

    def _periods(
        self, rule: Rule, texts: Mapping[str, str], now: int, bare: bool
    ) -> tuple[int, ...]:
        quiet = rule.quiet
        tz = rule.tz if quiet is None else quiet.tz
        read = None  # the context value naming the zone, for a rule without its own
        if tz is None:
            read = rule.tz_from if quiet is None else quiet.tz_from
            assert read is not None
            tz = texts.get(read) or ("UTC" if bare else None)
            if tz is None:
                what = (
                    f"rule {rule.id!r} counts per calendar {rule.period}"
                    if quiet is None
                    else "its quiet hours are kept"
                )
                raise ContextError(
                    f"policy {self._policy.name!r}: {what} in the zone the hit names as "
                    f"{read!r}; give {read}=... (an IANA name like 'Europe/Berlin')",
                    argument=f"context.{read}",
                )
        exempt = quiet is not None and texts.get(PRIORITY) in quiet.exempt
        kind = rule.period if quiet is None else ("quiet-exempt" if exempt else "quiet")
        assert kind is not None
        cached = self._bounds.get((kind, tz))
        if cached is not None and cached[0] <= now < cached[1]:
            return cached[2]
        bounds: tuple[int, ...]
        try:
            if quiet is None:
                bounds = period_bounds(kind, tz, now)
                lo, hi = bounds[1], bounds[2]
            else:
                bounds = quiet_bounds(quiet, tz, now, exempt)
                lo, hi = period_bounds("day", tz, now)[1:3]
        except ConfigError as exc:  # a zone the hit names (a rule's own was checked when made)
            where = f"rule {rule.id!r}" if read is None else f"context value {read!r}"
            argument = None if read is None else f"context.{read}"
            raise ContextError(
                f"policy {self._policy.name!r}, {where}: {exc}", argument=argument
            ) from None
        if len(self._bounds) >= MAX_VARIANTS:
            self._bounds.clear()
        self._bounds[kind, tz] = (lo, hi, bounds)
        return bounds

    def _make(
        self, parts: tuple[Part, ...], found: tuple[tuple[int, ...], ...]
    ) -> tuple[Part, ...]:
        specs = [list(part.specs) for part in parts]
        for (p, s), bounds in zip(self._where, found, strict=True):
            specs[p][s] = specs[p][s]._replace(bounds=bounds)
        return tuple(
            part
            if list(part.specs) == specs[p]
            else part._replace(specs=tuple(specs[p]), spec_text=spec_text(specs[p]))
            for p, part in enumerate(parts)
        )
