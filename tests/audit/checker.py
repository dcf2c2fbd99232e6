"""The audit's checker: what stayed admitted, per rule and key, held to the rule's guarantee
(:func:`check_rules`), and time per state never going back (:func:`check_times`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from freqguard import (
    Policy,
    Rule,
    Strategy,
    parse_rate,
)
from tests.audit.workload import (
    _BY_NAME,
    LIMITED,
    Admission,
    Refund,
)


@dataclass
class RuleCheck:
    """One rule of one policy against its guarantee, over every key."""

    policy: str
    rule: Rule
    keys: int = 0
    units: int = 0  # admitted cost units, refunded ones included
    refunded: int = 0  # units given back
    violations: int = 0
    hard: int = 0  # violations even with every refunded hit taken as never having happened
    examples: list[str] = field(default_factory=list)

    def add(self, found: list[str], hard: list[str], key: tuple[str, ...]) -> None:
        self.violations += len(found)
        self.hard += len(hard)
        self.examples += [f"key {key}: {example}" for example in found[: 5 - len(self.examples)]]


def check_window(stream: list[tuple[int, int]], rule: Rule) -> list[str]:
    """Sliding log: every ``(t - window, t]`` holds at most ``limit`` units (``stream``:
    ``(t, cost)`` of what stayed admitted)."""
    stream = sorted(stream)
    window, limit, found = rule.rate.window_us, rule.limit, []
    lo, units = 0, 0
    for hi, (t, cost) in enumerate(stream):
        units += cost
        while stream[lo][0] <= t - window:
            units -= stream[lo][1]
            lo += 1
        if (hi + 1 == len(stream) or stream[hi + 1][0] != t) and units > limit:
            found.append(f"{units} > {limit} units in ({t - window}, {t}] µs")
    return found


def check_fixed(stream: list[tuple[int, int]], rule: Rule) -> list[str]:
    """Fixed window: every aligned window holds at most ``limit`` units."""
    window, units = rule.rate.window_us, Counter[int]()
    for t, cost in stream:
        units[t - t % window] += cost
    return [
        f"{n} > {rule.limit} units in the window starting at {start} µs"
        for start, n in sorted(units.items())
        if n > rule.limit
    ]


def check_bucket(events: list[tuple[int, int, int, int]], rule: Rule) -> list[str]:
    """Token bucket and gcra: the admissions, with refunds at their times, conform to GCRA.

    ``events``: ``(t, order, aid, cost)``, order 1 for an admission, 0 or 2 for a refund (0:
    before admissions at the same µs, the lenient reading; 2: after its own hit). Each
    admission holds a span of ``cost * I`` in the bucket's queue, from ``max(tat, t)``. A
    refund at ``t`` gives back the part of that hit's span still ahead of ``t`` *where the
    span is then*: an earlier refund moved every later span back, so a hit's arrival time
    as recorded (its mark) can be later than where its span now ends.
    """
    interval = -(-rule.rate.window_us // rule.limit)
    bound = rule.capacity * interval
    spans: list[list[int]] = []  # [aid, start, end], queue order, ends after the last event
    tat: int | None = None
    found = []
    for t, order, aid, cost in sorted(events):
        while spans and spans[0][2] <= t:
            spans.pop(0)  # returned by time: a refund of it gives nothing back
        if order == 1:
            start = t if tat is None or tat < t else tat
            tat = start + cost * interval
            spans.append([aid, start, tat])
            if tat - t > bound:
                found.append(f"cost {cost} at {t} µs: {tat - t - bound} µs beyond the burst")
            continue
        at = next((n for n, span in enumerate(spans) if span[0] == aid), None)
        if at is None or tat is None:
            continue
        ahead = spans[at][2] - max(t, spans[at][1])
        spans[at][2] -= ahead
        for later in spans[at + 1 :]:
            later[1] -= ahead
            later[2] -= ahead
        tat -= ahead
    return found


def check_rules(
    admissions: list[Admission], refunds: list[Refund], policies: Iterable[Policy]
) -> list[RuleCheck]:
    """Every rule of every policy, per key, against its guarantee."""
    by_aid = {a.aid: a for a in admissions}
    refunds_of = {r.aid: r for r in refunds}
    streams: dict[tuple[str, int], dict[tuple[str, ...], list[Admission]]] = defaultdict(
        lambda: defaultdict(list)
    )
    checks: list[RuleCheck] = []
    index: dict[str, Policy] = {}
    for policy in policies:
        index[policy.name] = policy
        checks += [RuleCheck(policy.name, rule) for rule in policy.rules]
    for a in admissions:
        policy = index[a.policy]
        dims = policy.dimensions
        for i, rule in enumerate(policy.rules):
            if a.took >> i & 1:
                key = tuple(a.ctx[dims.index(d)] for d in rule.by)
                streams[a.policy, i][key].append(a)
    assert all(r.aid in by_aid for r in refunds), "a refund of an admission nobody logged"
    for result in checks:
        policy = index[result.policy]
        i = policy.rules.index(result.rule)
        for key, stream in streams[result.policy, i].items():
            result.keys += 1
            result.units += sum(a.cost for a in stream)
            given = [refunds_of[a.aid] for a in stream if a.aid in refunds_of]
            result.refunded += sum(by_aid[r.aid].cost for r in given)
            checked = checked_rule(result.policy, result.rule)
            result.add(*_check_stream(result.policy, checked, i, stream, given), key)
    return checks


def checked_rule(policy: str, rule: Rule) -> Rule:
    """The guarantee a rule is held to: its own, or, for a rule whose per-key limit changes
    while hits run (:data:`LIMITED`), the largest of its rates (all with its window)."""
    rates = LIMITED.get((policy, rule.id))
    if rates is None:
        return rule
    largest = max((rule.rate, *(parse_rate(r) for r in rates)), key=lambda r: r.limit)
    assert all(parse_rate(r).window == rule.rate.window for r in rates)
    return Rule(largest, rule.by, rule.strategy, name=rule.id, burst=rule.burst)


def check_leases(taken: list[tuple[int, int, Refund | None]], rule: Rule, i: int) -> list[str]:
    """Concurrency: at no µs are more than ``limit`` leases held, a lease held from when it
    was taken until it was released or its lease ran out, whichever came first (``taken``:
    ``(t, cost, its release or None)``). At one µs, what ends goes before what starts."""
    events: list[tuple[int, int]] = []
    for t, cost, given in taken:
        end = t + rule.rate.window_us
        if given is not None:
            end = min(end, given.times[i])
        events += [(t, cost), (end, -cost)]
    held, found = 0, []
    for t, change in sorted(events):
        held += change
        if held > rule.limit:
            found.append(f"{held} > {rule.limit} leases held at {t} µs")
    return found


def _check_stream(
    policy: str, rule: Rule, i: int, stream: list[Admission], given: list[Refund]
) -> tuple[list[str], list[str]]:
    """What breaks the rule's guarantee, then what breaks it even if every refunded hit is
    taken as never having happened (for windows the two are one check)."""
    gone = {r.aid: r for r in given}
    if rule.strategy is Strategy.CONCURRENCY:
        found = check_leases([(a.times[i], a.cost, gone.get(a.aid)) for a in stream], rule, i)
        return found, found
    if _BY_NAME.get(policy) is not None and _BY_NAME[policy].leases:
        gone = {}  # a release gives back the leases only: the rate rules keep the call
    kept = [(a.times[i], a.cost) for a in stream if a.aid not in gone]
    if rule.strategy is Strategy.SLIDING_LOG:
        found = check_window(kept, rule)
        return found, found
    if rule.strategy is Strategy.FIXED_WINDOW:
        found = check_fixed(kept, rule)
        return found, found
    events = [(a.times[i], 1, a.aid, a.cost) for a in stream]
    hard = check_bucket([e for e in events if e[2] not in gone], rule)
    for a in stream:
        if a.aid in gone:
            t = gone[a.aid].times[i]
            events.append((t, 2 if t <= a.times[i] else 0, a.aid, a.cost))
    return check_bucket(events, rule), hard


def check_times(
    admissions: list[Admission], refunds: list[Refund], policies: Iterable[Policy]
) -> list[str]:
    """Time per state never goes back: a call on a rule's key that came after an admission
    there (the same worker's later call, or one that started after it had answered) was
    judged no earlier. Admissions write every state they consumed; refunds only read here
    (a refund of an expired state writes nothing)."""
    index = {p.name: p for p in policies}
    by_aid = {a.aid: a for a in admissions}
    # per (policy, rule, key): (t, start, end, worker, seq, writes)
    events: dict[tuple[str, int, tuple[str, ...]], list[tuple[int, int, int, int, int, bool]]]
    events = defaultdict(list)
    for a in admissions:
        policy = index[a.policy]
        for i, rule in enumerate(policy.rules):
            key = tuple(a.ctx[policy.dimensions.index(d)] for d in rule.by)
            took = bool(a.took >> i & 1)
            events[a.policy, i, key].append((a.times[i], a.start, a.end, a.aid >> 32, a.seq, took))
    for r in refunds:
        a = by_aid[r.aid]
        policy = index[a.policy]
        for i, rule in enumerate(policy.rules):
            key = tuple(a.ctx[policy.dimensions.index(d)] for d in rule.by)
            events[a.policy, i, key].append((r.times[i], r.start, r.end, r.aid >> 32, r.seq, False))
    found = []
    for (name, i, key), evs in events.items():
        where = f"{name}/{index[name].rules[i].id} key {key}"
        latest: dict[int, int] = {}
        for t, _, _, who, _, writes in sorted(evs, key=lambda e: (e[3], e[4])):
            if t < latest.get(who, t):
                found.append(f"{where}: worker {who} saw {t} µs after {latest[who]} µs")
            if writes:
                latest[who] = max(t, latest.get(who, t))
        written = sorted((e[2], e[0]) for e in evs if e[5])
        k, high = 0, -1
        for t, start, *_ in sorted(evs, key=lambda e: e[1]):
            while k < len(written) and written[k][0] < start:
                high = max(high, written[k][1])
                k += 1
            if t < high:
                found.append(f"{where}: judged at {t} µs after an answered admission at {high}")
    return found
