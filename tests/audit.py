"""The standing concurrency audit: production-shaped concurrency, real time, an exact model.

Worker processes, each with threads sharing one :class:`Guard` and, in some, asyncio tasks
sharing one :class:`AsyncGuard`, drive a mixed workload (:data:`POLICIES`: every strategy,
rules sharing a log, shadow rules, multi-part policies, leases taken and released (or left to
expire) beside a rate, costs above 1, ``hit_many``, refunds
of admitted decisions, per-key limits set, changed and cleared while hits run) at a few hot
keys, so that every limit is hit all the time. Time is the backend's own (no ``clock=``):
Redis ``TIME``, the memory backend's ``SystemClock``.

Every admission is logged with, per rule, the µs the backend recorded it at
(``decision.receipt.times_us``); a quarter of them are refunded (``guard.refund(decision)``)
0-400 ms later, and logged with the µs the refund was judged at. :func:`check_rules` then
takes, per rule and key, what stayed admitted and holds it to the rule's guarantee
(docs/strategies.md):

* sliding-log: at most ``limit`` units in any window ``(t - window, t]``. A refund takes back
  exactly that hit's units, so refunded admissions are left out.
* fixed-window: at most ``limit`` units per aligned window, refunded admissions left out.
* concurrency: at no µs more than ``limit`` leases held, each from when it was taken until
  its release or the end of its lease; a release leaves the policy's rate rules counting.
* a rule whose per-key limit changes under load (:data:`LIMITED`) is held to its guarantee
  at the largest of the rates it alternates between, never more.
* token-bucket and gcra: the stream replayed in time order conforms to GCRA
  (``tat = max(tat, t) + cost * I`` with ``tat - t <= burst * I``), refunds included: at the
  refund's time, the part of the hit's span still ahead is given back, the span being where
  earlier refunds moved it (:func:`check_bucket`). Also counted apart ("hard"): violations
  even with every refunded hit taken as never having happened.

:func:`check_times` checks that time per state never goes back: for one rule and key, a call judged
after another's admission there (the same thread's next call, or any call that started after
that one had answered, by the system-wide monotonic clock) carries no earlier time.

Processes are *spawned*, not forked: the parent (pytest, a benchmark) has threads and open
sockets that a fork would copy mid-flight, and a spawned worker starts, like a production
process, with its own interpreter and connection pools. The memory audit is one process:
memory state is shared only by the threads and tasks of the process that holds it.
"""

from __future__ import annotations

import asyncio
import bisect
import multiprocessing
import os
import pickle
import queue
import random
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from freqguard import (
    AsyncGuard,
    Decision,
    Guard,
    MemoryBackend,
    Policy,
    Rule,
    Strategy,
    parse_rate,
)

# -- the workload --------------------------------------------------------------------------

POLICIES: tuple[Policy, ...] = (
    Policy("log", Rule("8/second", by="user")),
    Policy(
        "shared",  # two rules on one log, a finer rule and a shadow beside them, one part
        Rule("5/second", by="user", name="user-1s"),
        Rule("12 per 3 seconds", by="user", name="user-3s"),
        Rule("3 per 2 seconds", by=("user", "content"), name="content-2s"),
        Rule("4/second", by="user", strategy="gcra", name="shadow", shadow=True),
    ),
    Policy("fixed", Rule("10/second", by="user", strategy="fixed-window")),
    Policy("bucket", Rule("20 per 2 seconds", by="user", strategy="token-bucket", burst=6)),
    Policy("gcra", Rule("10/second", by="user", strategy="gcra", burst=4)),
    Policy(  # the case: a global cap and a per-user cap on two parts
        "global", Rule("30 per 2 seconds", name="all"), Rule("5/second", by="user", name="user")
    ),
    Policy(
        "mixed",  # two parts, three strategies
        Rule("25/second", strategy="gcra", burst=8, name="all"),
        Rule("6/second", by="user", strategy="fixed-window", name="user"),
        Rule("3/second", by=("user", "content"), name="content"),
    ),
    Policy("slow", Rule("50 per 20 seconds", by="user")),
    Policy(  # per-key limits set, changed and cleared while hits run (LIMITED)
        "limited",
        Rule("6/second", by="user", name="user"),
        Rule("3 per 2 seconds", by=("user", "content"), name="content"),
        Rule("8/second", by="user", strategy="fixed-window", name="fixed"),
    ),
    Policy("limited-gcra", Rule("6/second", by="user", strategy="gcra", name="user")),
    Policy(  # calls in flight: leases taken by take_lease, released (or left to expire)
        "leases",
        Rule("3 concurrent", by="user", lease=0.3, name="held"),
        Rule("20/second", by="user", name="rate"),
    ),
)
#: Per (policy, rule): the rates a per-key limit alternates between, with the rule's own
#: (a cleared limit), for a user, while hits run. The same window, so the guarantee checked
#: is the rule's at the largest of the limits (:func:`checked_rule`).
LIMITED: dict[tuple[str, str], tuple[str, ...]] = {
    ("limited", "user"): ("12/second", "3/second"),
    ("limited", "content"): ("6 per 2 seconds", "4 per 2 seconds"),
    ("limited", "fixed"): ("16/second", "3/second"),
    ("limited-gcra", "user"): ("12/second", "3/second"),
}
LIMIT_SHARE = 0.02  # of actions, a set_limit or clear_limit
#: Policies whose admissions are never refunded. A multi-part hit denied by a later part
#: gives back what the earlier parts took; on a bucket, after other hits, that can leave the
#: engine's arrival time later than a replay that never saw the denied hit. Without refunds
#: that only makes the replay more lenient; with them its marks could differ.
NO_REFUNDS = frozenset({"mixed"})
VALUES = {"user": ("u0", "u1", "u2"), "content": ("c0", "c1")}
COSTS = (1, 1, 1, 1, 2, 3)
HELD = 8  # admitted decisions a thread or task holds for a refund (then the first is due)
REFUND_DELAYS = (0.0, 0.0, 0.001, 0.01, 0.05, 0.1, 0.2, 0.4)  # seconds

# -- what is logged ------------------------------------------------------------------------


class Admission(NamedTuple):
    aid: int  # worker << 32 | seq
    seq: int  # order within the worker
    policy: str
    times: tuple[int, ...]  # per rule: the µs it was recorded at
    cost: int
    ctx: tuple[str, ...]  # the dimension values, in policy.dimensions order
    took: int  # bit i: rule i consumed (a shadow rule only when it admitted)
    start: int  # time.monotonic_ns() before the call and after its answer
    end: int


class Refund(NamedTuple):
    aid: int  # the admission it gave back
    seq: int
    times: tuple[int, ...]  # per rule: the µs the refund was judged at
    start: int
    end: int


@dataclass
class WorkerLog:
    """What one thread or task did and saw."""

    worker: int
    admissions: list[Admission] = field(default_factory=list)
    refunds: list[Refund] = field(default_factory=list)
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)


# -- how the engine is read (the one place that knows its API) ----------------------------


def admission_times(guard: Guard | AsyncGuard, decision: Decision) -> tuple[int, ...]:
    """Per rule, the µs the backend recorded an admitted hit at."""
    assert decision.receipt is not None, "an admitted hit of cost > 0 has a receipt"
    return decision.receipt.times_us


def reply_times(guard: Guard | AsyncGuard, decision: Decision) -> tuple[int, ...]:
    """Per rule, the µs its part judged the call at, read from the replies a decision keeps
    for its lazy report. A refund's Decision shows no time of its own, and a bucket's
    give-back depends on it; this reaches into the engine (``Decision._report``,
    ``Reply.now``) and fails loudly if that changes."""
    report = decision._report
    assert isinstance(report, partial), "read the replies before the report is built"
    replies = report.args[0]
    plan = guard._policies.plan(decision.policy)
    times = [0] * len(plan.policy.rules)
    for part, reply in zip(plan.parts, replies, strict=True):
        for index in part.rule_index:
            times[index] = reply.now
    return tuple(times)


def refund(guard: Guard, decision: Decision) -> tuple[int, ...]:
    """Give back an admission: a refund, or a lease's release (its leases only)."""
    if guard.policies[decision.policy].leases:
        return reply_times(guard, guard.release(decision))
    return reply_times(guard, guard.refund(decision))


async def arefund(guard: AsyncGuard, decision: Decision) -> tuple[int, ...]:
    if guard.policies[decision.policy].leases:
        return reply_times(guard, await guard.release(decision))
    return reply_times(guard, await guard.refund(decision))


def memory_backend() -> MemoryBackend:
    return MemoryBackend()


# -- drivers -------------------------------------------------------------------------------

_BY_NAME = {p.name: p for p in POLICIES}


def first_part(policy: Policy) -> frozenset[int]:
    """The rules of a policy's first part, or every rule when it has one part (a rule's part
    is a dimension all rules share, else its own first dimension in policy order)."""
    shared = [d for d in policy.dimensions if all(d in r.by for r in policy.rules)]

    def part(rule: Rule) -> str | None:
        own = [d for d in policy.dimensions if d in rule.by]
        return shared[0] if shared else (own[0] if own else None)

    first = part(policy.rules[0])
    return frozenset(i for i, r in enumerate(policy.rules) if part(r) == first)


_FIRST = {p.name: first_part(p) for p in POLICIES}


class Action(NamedTuple):
    kind: str  # "hit", "many", "refund" or "limit"
    policy: str
    contexts: list[dict[str, str]]
    cost: int
    held: tuple[int, Decision] | None = None
    limit: tuple[str, str | None] | None = None  # a "limit": the rule, its rate (None: clear)


class Driver:
    """One thread's or task's stream of actions, and the log of what came back."""

    def __init__(self, worker: int, seed: int, refund_share: float, many_share: float) -> None:
        self.log = WorkerLog(worker)
        self.rng = random.Random(seed)
        self.refund_share, self.many_share = refund_share, many_share
        self.held: list[tuple[float, int, Decision]] = []  # (due, aid, decision), by due
        self.seq = 0

    def actions(self, deadline: float, max_ops: int) -> Iterator[Action]:
        for _ in range(max_ops):
            if time.monotonic() >= deadline:
                return
            yield self.next()

    def done(
        self,
        guard: Guard | AsyncGuard,
        action: Action,
        result: list[Decision] | tuple[int, ...],
        start: int,
    ) -> None:
        """Log what came back: a refund's times, or the decisions of a hit or batch."""
        end = time.monotonic_ns()
        if action.kind == "limit":
            self.log.counts[action.policy, "limits"] += 1
        elif isinstance(result, tuple):
            self.refunded(action, result, start, end)
        else:
            self.decided(guard, action, result, start, end)

    def next(self) -> Action:
        rng = self.rng
        if self.held and (self.held[0][0] <= time.monotonic() or len(self.held) > HELD):
            _, aid, decision = self.held.pop(0)
            return Action("refund", decision.policy, [], 0, (aid, decision))
        if rng.random() < LIMIT_SHARE:
            (name, rule), rates = rng.choice(sorted(LIMITED.items()))
            rate = rng.choice((None, *rates))
            return Action(
                "limit", name, [{"user": rng.choice(VALUES["user"])}], 0, None, (rule, rate)
            )
        policy = rng.choice(POLICIES)
        many = rng.random() < self.many_share and not policy.leases  # a lease: one at once
        contexts = [
            {d: rng.choice(VALUES[d]) for d in policy.dimensions}
            for _ in range(rng.randint(2, 5) if many else 1)
        ]
        kind = "lease" if policy.leases else "many" if many else "hit"
        return Action(kind, policy.name, contexts, rng.choice(COSTS))

    def decided(
        self,
        guard: Guard | AsyncGuard,
        action: Action,
        decisions: Sequence[Decision],
        start: int,
        end: int,
    ) -> None:
        policy = _BY_NAME[action.policy]
        counts = self.log.counts
        counts[action.policy, "batches" if action.kind == "many" else "singles"] += 1
        for ctx, decision in zip(action.contexts, decisions, strict=True):
            counts[action.policy, "hits"] += 1
            if not decision.allowed:
                counts[action.policy, "denied"] += 1
                first = _FIRST[action.policy]
                if len(first) < len(policy.rules) and not any(
                    policy.rules[i] in decision.denied_by for i in first
                ):
                    counts[action.policy, "compensated"] += 1  # a later part said no
                continue
            counts[action.policy, "admitted"] += 1
            took = 0
            for i, rule in enumerate(policy.rules):
                if not rule.shadow or decision.rules[i].allowed:
                    took |= 1 << i
            self.seq += 1
            aid = self.log.worker << 32 | self.seq
            values = tuple(ctx[d] for d in policy.dimensions)
            times = admission_times(guard, decision)
            self.log.admissions.append(
                Admission(
                    aid, self.seq, action.policy, times, action.cost, values, took, start, end
                )
            )
            # every lease is released, most of them within their lease (0.3 s)
            share = 0.9 if policy.leases else self.refund_share
            if action.policy not in NO_REFUNDS and self.rng.random() < share:
                # refunded at once, or as a vendor call fails later: a bucket's give-back
                # depends on where its span is by then
                due = time.monotonic() + self.rng.choice(REFUND_DELAYS)
                bisect.insort(self.held, (due, aid, decision), key=lambda h: h[0])

    def refunded(self, action: Action, times: tuple[int, ...], start: int, end: int) -> None:
        assert action.held is not None
        self.seq += 1
        self.log.refunds.append(Refund(action.held[0], self.seq, times, start, end))
        self.log.counts[action.policy, "refunds"] += 1


def _call(guard: Guard, action: Action) -> list[Decision] | tuple[int, ...]:
    if action.limit is not None:
        rule, rate = action.limit
        if rate is None:
            guard.clear_limit(action.policy, rule, **action.contexts[0])
        else:
            guard.set_limit(action.policy, rule, rate, user=action.contexts[0]["user"])
        return []
    if action.held is not None:
        return refund(guard, action.held[1])
    if action.kind == "many":
        return guard.hit_many(action.policy, action.contexts, action.cost)
    if action.kind == "lease":
        return [guard.take_lease(action.policy, action.cost, **action.contexts[0])]
    return [guard.hit(action.policy, action.cost, **action.contexts[0])]


async def _acall(guard: AsyncGuard, action: Action) -> list[Decision] | tuple[int, ...]:
    if action.limit is not None:
        rule, rate = action.limit
        if rate is None:
            await guard.clear_limit(action.policy, rule, **action.contexts[0])
        else:
            await guard.set_limit(action.policy, rule, rate, user=action.contexts[0]["user"])
        return []
    if action.held is not None:
        return await arefund(guard, action.held[1])
    if action.kind == "many":
        return await guard.hit_many(action.policy, action.contexts, action.cost)
    if action.kind == "lease":
        return [await guard.take_lease(action.policy, action.cost, **action.contexts[0])]
    return [await guard.hit(action.policy, action.cost, **action.contexts[0])]


def drive(guard: Guard, driver: Driver, deadline: float, max_ops: int) -> None:
    """A thread's loop: act until the deadline (system-wide monotonic) or ``max_ops``."""
    try:
        for action in driver.actions(deadline, max_ops):
            start = time.monotonic_ns()
            driver.done(guard, action, _call(guard, action), start)
    except Exception:
        driver.log.errors.append(traceback.format_exc())


async def adrive(guard: AsyncGuard, driver: Driver, deadline: float, max_ops: int) -> None:
    """:func:`drive` for a task."""
    try:
        for action in driver.actions(deadline, max_ops):
            start = time.monotonic_ns()
            driver.done(guard, action, await _acall(guard, action), start)
    except Exception:
        driver.log.errors.append(traceback.format_exc())


# -- processes -----------------------------------------------------------------------------


class Target(NamedTuple):
    kind: str  # "memory", "redis" or "cluster"
    port: int = 0  # Redis: the port on 127.0.0.1 of the server, or of one cluster node
    bins: int = 0  # Redis: records shared in this many bins (RedisBackend(bins=))


@dataclass(frozen=True)
class AuditConfig:
    """One audit run. ``processes`` is forced to 1 on memory."""

    target: Target
    seconds: float = 10.0
    processes: int = 4
    threads: int = 3
    tasks: int = 8  # asyncio tasks in each of the first ``async_processes`` processes
    async_processes: int = 1
    seed: int = 0
    refund_share: float = 0.25  # of admissions, each refunded a few steps later
    many_share: float = 0.1
    max_ops: int = 10_000_000  # per thread or task, a bound besides time
    switch_interval: float | None = None  # sys.setswitchinterval in the workers
    prefix: str = ""  # the guards' key prefix; unique per run when empty


STARTUP_SECONDS = 60.0


def _sync_backend(target: Target) -> Any:
    from redis import Redis
    from redis.cluster import RedisCluster

    from freqguard import RedisBackend

    if target.kind == "redis":
        client: Any = Redis(host="127.0.0.1", port=target.port, socket_timeout=10)
    else:
        client = RedisCluster(host="127.0.0.1", port=target.port, socket_timeout=10)
    return RedisBackend(client, bins=target.bins)


def _async_backend(target: Target) -> Any:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

    from freqguard import AsyncRedisBackend

    if target.kind == "redis":
        client: Any = Redis(host="127.0.0.1", port=target.port, socket_timeout=10)
    else:
        client = RedisCluster(host="127.0.0.1", port=target.port, socket_timeout=10)
    return AsyncRedisBackend(client, bins=target.bins)


async def _tasks(config: AuditConfig, drivers: list[Driver], deadline: float, memory: Any) -> None:
    backend = memory if memory is not None else _async_backend(config.target)
    guard = AsyncGuard(backend, POLICIES, prefix=config.prefix)
    try:
        await asyncio.gather(*(adrive(guard, d, deadline, config.max_ops) for d in drivers))
    finally:
        await guard.aclose()


def worker(config: AuditConfig, index: int, ready: Any, go: Any, out: str) -> None:
    """A worker process: threads (and tasks) until the deadline, then its logs to ``out``."""
    logs: list[WorkerLog] = []
    try:
        if config.switch_interval is not None:
            sys.setswitchinterval(config.switch_interval)
        memory = memory_backend() if config.target.kind == "memory" else None
        backend = memory if memory is not None else _sync_backend(config.target)
        guard = Guard(backend, POLICIES, prefix=config.prefix)
        seed = config.seed * 1_000_003 + index * 1009

        def driver(n: int) -> Driver:
            made = Driver(index * 1000 + n, seed + n, config.refund_share, config.many_share)
            logs.append(made.log)
            return made

        sync_drivers = [driver(n) for n in range(config.threads)]
        async_drivers = [
            driver(500 + n) for n in range(config.tasks if index < config.async_processes else 0)
        ]
        ready.put(index)
        if not go.wait(STARTUP_SECONDS):
            raise RuntimeError("no start signal")
        deadline = time.monotonic() + config.seconds
        threads = [
            threading.Thread(target=drive, args=(guard, d, deadline, config.max_ops))
            for d in sync_drivers
        ]
        if async_drivers:
            main = _tasks(config, async_drivers, deadline, memory)
            threads.append(threading.Thread(target=asyncio.run, args=(main,)))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        guard.close()
    except Exception:
        logs.append(WorkerLog(index * 1000 + 999, errors=[traceback.format_exc()]))
    with open(out, "wb") as file:
        pickle.dump(logs, file)


def run_audit(config: AuditConfig) -> AuditReport:
    """Run the workload, gather every worker's log, check it. Bounded: workers stop at the
    deadline; one still alive ``STARTUP_SECONDS`` after it is terminated."""
    if config.target.kind == "memory" and config.processes != 1:
        config = AuditConfig(**{**config.__dict__, "processes": 1})
    if not config.prefix:
        config = AuditConfig(
            **{**config.__dict__, "prefix": f"audit{os.getpid()}-{time.time_ns()}"}
        )
    spawn = multiprocessing.get_context("spawn")
    ready, go = spawn.Queue(), spawn.Event()
    began = time.monotonic()
    logs: list[WorkerLog] = []
    with tempfile.TemporaryDirectory(prefix="freqguard-audit-") as tmp:
        outs = [str(Path(tmp) / f"worker{i}.pickle") for i in range(config.processes)]
        procs = [
            spawn.Process(target=worker, args=(config, i, ready, go, out), daemon=True)
            for i, out in enumerate(outs)
        ]
        for proc in procs:
            proc.start()
        _start_together(procs, ready, go)
        for proc in procs:
            proc.join(config.seconds + STARTUP_SECONDS)
            if proc.is_alive():
                proc.terminate()
                proc.join()
        for i, out in enumerate(outs):
            if not Path(out).exists():
                logs.append(WorkerLog(i * 1000 + 999, errors=[f"worker {i} left no log"]))
                continue
            with open(out, "rb") as file:
                logs.extend(pickle.load(file))
    elapsed = time.monotonic() - began
    return make_report(config, logs, elapsed)


def _start_together(procs: list[Any], ready: Any, go: Any) -> None:
    """Give the start signal once every worker is ready; not at all if one died first (the
    others then end by themselves, and the logs say why)."""
    waiting, until = len(procs), time.monotonic() + STARTUP_SECONDS
    while waiting and time.monotonic() < until:
        if any(proc.exitcode is not None for proc in procs):
            return
        try:
            ready.get(timeout=0.1)
        except queue.Empty:
            continue
        waiting -= 1
    if not waiting:
        go.set()


# -- the checker ---------------------------------------------------------------------------


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


# -- the report ----------------------------------------------------------------------------


@dataclass
class AuditReport:
    config: AuditConfig
    counts: dict[str, Counter[str]]  # per policy: hits, admitted, denied, compensated, ...
    rules: list[RuleCheck]
    time_violations: list[str]
    errors: list[str]
    seconds: float  # wall time of the whole run, start-up and check included

    @property
    def violations(self) -> int:
        return sum(r.violations for r in self.rules) + len(self.time_violations)

    def total(self, what: str) -> int:
        return sum(c[what] for c in self.counts.values())

    def format(self) -> str:
        c = self.config
        lines = [
            f"audit on {c.target.kind}: {c.processes} process(es) x {c.threads} threads, "
            f"{c.tasks} tasks in {c.async_processes}, {c.seconds:g} s of load, "
            f"{self.seconds:.1f} s in all",
            f"{'policy':<12} {'hits':>8} {'admitted':>8} {'denied':>8} {'compens.':>8} "
            f"{'refunds':>8} {'batches':>8} {'limits':>8}",
        ]
        for name, n in self.counts.items():
            lines.append(
                f"{name:<12} {n['hits']:>8} {n['admitted']:>8} {n['denied']:>8} "
                f"{n['compensated']:>8} {n['refunds']:>8} {n['batches']:>8} {n['limits']:>8}"
            )
        lines.append(
            f"{'policy/rule':<24} {'strategy':<13} {'keys':>4} {'units':>7} {'refunded':>8} "
            f"{'violations':>10} {'hard':>5}"
        )
        for r in self.rules:
            label = f"{r.policy}/{r.rule.id}"
            lines.append(
                f"{label:<24} {r.rule.strategy.value:<13} {r.keys:>4} {r.units:>7} "
                f"{r.refunded:>8} {r.violations:>10} {r.hard:>5}"
            )
            lines += [f"    {example}" for example in r.examples]
        lines.append(f"time per state went back: {len(self.time_violations)}")
        lines += [f"    {v}" for v in self.time_violations[:5]]
        lines += [f"ERROR: {e}" for e in self.errors[:5]]
        lines.append(f"violations: {self.violations}")
        return "\n".join(lines)


def make_report(config: AuditConfig, logs: list[WorkerLog], seconds: float) -> AuditReport:
    admissions = [a for log in logs for a in log.admissions]
    refunds = [r for log in logs for r in log.refunds]
    counts: dict[str, Counter[str]] = {p.name: Counter() for p in POLICIES}
    for log in logs:
        for (policy, what), n in log.counts.items():
            counts[policy][what] += n
    return AuditReport(
        config,
        counts,
        check_rules(admissions, refunds, POLICIES),
        check_times(admissions, refunds, POLICIES),
        [e for log in logs for e in log.errors],
        seconds,
    )
