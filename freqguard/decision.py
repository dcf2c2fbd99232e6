"""The answer to a hit: allowed or not, and the state of every rule."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from freqguard.headers import binding_rule, rate_limit_headers
from freqguard.rules import Rule
from freqguard.script.strategies.base import Mark

__all__ = ["Decision", "Receipt", "RuleState", "binding_rule"]

T = TypeVar("T")

_US = 1_000_000.0


@dataclass(frozen=True, slots=True)
class RuleState:
    """What one rule said.

    Attributes:
        rule: the rule.
        allowed: whether this rule admitted the hit (a shadow rule's "no" does not block).
        capacity: the most the rule admits at once (its rate's limit; the burst for
            token-bucket and gcra). ``limit`` is the same number, under the name of the
            ``RateLimit-Limit`` header (kept for compatibility; a rule's ``limit`` is its
            rate's count).
        remaining: cost units it would still admit now (after this hit, if it consumed).
        reset_after: seconds until the rule is back to full capacity.
        retry_after: seconds until this hit would fit; 0.0 when it did.
    """

    rule: Rule
    allowed: bool
    capacity: int
    remaining: int
    reset_after: float
    retry_after: float

    @property
    def limit(self) -> int:
        """The same as :attr:`capacity` (the header's name)."""
        return self.capacity


Raw = tuple[tuple[Rule, int, int, int], ...]
Marks = tuple[tuple[Mark | None, ...], ...]


class Receipt:
    """What one admitted hit consumed: ``Guard.refund(decision)`` gives back exactly that.

    A sliding log takes back the entries the hit recorded (not the newest, which may be
    another caller's); a fixed window only while the hit's window lasts; a bucket only the
    part of the hit's own tokens that time has not already returned. A receipt is spent by
    its refund: refunding it again is an error (in this process; a copy sent elsewhere, e.g.
    pickled, is not told).

    Attributes:
        policy: the policy's name.
        cost: the units the hit took.
        times_us: per rule, in policy order, the µs the hit was judged and recorded at (the
            server's or pinned time, or a state's later one: time per state never goes back).
        context: the hit's dimension values, as text.
        marks: per part, per state, what the hit left there (see ``Twin.mark``).
        fingerprint: the policy's rules as they were when the hit was decided; a refund
            against a policy of that name whose rules changed since is refused.
        fallback: the fallback backend the hit consumed on, as the guard was given it (None:
            the store), where its refund goes whatever the policy's ``on_error`` is by then
            and whichever face of the guard gives it back; not pickled.
        prefix: the key prefix of the guard that made it (None: one pickled by 0.3.0), whose
            guards alone give it back.
    """

    __slots__ = (
        "context",
        "cost",
        "fallback",
        "fingerprint",
        "marks",
        "policy",
        "prefix",
        "spent",
        "times_us",
    )

    def __init__(
        self,
        policy: str,
        cost: int,
        times_us: tuple[int, ...],
        context: Mapping[str, str],
        marks: Marks,
        fingerprint: str,
        spent: bool = False,
        prefix: str | None = None,
    ) -> None:
        self.policy = policy
        self.prefix = prefix
        self.fingerprint = fingerprint
        self.cost = cost
        self.times_us = times_us
        self.context = context
        self.marks = marks
        self.spent = spent
        self.fallback: object = None

    def __reduce__(self) -> tuple[object, ...]:
        args = (self.policy, self.cost, self.times_us, dict(self.context), self.marks)
        return (Receipt, (*args, self.fingerprint, self.spent, self.prefix))

    def __repr__(self) -> str:  # never the context: it may hold message content
        return f"Receipt(policy={self.policy!r}, cost={self.cost}, times_us={self.times_us})"


class Decision:
    """The answer for one hit of one policy; true when allowed.

    The top-level ``remaining``, ``limit`` and ``reset_after`` are those of the binding rule:
    the denying rule that frees up last, or else the rule with the least remaining.
    ``retry_after`` is the seconds until every denying rule admits the hit (0.0 when allowed):
    a denied hit consumes nothing, so waiting that long is enough unless others get there
    first.

    ``allowed``, ``retry_after`` and ``denied_by`` come with the decision. The rest is
    reported from the states the hit left behind when first read (most callers only look at
    ``allowed``), and is the same whenever it is read. Decisions are immutable, compare and
    hash by value, and pickle.

    Attributes:
        policy: the policy's name.
        allowed: whether the hit was admitted (and, for ``hit``, consumed by every rule).
        retry_after: see above.
        denied_by: the non-shadow rules that said no, in policy order.
        remaining: see above.
        capacity: the binding rule's capacity (see above). ``limit`` is the same number,
            under the name of the ``RateLimit-Limit`` header (kept for compatibility; a
            rule's ``limit`` is its rate's count).
        reset_after: see above.
        rules: one :class:`RuleState` per rule of the policy, in policy order.
        raw: ``(rule, remaining, reset_after µs, retry_after µs)`` per rule, in policy order.
        source: how it was decided: ``"backend"`` (the store), ``"deny-cache"`` (a denial
            remembered until its ``retry_after``), ``"fallback"`` (the guard's fallback
            backend, while the store failed), ``"fail-open"`` or ``"fail-closed"`` (no store
            answered; ``on_error`` decided).
        degraded: true when the store did not decide (``fallback``, ``fail-open``,
            ``fail-closed``); a deny-cache answer is exact, not degraded.
    """

    __slots__ = (
        "_bound",
        "_lapses",
        "_raw",
        "_receipt",
        "_report",
        "_source",
        "allowed",
        "denied_by",
        "policy",
        "retry_after",
    )

    policy: str
    allowed: bool
    retry_after: float
    denied_by: tuple[Rule, ...]
    _report: Callable[[], Raw] | None
    _raw: Raw | None
    _bound: tuple[Rule, int, int, int] | None
    _receipt: Receipt | Callable[[], Receipt] | None
    _source: str

    def __init__(
        self,
        policy: str,
        allowed: bool,
        retry_after: float,
        denied_by: tuple[Rule, ...],
        raw: Raw,
        receipt: Receipt | None = None,
        source: str = "backend",
    ) -> None:
        _fill(self, (policy, allowed, retry_after, denied_by, None, raw, None, receipt))
        if source != "backend":
            if source not in SOURCES:
                raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
            _set_source(self, source)

    @property
    def source(self) -> str:
        # unset on the hot path: a decision made by the store never pays for the attribute
        return getattr(self, "_source", "backend")

    @property
    def degraded(self) -> bool:
        return self.source in _DEGRADED

    @property
    def receipt(self) -> Receipt | None:
        """What the hit consumed, for an exact ``refund(decision)``; ``None`` when it consumed
        nothing (denied, a peek, ``cost=0``, or a refund's answer)."""
        receipt = self._receipt
        if receipt is None or isinstance(receipt, Receipt):
            return receipt
        made = receipt()
        with _STORING:  # the first stored is every reader's: one receipt, spent once
            stored = self._receipt
            if isinstance(stored, Receipt):  # another thread's, built meanwhile
                return stored
            _set_receipt(self, made)
        return made

    @property
    def raw(self) -> Raw:
        raw = self._raw
        if raw is None:
            assert self._report is not None
            raw = self._report()
            _set_raw(self, raw)
            _set_report(self, None)
        return raw

    def _binding(self) -> tuple[Rule, int, int, int]:
        bound = self._bound
        if bound is None:
            bound = binding_rule(self.raw)
            _set_bound(self, bound)
        return bound

    @property
    def remaining(self) -> int:
        return self._binding()[1]

    @property
    def capacity(self) -> int:
        return self._binding()[0].capacity

    @property
    def limit(self) -> int:
        """The same as :attr:`capacity` (the ``RateLimit-Limit`` header's name)."""
        return self._binding()[0].capacity

    @property
    def reset_after(self) -> float:
        return self._binding()[2] / _US

    @property
    def rules(self) -> tuple[RuleState, ...]:  # not the quiet hours': they have no rate
        return tuple(
            RuleState(rule, retry == 0, rule.capacity, remaining, reset / _US, retry / _US)
            for rule, remaining, reset, retry in self.raw
            if rule.quiet is None
        )

    def headers(self, profile: str = "ietf") -> dict[str, str]:
        """Rate-limit response headers: ``"ietf"``, ``"draft6"``, ``"x-ratelimit"``, ``"none"``
        (see :mod:`freqguard.headers`)."""
        return rate_limit_headers(self, profile)

    def _key(self) -> tuple[object, ...]:
        return (self.policy, self.allowed, self.retry_after, self.denied_by, self.raw, self.source)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Decision):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __bool__(self) -> bool:
        return self.allowed

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Decision is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Decision is immutable: cannot delete {name!r}")

    def __reduce__(self) -> tuple[object, ...]:
        args = (self.policy, self.allowed, self.retry_after, self.denied_by, self.raw)
        return (Decision, (*args, self.receipt, self.source))

    def __repr__(self) -> str:
        source = "" if self.source == "backend" else f", source={self.source!r}"
        return (
            f"Decision(policy={self.policy!r}, allowed={self.allowed}, "
            f"remaining={self.remaining}, capacity={self.capacity}, "
            f"reset_after={self.reset_after}, retry_after={self.retry_after}, "
            f"denied_by={self.denied_by!r}{source})"
        )


def _peer_result(name: str, instead: str) -> Any:
    """A peer's result attribute (``result.limited``), read: an AttributeError naming ours
    (a property: a ``__getattr__`` would be asked for every unset slot, as ``_source``)."""

    def read(decision: object) -> NoReturn:
        raise AttributeError(
            f"'Decision' object has no attribute {name!r}: {instead}", name=name, obj=decision
        )

    return property(read)


#: What a peer's result is read as, and a Decision's way (throttled-py's, limits').
_PEER_RESULT = {
    "limited": "throttled-py's result.limited is not decision.allowed",
    "state": "throttled-py's result.state.remaining (.reset_after...) is decision.remaining",
    "reset_time": "limits' WindowStats.reset_time (a time) is decision.reset_after, in "
    "seconds from now",
}
_new = object.__new__
#: Held while a receipt built on first read is stored: two threads reading it first at once
#: (a watchdog refunding a lease as its call ends) each built one, each unspent, and both
#: refunds went through.
_STORING = threading.Lock()
_SETTERS = tuple(
    Decision.__dict__[name].__set__
    for name in (
        "policy",
        "allowed",
        "retry_after",
        "denied_by",
        "_report",
        "_raw",
        "_bound",
        "_receipt",
    )
)
_set_policy, _set_allowed, _set_retry_after, _set_denied_by = _SETTERS[:4]
_set_report, _set_raw, _set_bound, _set_receipt = _SETTERS[4:]
_set_source = Decision.__dict__["_source"].__set__
_set_lapses = Decision.__dict__["_lapses"].__set__


def mark_lapsing(decision: Decision) -> None:
    """A per-key limit with a ``ttl`` stood in the records ``decision`` was made of."""
    _set_lapses(decision, True)


def lapsing(decision: Decision) -> bool:
    return getattr(decision, "_lapses", False)  # unset on every other: no cost


SOURCES = ("backend", "deny-cache", "fallback", "fail-open", "fail-closed")
_DEGRADED = frozenset(("fallback", "fail-open", "fail-closed"))


def with_source(decision: Decision, source: str) -> Decision:
    """``decision`` with its source set to ``source`` (one of :data:`SOURCES`); returned as is."""
    _set_source(decision, source)
    return decision


def set_source_all(result: T, source: str) -> T:
    """Set the source of a decision, or of each of a list of decisions, to ``source``."""
    if isinstance(result, Decision):
        _set_source(result, source)
    elif isinstance(result, list):
        for decision in result:
            _set_source(decision, source)
    return result


def _fill(decision: Decision, values: tuple[object, ...]) -> None:
    """Set every attribute, past the ``__setattr__`` that keeps decisions immutable (unrolled:
    this runs once per decision)."""
    policy, allowed, retry_after, denied_by, report, raw, bound, receipt = values
    _set_policy(decision, policy)
    _set_allowed(decision, allowed)
    _set_retry_after(decision, retry_after)
    _set_denied_by(decision, denied_by)
    _set_report(decision, report)
    _set_raw(decision, raw)
    _set_bound(decision, bound)
    _set_receipt(decision, receipt)


def make_decision(
    policy: str,
    allowed: bool,
    retry_after: float,
    denied_by: tuple[Rule, ...],
    report: Callable[[], Raw],
    receipt: Callable[[], Receipt] | None = None,
) -> Decision:
    """A Decision whose report (``raw``) and receipt are built by ``report`` and
    ``receipt`` when first read."""
    decision: Decision = _new(Decision)
    _fill(decision, (policy, allowed, retry_after, denied_by, report, None, None, receipt))
    return decision


for _name, _instead in _PEER_RESULT.items():
    setattr(Decision, _name, _peer_result(_name, _instead))
