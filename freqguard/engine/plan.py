"""A policy compiled once for execution: a :class:`PolicyPlan` knows which parts the policy
spans and which keys each part touches (both as :func:`freqguard.script.keys.policy_layout`
lays them out), the integers each rule needs, how a hit is validated, and how replies map
back to rules. No I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from functools import partial
from typing import TypeVar

from freqguard.bounds import MAX_LIMIT
from freqguard.clock import SystemClock
from freqguard.decision import Decision, Receipt, make_decision, mark_lapsing
from freqguard.engine.calendar import Calendar
from freqguard.engine.fingerprints import fingerprint, made_by
from freqguard.engine.priorities import Priorities
from freqguard.engine.requests import Requests
from freqguard.engine.tiers import Tiers, rule_params, tables_keep
from freqguard.errors import ConfigError
from freqguard.policy import Policy
from freqguard.rates import Rate
from freqguard.rules import Rule, limited_rule
from freqguard.script.calls import Part, Reply, ScriptCall
from freqguard.script.contract import CHECK, HIT, REFUND, RESET
from freqguard.script.keys import StateLayout, policy_layout
from freqguard.script.limits import KeyLimit, rule_keyings, rule_tags
from freqguard.script.strategies import KINDS, StateSpec, twin_of
from freqguard.script.strategies.base import SKIP

#: The twin of a concurrency rule's state: the leases held.
LEASES = KINDS["concurrency"]

__all__ = ["MOST_REPLACED", "PolicyPlan", "keep", "limit_rate", "rule_params"]

_US = 1_000_000.0
_new = tuple.__new__
MOST_REPLACED = 64  # a policy's versions kept past deploys: a lease goes back by its own
V = TypeVar("V")


def keep(versions: dict[str, V], fingerprint: str, version: V) -> None:
    """``version`` kept as the newest of a policy's ``versions``, its oldest dropped past
    :data:`MOST_REPLACED`."""
    versions.pop(fingerprint, None)  # back again: the newest once more
    if len(versions) >= MOST_REPLACED:
        del versions[next(iter(versions))]
    versions[fingerprint] = version


def limit_rate(limit: KeyLimit, rule: Rule) -> Rate:
    """The rate a per-key limit sets on ``rule``: a count of leases (stored without a
    window) over the rule's own lease."""
    if limit.window == 0:
        return Rate(limit.limit, rule.rate.window)
    return Rate(limit.limit, timedelta(microseconds=limit.window))


def _compile_part(
    states: tuple[StateLayout, ...], policy: Policy, tags: tuple[int, ...], keyings: tuple[int, ...]
) -> Part:
    """A part of a policy (its states, from :func:`~freqguard.script.keys.policy_layout`),
    compiled."""
    rules = policy.rules
    specs: list[StateSpec] = []
    for state in states:
        first = rules[state.rules[0]]
        params = tuple(rule_params(rules[i], tags[i], keyings[i]) for i in state.rules)
        twin = twin_of(first)
        window = max(p.window for p in params)
        cap = max(p.capacity for p in params)
        if getattr(twin, "KEEPS_OWN", False):  # its tiers' too (a table's)
            window, cap = tables_keep([rules[i] for i in state.rules], window, cap)
        specs.append(StateSpec(twin, params, twin.horizon(params), first.shadow, window, cap))
    rule_index = [i for state in states for i in state.rules]
    labels = [f"rule {rules[i].id!r} of policy {policy.name!r}" for i in rule_index]
    return Part.build(specs, [state.key for state in states], rule_index, labels)


class PolicyPlan(Requests):
    """A policy compiled for execution: its parts (their keys as :mod:`freqguard.script.keys` lays
    them out, the integers each rule needs), how a hit is validated, and how replies map back
    to rules."""

    __slots__ = (
        "_accepts",
        "_calendar",
        "_dimset",
        "_estimate",
        "_limited",
        "_most",
        "_narrow",
        "_order",
        "_priorities",
        "_skips",
        "_tiers",
        "_varies",
        "dimensions",
        "fingerprint",
        "leased",
        "name",
        "parts",
        "policy",
        "prefix",
        "reads",
        "single_part",
        "tags",
    )

    def __init__(
        self,
        policy: Policy,
        prefix: str,
        estimate: Callable[[], int] | None = None,
        bins: int = 0,
    ) -> None:
        """``estimate``: the store's time as the client best knows it (µs; default: this
        machine's clock), around which a calendar rule's periods are sent when a call's
        time is the store's own. ``bins``: how many bins the records share in Redis
        (``RedisBackend(bins=N)``; 0: a hash each)."""
        self.policy, self.prefix = policy, prefix
        self.name = policy.name
        self.dimensions = policy.dimensions
        self._dimset = frozenset(self.dimensions)
        rules = policy.rules
        self.tags = rule_tags([rule.id for rule in rules])
        layout = policy_layout(policy, prefix, bins)
        # each rule's partition dimension: what a per-key limit of it is set for (its keying)
        keyed = {i: part[0].key.partition for part in layout for s in part for i in s.rules}
        by = [keyed.get(index) for index in range(len(rules))]
        keyings = rule_keyings([rule.id for rule in rules], by, self.tags)
        self.parts = tuple(_compile_part(states, policy, self.tags, keyings) for states in layout)
        self.single_part = len(self.parts) == 1
        # which states hold leases (a concurrency rule's), per part: Guard.lease gives
        # back only those; a policy with any is taken by Guard.lease, never by hit
        self.leased = tuple(
            tuple(spec.twin is LEASES for spec in part.specs) for part in self.parts
        )
        if not any(any(part) for part in self.leased):
            self.leased = ()
        self.fingerprint = fingerprint(policy, self.parts)  # what a receipt was made by
        self._order = tuple(index for part in self.parts for index in part.rule_index)
        self.reads = policy.reads
        self._accepts = self._dimset | frozenset(self.reads)
        tiered = any(rule.rate_for is not None for rule in rules)
        self._tiers = Tiers(policy, self.parts, self.tags) if tiered else None
        calendar = any(rule.calendar or rule.quiet is not None for rule in rules)
        self._calendar = Calendar(policy, self.parts) if calendar else None
        self._priorities = Priorities(policy) if policy.priorities else None
        self._skips = any(rule.only is not None for rule in rules)  # see _rules
        # whether a hit's parts are others than those compiled (parts_for)
        self._varies = any((self._tiers, self._calendar, self._priorities))
        self._estimate = estimate if estimate is not None else SystemClock().now_us
        self._limited: dict[tuple[int, KeyLimit], Rule] = {}  # rules as per-key limits make them
        enforcing = [r for r in rules if not r.shadow]
        # the enforcing rule for every hit at its own rate with the least capacity (what a
        # fallback's shared-out plan must hold: no per-key limit there); none: any cost
        binding = [r for r in enforcing if r.only is None and r.rate_for is None]
        self._narrow = min(binding, key=lambda r: r.capacity) if binding else None
        # what bounds a cost before the call: the largest capacity a rule for every priority
        # could be decided at (a tier's, a per-key limit's), and any rule's at most (no
        # count past it is exact on every store); the hit's own, after a denial
        most = [r.strategy.max_limit for r in enforcing if r.only is None]
        self._most = min(most, default=MAX_LIMIT)

    def calls(
        self, texts: Mapping[str, str], now: int | None, cost: int, mode: int
    ) -> list[ScriptCall]:
        """One script call per part, in part order."""
        parts = self.parts_for(texts, now, bare=mode == RESET)
        return [ScriptCall(part, texts, now, cost, mode) for part in parts]

    def call(self, texts: Mapping[str, str], now: int | None, cost: int, mode: int) -> ScriptCall:
        """The one script call of a policy that lives on one part."""
        part = self.parts[0]
        if self._varies:
            part = self.parts_for(texts, now)[0]
        # tuple.__new__: a NamedTuple's own __new__ is a Python call (a hit makes one)
        return _new(ScriptCall, (part, texts, now, cost, mode, None, None))

    def parts_for(
        self, texts: Mapping[str, str], now: int | None, *, bare: bool = False
    ) -> tuple[Part, ...]:
        """The parts a call of ``texts`` at ``now`` runs: at the rates of its tier, with the
        calendar periods around ``now`` in the hit's zone. ``bare``: for a call that only
        reads limits or resets (its texts are partition values): the rules' own rates, and
        a zone the texts do not give taken as UTC (such a call writes no count).

        Raises:
            ConfigError: a ``rate_for`` that returned no rate, a zone missing or unknown.
        """
        parts = self.parts
        if self._tiers is not None and not bare:
            parts = self._tiers.parts(texts)
        if self._priorities is not None and not bare:
            parts = self._priorities.parts(parts, texts)
        if self._calendar is not None:
            at = self._estimate() if now is None else now
            parts = self._calendar.parts(parts, texts, at, bare)
        return parts

    # -- replies ---------------------------------------------------------------------------

    def decide(
        self,
        replies: list[Reply],
        texts: Mapping[str, str] | None = None,
        cost: int = 0,
        mode: int = CHECK,
        batch: bool = False,
    ) -> Decision:
        """Turn one reply per part (in part order) into a Decision; the per-rule report and
        the receipt of a hit that consumed are left to the Decision, built when first read.
        A denial of a cost that could never be granted raises :class:`Unfit` (see
        :meth:`check_fits`), but in a ``batch``, whose other hits may have consumed."""
        receipt = None
        if mode == HIT and cost > 0 and texts is not None:
            receipt = partial(self._receipt, texts, cost, replies)
        if mode == REFUND:  # never refused: the states it leaves, no rule's wait
            return make_decision(self.name, True, 0.0, (), partial(self.raw_of, replies, True))
        if self.single_part:
            reply = replies[0]
            waits = reply.waits
            if reply.allowed and not any(waits):  # the common case: no rule said no
                raw = partial(self.raw_of, replies)
                return make_decision(self.name, True, 0.0, (), raw, receipt)
            order = self.parts[0].rule_index
        else:
            waits = [wait for reply in replies for wait in reply.waits]
            order = self._order
        rules = self._rules(replies)
        denied: list[Rule] = [None] * len(rules)  # type: ignore[list-item]
        longest = 0
        for index, wait in zip(order, waits):  # noqa: B905 (the parts built both)
            rule = rules[index]
            if wait and not rule.shadow:
                denied[index] = rule
                longest = max(longest, wait)
        denied_by = tuple(rule for rule in denied if rule is not None)
        allowed = not denied_by
        narrower = self.narrower(replies, cost, texts) if not allowed and cost > 0 else ()
        turns = {index: turn for index, _, _, turn in narrower if turn}
        if turns:  # a cost only a lapsing per-key limit refuses: its rule's turn, not its wait
            longest = max(
                turns.get(index, wait)
                for index, wait in zip(order, waits)  # noqa: B905
                if wait and not rules[index].shadow
            )
        decision = make_decision(
            self.name,
            allowed,
            longest / _US,
            denied_by,
            partial(self.raw_of, replies),
            receipt if allowed else None,
        )
        if not allowed and any(limit.expiry for reply in replies for limit in reply.limits):
            mark_lapsing(decision)  # a ttl's denial may end early: not the deny cache's
        if narrower and not batch:
            self.check_fits(narrower, cost, decision)
        return decision

    def _receipt(self, texts: Mapping[str, str], cost: int, replies: list[Reply]) -> Receipt:
        times = [0] * len(self.policy.rules)
        for part, reply in zip(self.parts, replies):  # noqa: B905
            for index in part.rule_index:
                times[index] = reply.now
        marks = tuple(reply.marks(cost, HIT) for reply in replies)
        return Receipt(
            self.name, cost, tuple(times), texts, marks, self.fingerprint, False, self.prefix
        )

    def leases_of(self, receipt: Receipt) -> Receipt:
        """``receipt`` narrowed to the leases its hit took: its marks kept where a state
        holds leases, none elsewhere (a refund gives back nothing there)."""
        marks = tuple(
            tuple(mark if lease else None for mark, lease in zip(part, leased))  # noqa: B905
            for part, leased in zip(receipt.marks, self.leased)  # noqa: B905
        )
        return Receipt(
            receipt.policy,
            receipt.cost,
            receipt.times_us,
            receipt.context,
            marks,
            receipt.fingerprint,
            prefix=receipt.prefix,
        )

    def refund_calls(self, receipt: Receipt, now: int | None) -> list[ScriptCall]:
        """The calls that give back exactly what the hit of ``receipt`` consumed."""
        if receipt.policy != self.name or not made_by(receipt, self.fingerprint, self.leased):
            raise ConfigError(
                f"that decision's receipt is for policy {receipt.policy!r} as it was "
                f"registered then, not for policy {self.name!r} as it is now"
            )
        cost, texts = receipt.cost, receipt.context
        parts = self.parts_for(texts, now)
        return [
            ScriptCall(part, texts, now, cost, REFUND, marks)
            for part, marks in zip(parts, receipt.marks)  # noqa: B905 (checked above)
        ]

    def _rules(self, replies: Sequence[Reply]) -> tuple[Rule, ...]:
        """The policy's rules as the replies decided them: a rule under a per-key limit at
        its rate (exempt: as a shadow rule), under its own id."""
        rules = self.policy.rules
        if self._skips:
            rules = tuple(
                limited_rule(rule, rule.rate, True) if index in skipped else rule
                for skipped in [self._skipped(replies)]
                for index, rule in enumerate(rules)
            )
        if not any(reply.part.limits for reply in replies):
            return rules
        out = list(rules)
        for part, reply in zip(self.parts, replies):  # noqa: B905 (one reply per part)
            for index, limit in zip(part.rule_index, reply.part.limits):  # noqa: B905
                if limit is not None:
                    made = self._limited.get((index, limit))
                    if made is None:
                        if len(self._limited) >= 1024:
                            self._limited.clear()
                        rate = (
                            rules[index].rate if limit.exempt else limit_rate(limit, rules[index])
                        )
                        made = limited_rule(rules[index], rate, limit.exempt)
                        self._limited[(index, limit)] = made
                    out[index] = made
        return tuple(out)

    def _skipped(self, replies: Sequence[Reply]) -> frozenset[int]:
        """The rules that did not apply to the hit's priority (``only``): reported as shadow
        rules that waited for nothing, since they neither denied nor counted it."""
        found = []
        for part, reply in zip(self.parts, replies):  # noqa: B905 (one reply per part)
            params = [rule for spec in reply.part.specs for rule in spec.rules]
            found += [i for i, p in zip(part.rule_index, params) if p.reserve == SKIP]  # noqa: B905
        return frozenset(found)

    def raw_of(
        self, replies: list[Reply], refund: bool = False
    ) -> tuple[tuple[Rule, int, int, int], ...]:
        """``(rule, remaining, reset_after µs, retry_after µs)`` per rule, in policy order,
        each rule as the replies decided it (a ``refund``'s with no wait: its replies checked
        the refund's cost); replies of the first parts only: None for the others' rules."""
        rules = self._rules(replies)
        raw: list[tuple[Rule, int, int, int]] = [None] * len(rules)  # type: ignore[list-item]
        for part, reply in zip(self.parts, replies):  # noqa: B905
            report = reply.report()
            for index, (remaining, reset), wait in zip(  # noqa: B905
                part.rule_index, report, reply.waits
            ):
                raw[index] = (rules[index], remaining, reset, 0 if refund else wait)
        if self._skips:  # a rule that did not apply waits for nothing
            for index in self._skipped(replies):
                raw[index] = (*raw[index][:3], 0)
        return tuple(raw)
