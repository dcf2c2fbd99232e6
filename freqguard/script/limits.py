"""Per-key limits: one rule of a policy decided at another rate for one partition value (a
recipient, a tenant), or exempt from it, stored beside that value's states and read by the
same call that decides.

A rule is named in the specs by its *tag* (``contract.SPEC_RULE``), a short number derived
from its id, so a limit set under one deploy still finds its rule after the policy's rules
were reordered. The Lua stores a record's limits after its meta field's
``contract.RECORD_META``; the memory backend keeps them by record. Both decide with
:func:`apply` (the Lua's ``apply_limits``): the rules a live limit names are decided at
its rate, stored as the operator wrote it and read as the rule's strategy reads rates now
(:func:`limited`), so a limit keeps its meaning across a deploy that changes the rule's
strategy, or does not apply at all. No I/O here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from hashlib import blake2b
from typing import TYPE_CHECKING, NamedTuple

from freqguard.errors import ConfigError
from freqguard.script.contract import KEYING_WINDOW, LIMIT_CHANGE, LIMIT_ENTRY, widths
from freqguard.script.strategies.base import RuleParams, StateSpec, Twin

if TYPE_CHECKING:
    from freqguard.script.calls import Part

__all__ = [
    "KeyLimit",
    "apply",
    "change_text",
    "limited",
    "live",
    "pack_limits",
    "parse_change",
    "rule_keyings",
    "rule_tags",
    "unpack_limits",
]


class KeyLimit(NamedTuple):
    """One per-key limit as stored (``contract.LIMIT_ENTRY``)."""

    tag: int
    expiry: int  # µs on the time of the call that set it; 0: never
    exempt: bool
    limit: int  # the rate's count and window (µs), what limits_for reports
    window: int  # 0: a count of leases ("N concurrent"), over the rule's own lease
    capacity: int  # what the twins read
    interval: int

    def lives(self, now: int) -> bool:
        return self.expiry == 0 or self.expiry > now


_WIDTHS = widths(LIMIT_ENTRY)
ENTRY_BYTES = sum(_WIDTHS)


def unpack_limits(raw: bytes) -> tuple[KeyLimit, ...]:
    """A record's limits as the Lua packs them (``contract.LIMIT_ENTRY`` each)."""
    out: list[KeyLimit] = []
    for at in range(0, len(raw) - ENTRY_BYTES + 1, ENTRY_BYTES):
        values: list[int] = []
        for width in _WIDTHS:
            values.append(int.from_bytes(raw[at : at + width], "big"))
            at += width
        tag, expiry, exempt, limit, window, capacity, interval = values
        out.append(KeyLimit(tag, expiry, exempt == 1, limit, window, capacity, interval))
    return tuple(out)


def pack_limits(limits: Iterable[KeyLimit]) -> bytes:
    """The inverse of :func:`unpack_limits`."""
    return b"".join(
        b"".join(int(v).to_bytes(w, "big") for v, w in zip(limit, _WIDTHS, strict=True))
        for limit in limits
    )


def change_text(
    limit: KeyLimit | None, tag: int, ttl: int = 0, keep: Sequence[int] = (), keying: int = 0
) -> str:
    """A LIMIT call's change (``contract.LIMIT_CHANGE``): the tags whose limits it keeps
    (``keep``: every rule of the policy, whatever part, since equal values of two parts'
    partitions share a record), then: set ``limit`` for ``ttl`` µs (0: for ever), with a
    keying entry of ``keying`` (the rule's: :func:`rule_keyings`), or with ``limit`` None
    clear the limit of the rule tagged ``tag``. Either drops that limit's keying entries."""
    head = [len(keep), *keep]
    if limit is None:
        return " ".join(map(str, [*head, tag]))
    values = {**limit._asdict(), "tag": tag, "ttl": ttl, "keying": keying}
    return " ".join(map(str, [*head, *(int(values[name]) for name in LIMIT_CHANGE)]))


def parse_change(change: str) -> tuple[frozenset[int], list[int]]:
    """The tags a change keeps, and its words (see :func:`change_text`)."""
    words = [int(word) for word in change.split()]
    count = words[0]
    return frozenset(words[1 : 1 + count]), words[1 + count :]


def live(limits: Sequence[KeyLimit], now: int) -> tuple[KeyLimit, ...]:
    """The limits still in force at ``now``."""
    return tuple([limit for limit in limits if limit.lives(now)])


def rule_tags(ids: Sequence[str]) -> tuple[int, ...]:
    """Each rule's tag, from its id: 2 bytes of its digest, 4 for rules whose 2-byte tags
    collide within the policy (1 in 65,536 a pair).

    Raises:
        ConfigError: two rules whose tags collide even so (1 in 2^32 a pair).
    """
    short = [int.from_bytes(blake2b(i.encode(), digest_size=2).digest(), "big") for i in ids]
    tags = [
        tag if short.count(tag) == 1 else 65_536 + _long_tag(rule_id)
        for tag, rule_id in zip(short, ids, strict=True)
    ]
    if len(set(tags)) != len(tags):
        raise ConfigError(
            f"rules {list(ids)!r}: two rule names map to one tag; rename one (name=...)"
        )
    return tuple(tags)


def rule_keyings(
    ids: Sequence[str], partitions: Sequence[str | None], tags: Sequence[int]
) -> tuple[int, ...]:
    """Each rule's keying: 4 bytes of the digest of its id and its partition's dimension
    (a global rule's: none), at least 65,536 (``contract.KEYING_WINDOW`` says what a keying
    entry is).

    Raises:
        ConfigError: two keyings alike, or a keying alike another rule's tag (1 in 2^32 a pair).
    """
    keyings = tuple(
        65_536 + _long_tag(f"{rule_id}@{partition or ''}", b"freqguard-keying")
        for rule_id, partition in zip(ids, partitions, strict=True)
    )
    if len(set(keyings)) != len(keyings) or set(keyings) & set(tags):
        raise ConfigError(
            f"rules {list(ids)!r}: two rules' names and dimensions map to one keying; "
            "rename one (name=...)"
        )
    return keyings


def _long_tag(rule_id: str, person: bytes = b"") -> int:
    digest = blake2b(rule_id.encode(), digest_size=4, person=person).digest()
    return int.from_bytes(digest, "big") % (2**32 - 65_536)


# Effective parts by (base part, the limits applied): made once per distinct set of limits.
_MADE: dict[tuple[int, tuple[KeyLimit | None, ...]], tuple[Part, Part]] = {}
_MADE_MAX = 4096
# (rule, limit) pairs already logged as not applying (see _refused)
_REFUSED: set[tuple[str, KeyLimit]] = set()
_log = logging.getLogger("freqguard")


def limited(twin: Twin, rule: RuleParams, limit: KeyLimit) -> RuleParams | None:
    """The rule as ``limit`` makes it decide: at the rate stored with it (as written), read
    as the rule's strategy reads rates (``Twin.limited``); exempt, as a shadow rule at its
    own numbers. None where the rule's strategy cannot read that rate (it changed since the
    limit was set): the rule's own numbers apply."""
    made = twin.limited(rule, limit.limit, limit.window)
    if made is None or not limit.exempt:
        return made
    return rule._replace(shadow=True)


def apply(part: Part, limits: Sequence[KeyLimit], now: int) -> Part:
    """``part`` with the rules that a limit living at ``now`` names decided at its rate (see
    :func:`limited`); ``part`` itself when none does. The states keep their horizon (the
    memory backend files them by it, whatever limit applies)."""
    # the expiry only decides whether a limit lives: parts are made per distinct numbers
    by_tag = {limit.tag: limit._replace(expiry=0) for limit in limits if limit.lives(now)}
    if not by_tag:
        return part
    keyings = {tag for tag, entry in by_tag.items() if entry.window == KEYING_WINDOW}
    keyed = {by_tag[tag].limit for tag in keyings}  # the tags of the limits keyed so
    found: list[KeyLimit | None] = []
    made: list[RuleParams | None] = []
    for spec in part.specs:
        for rule in spec.rules:
            limit = by_tag.get(rule.tag)
            if rule.tag in keyed and rule.keying not in keyings:
                limit = None  # set for another dimension's value: not this rule's
            params = None if limit is None else limited(spec.twin, rule, limit)
            if limit is not None and params is None:
                _refused(part, len(made), limit)
            found.append(limit if params is not None else None)
            made.append(params)
    if not any(found):
        return part
    if part.limits:  # a tier's variant: its rates stay where no stored limit applies
        found = [f or t for f, t in zip(found, part.limits, strict=True)]
    key = (id(part), tuple(found))
    cached = _MADE.get(key)
    if cached is not None and cached[0] is part:
        return cached[1]
    specs: list[StateSpec] = []
    at = 0
    for spec in part.specs:
        rules = made[at : at + len(spec.rules)]
        at += len(spec.rules)
        specs.append(_spec(spec, rules) if any(rules) else spec)
    effective = part._replace(specs=tuple(specs), limits=tuple(found))
    if len(_MADE) >= _MADE_MAX:
        _MADE.clear()
    _MADE[key] = (part, effective)
    return effective


def _refused(part: Part, index: int, limit: KeyLimit) -> None:
    """Log, once per rule and limit, a stored limit its rule's strategy cannot read."""
    label = part.labels[index] if part.labels else f"the rule tagged {limit.tag}"
    if (label, limit) in _REFUSED:
        return
    if len(_REFUSED) >= _MADE_MAX:
        _REFUSED.clear()
    _REFUSED.add((label, limit))
    written = (
        f"{limit.limit} concurrent"
        if limit.window == 0
        else f"{limit.limit} per {limit.window / 1_000_000:g} s"
    )
    _log.warning(
        "freqguard: a per-key limit of %s stored for %s cannot apply to it as it is now (its "
        "strategy or period changed since the limit was set): its own rate applies; set the "
        "limit again, or clear it (it is dropped at the record's next limit change)",
        written,
        label,
    )


def _spec(spec: StateSpec, made: Sequence[RuleParams | None]) -> StateSpec:
    """One state's spec with its rules' limits applied (the Lua's ``limited_spec``)."""
    rules = tuple(rule if m is None else m for rule, m in zip(spec.rules, made, strict=True))
    # a lone exempt rule's state counts only what it admits, as a shadow rule's: never
    # beyond what its numbers hold (a bucket's tokens never go below zero)
    shadow = spec.shadow or (len(rules) == 1 and rules[0].shadow)
    window = max(r.window for r in rules)
    cap = max(r.capacity for r in rules)
    base_window, base_cap, keep_window, keep_cap = 0, 0, 0, 0
    if getattr(spec.twin, "KEEPS_OWN", False):
        # a log (or a rolling window): each rule counts by its own window, so the state
        # keeps what its own rules need too, and a stricter limit (a shorter window, a
        # smaller count) never makes it forget what they count once it is gone
        window, cap = max(window, spec.window), max(cap, spec.cap)
        # what a tier asks the state to remember stays as the tier asked it, a limit's
        # numbers aside: a state remembers a tier's (engine/tiers.py), never a limit's,
        # and a limit that covers a tier's numbers does not hide them (design note 119)
        base_window, base_cap = spec.base_window, spec.base_cap
        keep_window, keep_cap = spec.keep_window, spec.keep_cap
    return StateSpec(
        spec.twin,
        rules,
        spec.horizon,
        shadow,
        window,
        cap,
        spec.bounds,
        base_window,
        base_cap,
        keep_window,
        keep_cap,
    )
