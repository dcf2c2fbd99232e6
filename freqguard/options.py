"""What rules and policies take besides rates: names (of policies, rules, dimensions and
context values), tier tables (:class:`TierRates`), quiet hours (:class:`QuietHours`) and
priorities. No I/O."""

from __future__ import annotations

import hashlib
import keyword
import re
from collections.abc import Mapping, Sequence

from freqguard.clock import zone_named
from freqguard.errors import ConfigError, shown
from freqguard.rates import Rate, parse_rate

__all__ = [
    "NAME_PATTERN",
    "PRIORITY",
    "RESERVED_DIMENSIONS",
    "QuietHours",
    "TierRates",
    "check_name",
    "dimension_names",
    "fit_name",
    "priority_names",
]

#: The context value that names a hit's priority, on a policy with ``priorities``.
PRIORITY = "priority"

NAME_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_DIMENSION = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# Names the Guard's own arguments take (hit, acquire, reset, set_limit...); a dimension or a
# context value by one of these names could not be passed beside them.
RESERVED_DIMENSIONS = frozenset(
    {"policy", "cost", "contexts", "timeout", "self", "priority", "rule", "rules", "rate", "ttl"}
)


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
        raise ConfigError(
            f"{kind} must be 1 to 64 characters of A-Z a-z 0-9 _ . -, got {shown(value)}"
        )
    return value


def dimension_names(by: str | Sequence[str]) -> tuple[str, ...]:
    """Validated dimension (or context value) names.

    Raises:
        ConfigError: a name that is not an identifier, a keyword or reserved, or repeated;
            names that are neither a string nor a list or tuple of them.
    """
    if isinstance(by, str):
        names: tuple[str, ...] = (by,)
    elif isinstance(by, (list, tuple)):
        names = tuple(by)
    else:  # a set's order is its process's (hash seeds): keys would differ between workers
        kind = type(by).__name__
        if isinstance(by, (set, frozenset)):
            kind += ", whose order differs between processes"
        raise ConfigError(
            f"dimension names must be a name or a list or tuple of names, got {shown(by)} (a "
            f"{kind}): by='user', or by=['user', 'content'] in order (() for one global "
            "count)"
        )
    for name in names:
        if (
            not isinstance(name, str)
            or not _DIMENSION.fullmatch(name)
            or keyword.iskeyword(name)
            or name in RESERVED_DIMENSIONS
        ):
            reserved = ", ".join(sorted(RESERVED_DIMENSIONS))
            listed = [part.strip() for part in name.split(",")] if isinstance(name, str) else []
            hint = f"; several dimensions are a list: by={listed!r}" if len(listed) > 1 else ""
            raise ConfigError(
                f"dimension {shown(name)} is not allowed (by=): use a Python identifier of at "
                f"most 64 characters that is not a keyword nor one of {reserved}{hint}"
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"dimensions must be distinct, got {shown(names)}")
    return names


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
        (self.read,) = dimension_names(read)
        if not isinstance(rates, Mapping) or not rates:
            raise ConfigError(f"TierRates takes a table of value -> rate, got {shown(rates)}")
        self.rates: dict[str, Rate] = {}
        for value, rate in rates.items():
            if not isinstance(value, str):
                raise ConfigError(f"TierRates: a tier is named by a string, got {shown(value)}")
            self.rates[value] = parse_rate(rate) if isinstance(rate, str) else rate
            if not isinstance(self.rates[value], Rate):
                raise ConfigError(f"TierRates: tier {value!r} has no rate: {shown(rate)}")

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


def _minute_of_day(name: str, value: object) -> int:
    """``"HH:MM"`` (00:00 to 23:59) as minutes after midnight."""
    found = re.fullmatch(r"([01]\d|2[0-3]):([0-5]\d)", value) if isinstance(value, str) else None
    if found is None:
        raise ConfigError(
            f"QuietHours {name} is a time of day 'HH:MM' from 00:00 to 23:59, got {shown(value)}"
        )
    return int(found[1]) * 60 + int(found[2])


class QuietHours:
    """Hours of each local day when a policy sends nothing: ``QuietHours("21:00", "08:00",
    tz_from="tz")``. A hit inside them is denied by the pseudo-rule ``"quiet-hours"``,
    consumes nothing, and its ``retry_after`` is the end of the quiet period (``acquire``
    and ``on_exceeded="wait"`` defer to it, within their timeout). A period whose end is
    earlier than its start crosses midnight. On a night the clocks change, every wall time in
    the range is quiet: a start or end they skip is taken at the change, and the night runs
    from a repeated start's first occurrence to a repeated end's last. Decided in the same
    call as the policy's rules, on the store's time.

    Args:
        start: the local time of day they begin, ``"HH:MM"``.
        end: the local time of day they end (the first minute sending resumes).
        tz: the zone (an IANA name), or
        tz_from: the context value naming each hit's zone (the recipient's).
        exempt: priorities that pass through them (the policy's ``priorities``).

    Raises:
        ConfigError: a time that is not ``HH:MM``, start equal to end, not exactly one of
            ``tz`` and ``tz_from``, a zone unknown, or an exempt priority not a name.
    """

    __slots__ = ("end", "exempt", "start", "tz", "tz_from")

    def __init__(
        self,
        start: str,
        end: str,
        *,
        tz: str | None = None,
        tz_from: str | None = None,
        exempt: Sequence[str] = (),
    ) -> None:
        self.start, self.end = _minute_of_day("start", start), _minute_of_day("end", end)
        if self.start == self.end:
            raise ConfigError(f"QuietHours start and end are both {start!r}: give two times")
        if (tz is None) == (tz_from is None):
            raise ConfigError("QuietHours needs exactly one of tz (a zone) and tz_from")
        if tz is not None:
            zone_named(tz)
        self.tz, self.tz_from = tz, None if tz_from is None else dimension_names(tz_from)[0]
        self.exempt = priority_names("QuietHours exempt", exempt)

    def text(self, minute: int) -> str:
        return f"{minute // 60:02d}:{minute % 60:02d}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QuietHours):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[object, ...]:
        return (self.start, self.end, self.tz, self.tz_from, self.exempt)

    def __repr__(self) -> str:
        zone = f"tz={self.tz!r}" if self.tz is not None else f"tz_from={self.tz_from!r}"
        exempt = f", exempt={self.exempt!r}" if self.exempt else ""
        return f"QuietHours({self.text(self.start)!r}, {self.text(self.end)!r}, {zone}{exempt})"


def priority_names(what: str, names: object) -> tuple[str, ...]:
    """Priority names: distinct words of 1 to 64 characters ``A-Z a-z 0-9 _ . -``.

    Raises:
        ConfigError: naming ``what`` and the bad value.
    """
    found = (names,) if isinstance(names, str) else names
    if not isinstance(found, (list, tuple)):
        raise ConfigError(f"{what} takes a list of priority names, got {shown(names)}")
    for name in found:
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            raise ConfigError(
                f"{what}: a priority is 1 to 64 characters of A-Z a-z 0-9 _ . -, got {shown(name)}"
            )
    if len(set(found)) != len(found):
        raise ConfigError(f"{what}: priorities must be distinct, got {shown(list(found))}")
    return tuple(found)
