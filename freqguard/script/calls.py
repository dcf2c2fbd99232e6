"""A script call and its reply: what the engine asks a backend to run, and what comes back.

A :class:`ScriptCall` runs the policy script on one :class:`Part` of a policy; its
:class:`Reply` says whether the part admitted the hit and each rule's wait, and reports on
the states the call left behind only when asked (:func:`unpack` reads the Lua twin's bytes).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from struct import Struct
from typing import Any, NamedTuple

from freqguard.script.contract import (
    HIT,
    OLD_SPEC_RULE,
    REPLY_DROPPED,
    REPLY_HEAD,
    REPLY_LIMITS,
    REPLY_STATE_LENGTH,
    REPLY_WAIT,
    SPEC_STATE,
    struct_codes,
)
from freqguard.script.keys import KeyLayout
from freqguard.script.limits import KeyLimit, apply, unpack_limits
from freqguard.script.strategies import StateSpec
from freqguard.script.strategies.base import Mark

__all__ = ["Part", "Reply", "Report", "ScriptCall", "admitted", "report_of", "spec_text", "unpack"]


class Part(NamedTuple):
    """The rules of a policy that one script call decides (those whose keys share a cluster
    part), compiled: everything the call needs besides the hit's values, time, cost and mode,
    and how its reply maps back to the policy's rules. One of ``PolicyPlan.parts``."""

    specs: tuple[StateSpec, ...]  # each state the call touches, in the order of its keys
    spec_text: str  # the specs as the Lua function reads them (ARGV[4])
    layouts: tuple[KeyLayout, ...]  # how each key was built (Redis folds keys into records)
    wait_format: Struct  # the Lua reply's waits, one per rule (see unpack)
    rule_index: tuple[int, ...]  # the policy's index of each rule, in reply order
    # per rule, in reply order, the per-key limit a call applied (None: the rule's own);
    # empty for a part as compiled (see script.limits.apply)
    limits: tuple[KeyLimit | None, ...] = ()
    # per rule, in reply order, how a log line names it ("rule 'r' of policy 'p'")
    labels: tuple[str, ...] = ()

    @classmethod
    def build(
        cls,
        specs: Sequence[StateSpec],
        layouts: Sequence[KeyLayout],
        rule_index: Sequence[int],
        labels: Sequence[str] = (),
    ) -> Part:
        """A part of these states (each read by its rules, policy indices in spec order)."""
        wait_format = Struct(">" + struct_codes(REPLY_WAIT) * len(rule_index))
        return cls(
            tuple(specs),
            spec_text(specs),
            tuple(layouts),
            wait_format,
            tuple(rule_index),
            (),
            tuple(labels),
        )


def spec_text(specs: Sequence[StateSpec], kept: bool = True) -> str:
    """The specs as the Lua reads them (ARGV[4]; ``contract.SPEC_STATE``, ``SPEC_RULE``);
    not ``kept``: without the window and count each state keeps and each rule's keying, as
    0.3.0 wrote them (a receipt's fingerprint still names its specs so)."""
    words = [len(specs)]
    names = SPEC_STATE if kept else SPEC_STATE[:3]
    for spec in specs:
        state = {
            "code": spec.twin.code,
            "shadow": int(spec.shadow),
            "rule_count": len(spec.rules),
            "window": spec.base_window or spec.window,
            "cap": spec.base_cap or spec.cap,
        }
        words += [state[name] for name in names]
        for rule in spec.rules:  # RuleParams' fields are contract.SPEC_RULE
            words += map(int, rule if kept else rule[: len(OLD_SPEC_RULE)])
        # a calendar state's periods follow its rules (its twin's BOUNDS; 0s as compiled:
        # every call sends a part with the periods of its hit, engine.calendar)
        words += spec.bounds or (0,) * getattr(spec.twin, "BOUNDS", 0)
    return " ".join(map(str, words))


Report = list[tuple[int, int]]


class Reply:
    """One part's answer.

    Attributes:
        part: the part as decided: the call's, with the per-key limits that applied.
        allowed: whether no non-shadow rule denied.
        waits: µs until each rule would admit the hit (0: it does), in the part's rule order.
        now: the µs the part was judged at: the call's time, or a state's later one (time per
            state never goes back, see :func:`run`).
        limits: the record's per-key limits as stored after the call (live or not).
    """

    __slots__ = (
        "_data",
        "_kept",
        "_part",
        "_report",
        "_views",
        "allowed",
        "limits",
        "now",
        "waits",
    )

    def __init__(
        self,
        part: Part,
        allowed: bool,
        waits: Sequence[int],
        now: int,
        views: list[Any] | None = None,
        data: bytes = b"",
        report: Report | None = None,
        limits: tuple[KeyLimit, ...] = (),
        kept: list[Any] | None = None,
    ) -> None:
        self._part = part
        self._kept = kept
        self._report = report
        self.allowed = allowed
        self.waits = waits
        self.now = now
        self._views = views
        self._data = data
        self.limits = limits

    @property
    def part(self) -> Part:
        return self._part

    def views(self) -> list[Any]:
        """Each state as the call left it, loaded at :attr:`now`, in the part's order (a memory
        log may have grown since: only its marks, which do not read it, use it then)."""
        views = self._views
        if views is None:
            views = self._views = _views(self._part, self._data, self.now)
        return views

    def kept(self) -> list[Any]:
        """Each state as the store keeps it after a denial (which writes none), as stored,
        not loaded (None: none): what a later call loads, at its own time and numbers."""
        kept = self._kept
        if kept is None:
            twins = [spec.twin for spec in self._part.specs]
            raws = _raws(self._part, self._data)
            kept = self._kept = [t.decode(raw) if raw else None for t, raw in zip(twins, raws)]  # noqa: B905
        return kept

    def report(self) -> Report:
        """``(remaining, reset_after µs)`` per rule, in the part's rule order."""
        report = self._report
        if report is None:
            report = self._report = report_of(self._part, self.views(), self.now)
        return report

    def marks(self, cost: int, mode: int) -> tuple[Mark | None, ...]:
        """Per state, what a refund needs to take back exactly what this call consumed
        (``None``: it consumed nothing there); see ``Twin.mark``."""
        specs = self._part.specs
        if mode != HIT or cost == 0 or not self.allowed:
            return (None,) * len(specs)
        marks: list[Mark | None] = []
        first, waits, now = 0, self.waits, self.now
        for view, spec in zip(self.views(), specs):  # noqa: B905
            # a shadow rule's own state consumes only when that rule admits
            took = not spec.shadow or waits[first] == 0
            marks.append(spec.twin.mark(view, now, spec) if took else None)
            first += len(spec.rules)
        return tuple(marks)


class ScriptCall(NamedTuple):
    """One invocation of the policy script on one part.

    It carries the hit's dimension values, not keys: each backend derives what it stores by
    from the part's key layouts (memory: the key strings, :meth:`keys`; Redis: one record
    and a field per state), so neither builds the other's form.
    """

    part: Part
    texts: Mapping[str, str]  # the hit's dimension values, as text
    now: int | None  # µs; None: the backend's own time (Redis: server TIME)
    cost: int
    mode: int
    # REFUND only: per state, what the hit to give back left there (Reply.marks); None
    # for a state it did not consume. No marks at all: give back the newest units.
    marks: tuple[Mark | None, ...] | None = None
    # LIMIT only: the change to the record's per-key limits (contract.LIMIT_CHANGE; a tag
    # alone clears; "" only reads)
    change: str | None = None

    def keys(self) -> tuple[str, ...]:
        """The key of each state, in the part's order (see :mod:`freqguard.script.keys`)."""
        texts = self.texts
        return tuple([layout.build(texts) for layout in self.part.layouts])


def report_of(part: Part, views: Sequence[Any], now: int) -> Report:
    report: Report = []
    for view, spec in zip(views, part.specs):  # noqa: B905 (built together)
        rep = spec.twin.report
        for rule in spec.rules:
            report.append(rep(view, now, rule))
    return report


_HEAD = Struct(">" + struct_codes(REPLY_HEAD))  # allowed, now
_LENGTH = Struct(">" + struct_codes(REPLY_STATE_LENGTH))


def unpack(part: Part, data: bytes) -> Reply:
    """The Lua function's reply (see its header) as a Reply that reports when asked."""
    flags, now = _HEAD.unpack_from(data)
    waits = part.wait_format.unpack_from(data, _HEAD.size)
    if flags > 1:
        if flags & REPLY_DROPPED:
            note_dropped()
        if flags & REPLY_LIMITS:  # the record holds per-key limits: they follow the states
            limits = unpack_limits(data[_after_states(part, data) :])
            return Reply(
                apply(part, limits, now), flags & 1 == 1, waits, now, None, data, None, limits
            )
    return Reply(part, flags & 1 == 1, waits, now, None, data)


_log = logging.getLogger("freqguard")
#: how many records without a layout stamp this process's calls dropped (see note_dropped)
dropped_records = [0]


def note_dropped() -> None:
    """Log that a call dropped a record without a layout stamp (``contract.RECORD_LAYOUT``):
    the first, then the 10th, 100th, 1000th..., so an upgrade over millions of records says
    so in a few lines."""
    dropped_records[0] = count = dropped_records[0] + 1
    if count == 10 ** (len(str(count)) - 1):  # 1, 10, 100, ...
        _log.warning(
            "freqguard: dropped a Redis record without a layout stamp (written by freqguard "
            "0.1, or by something else) and decided its call as if it were absent; %d so far "
            "in this process (logged at 1, 10, 100, ...). See the upgrade notes: "
            "docs/upgrading.md",
            count,
        )


def _after_states(part: Part, data: bytes) -> int:
    at = _HEAD.size + part.wait_format.size
    for _ in part.specs:
        at += 4 + _LENGTH.unpack_from(data, at)[0]
    return at


def admitted(mode: int, cost: int, reply: bytes) -> bool:
    """Whether a call of ``mode`` and ``cost`` whose Lua reply is ``reply`` admitted a hit
    that consumed (a denial writes nothing: all-or-nothing)."""
    return mode == HIT and cost > 0 and _HEAD.unpack_from(reply)[0] & 1 == 1


def _views(part: Part, data: bytes, now: int) -> list[Any]:
    """The states a Lua reply carries, loaded as :func:`run` leaves them."""
    views: list[Any] = []
    for spec, raw in zip(part.specs, _raws(part, data)):  # noqa: B905 (one a state)
        twin = spec.twin
        views.append(twin.load(twin.decode(raw) if raw else None, now, spec))
    return views


def _raws(part: Part, data: bytes) -> list[bytes]:
    """The packed states a Lua reply carries, in the part's order (b"": none)."""
    at = _HEAD.size + part.wait_format.size
    raws: list[bytes] = []
    for _ in part.specs:
        (length,) = _LENGTH.unpack_from(data, at)
        raws.append(data[at + 4 : at + 4 + length])
        at += 4 + length
    return raws
