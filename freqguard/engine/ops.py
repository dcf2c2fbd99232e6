"""The operations, I/O-free: generators that yield what to do (a batch of script calls, or a
:class:`Sleep`) and receive the replies, on a policy's plan (:mod:`freqguard.engine.plan`).
The guards only drive them (``freqguard/_async/guard.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import suppress
from typing import Any, NamedTuple, Protocol, TypeVar

from freqguard.clock import Clock
from freqguard.decision import Decision, Receipt, make_decision
from freqguard.engine.plan import LEASES, PolicyPlan
from freqguard.errors import BackendUnavailable, CapExceeded, ConfigError, PartialFailure
from freqguard.script.calls import Reply, ScriptCall
from freqguard.script.contract import CHECK, HIT, REFUND

__all__ = [
    "Elsewhere",
    "Interrupted",
    "Op",
    "Sleep",
    "Step",
    "acquire_op",
    "decide_op",
    "give_back",
    "many_op",
    "own_line",
    "refund_op",
    "reset_op",
    "seconds_or_none",
    "taken_on",
    "to_wake",
    "turn_key",
    "undo",
    "unwinding",
]

_US = 1_000_000.0
T = TypeVar("T")


class Sleep(NamedTuple):
    """An operation step: wait this many seconds, then resume; ``until``, the clock's time
    past which waiting is no use (an ``acquire``'s deadline; None: none), for a caller
    that waits in a process's line instead (``_io.Turns``)."""

    seconds: float
    until: float | None = None


class Elsewhere(NamedTuple):
    """An operation step: run these calls on this backend (the fallback), not the store
    (``failover.elsewhere`` wraps an operation's steps in these)."""

    backend: Any
    calls: list[ScriptCall]


Step = list[ScriptCall] | Sleep
Op = Generator[Step, list[Reply], T]


# -- operations (sans-IO) ------------------------------------------------------------------


def decide_op(
    plan: PolicyPlan,
    texts: Mapping[str, str],
    cost: int,
    mode: int,
    now: int | None,
    batch: bool = False,
) -> Op[Decision]:
    """One hit/check/refund/reset of one context.

    A policy on one part is one script call (``Guard.hit`` sends that call itself, with the
    same :meth:`PolicyPlan.call` and :meth:`PolicyPlan.decide`, to spare a hit this
    generator). A hit on several parts goes part by part; when a part denies, the parts that
    consumed give back exactly what this hit took there and the rest are only checked, so a
    denied hit consumes nothing (atomic per part, compensated across parts). A store that
    fails that give-back keeps those units (the strict side), and the hit is the denial
    all the same (:func:`_denial`), not a failure for ``on_error``. A lease's take the
    store applied and no replica acknowledged gives its leases back before ``on_error``
    answers (a hit's units, and the take's rate units, are kept: the strict side). In a
    ``batch``, a cost no rule as decided could grant is denied, not raised.
    """
    calls = plan.calls(texts, now, cost, mode)
    if len(calls) == 1 or mode != HIT or cost == 0:
        if not plan.leased or mode != HIT:
            return plan.decide((yield calls), texts, cost, mode, batch)
        try:
            answered = yield calls
        except BackendUnavailable as exc:  # applied, unacknowledged: its lease goes back
            if exc.applied is not None:
                yield from give_back(leases_only(undo(calls, [exc.applied])))
            raise
        return plan.decide(answered, texts, cost, mode, batch)
    replies: list[Reply] = []
    unsure: BackendUnavailable | None = None  # a part applied it, no replica acknowledged
    for i, call in enumerate(calls):
        try:
            (reply,) = yield [call]
        except GeneratorExit:
            raise
        except BaseException as exc:  # the store failed, or the caller was cancelled
            if not isinstance(exc, BackendUnavailable) or exc.applied is None:
                # stopped midway (refused, failed): what this hit took so far goes back
                yield from give_back(undo(calls, replies))
                raise
            reply, unsure = exc.applied, exc  # applied: a later part may still deny it
        if not reply.allowed:
            # give back exactly what this hit took in the earlier parts (their marks), never
            # the newest units there, which may be another caller's
            rest = [c._replace(mode=CHECK) for c in calls[i + 1 :]]
            try:
                others = yield undo(calls, replies) + rest
            except BackendUnavailable:  # the store failed after it denied: the denial stands
                return _denial(plan, [*replies, reply])
            return plan.decide([*others[:i], reply, *others[i:]], texts, cost, batch=batch)
        replies.append(reply)
    if unsure is not None:  # admitted, and not known to last: on_error answers it
        if plan.leased:  # a lease nobody would give back (the call does not run, or runs
            yield from give_back(leases_only(undo(calls, replies)))  # failing open)
        raise unsure
    return plan.decide(replies, texts, cost, mode, batch)


def _denial(plan: PolicyPlan, replies: list[Reply]) -> Decision:
    """The store's denial of a hit by the part of ``replies[-1]``, when it failed as what
    the parts before took was given back (kept: the strict side) and before the parts
    after were read: each rule of a part read as the replies decided it (a per-key limit,
    a tier, a priority's skip: ``PolicyPlan.raw_of``), each of the others with nothing left
    and no wait (unknown); denied by the enforcing rules that waited, for as long."""
    read = plan.raw_of(replies)
    raw = tuple(
        (rule, 0, 0, 0) if entry is None else entry
        for rule, entry in zip(plan.policy.rules, read, strict=True)
    )
    denied = tuple(rule for rule, _, _, wait in raw if wait and not rule.shadow)
    longest = max((wait for rule, _, _, wait in raw if wait and not rule.shadow), default=0)
    return make_decision(plan.name, False, longest / 1_000_000, denied, lambda: raw)


def undo(calls: Sequence[ScriptCall], replies: Sequence[Reply]) -> list[ScriptCall]:
    """Calls that give back exactly what the hits among ``calls`` (the first
    ``len(replies)``) consumed, by their replies' marks: one for each that was admitted."""
    return [
        c._replace(mode=REFUND, marks=r.marks(c.cost, HIT))
        for c, r in zip(calls, replies)  # noqa: B905 (the replies of the first calls)
        if c.mode == HIT and c.cost and r.allowed
    ]


def leases_only(calls: Sequence[ScriptCall]) -> list[ScriptCall]:
    """A give-back's ``calls`` narrowed to the states that hold leases, as a release gives
    them back: the take's rate units kept (the strict side)."""
    narrowed = []
    for call in calls:
        specs, given = call.part.specs, call.marks or ()
        marks = tuple(m if s.twin is LEASES else None for m, s in zip(given, specs))  # noqa: B905
        if any(mark is not None for mark in marks):
            narrowed.append(call._replace(marks=marks))
    return narrowed


def give_back(calls: list[ScriptCall]) -> Generator[Step, list[Reply], None]:
    """The step that gives back what an operation took before it stopped (``calls``, if
    any). A store that fails it keeps those units (the strict side), and the operation
    raises why it stopped, not this failure: a refusal (a :class:`ConfigError`) that
    became an outage would be answered by ``on_error`` (failing open, for one)."""
    if calls:
        with suppress(BackendUnavailable):
            yield calls


def _answered(
    calls: Sequence[ScriptCall], results: Sequence[Any]
) -> tuple[list[ScriptCall], list[Reply]]:
    """The calls a store applied among those of a batch, and their replies: ``results``
    has each call's reply or error, and an error says what was applied all the same
    (``applied``: a write its replicas lack)."""
    done = [
        (call, result.applied if isinstance(result, BackendUnavailable) else result)
        for call, result in zip(calls, results, strict=True)
    ]
    kept = [(call, reply) for call, reply in done if isinstance(reply, Reply)]
    return [call for call, _ in kept], [reply for _, reply in kept]


def taken_on(op: Op[T], backend: object) -> Op[T]:
    """``op``, whose result (a decision or a list of them) has each receipt marked as
    consumed on the fallback ``backend`` (as the guard was given it): its refund or
    release goes back there, whichever face gives it back (``Failover.drive``)."""
    result = yield from op
    for decision in result if isinstance(result, list) else [result]:
        if isinstance(decision, Decision) and decision.receipt is not None:
            decision.receipt.fallback = backend
    return result


#: A backend and the calls to send it, each answered before the next: what a cancelled
#: operation gives back.
Finish = tuple[Any, list[ScriptCall]]


class Interrupted:
    """What the async guard's cancellation carries when it came while ``calls`` were out
    on ``backend``, which answered them after it: ``replies`` (the sync guard holds a
    Ctrl-C back around a lease's calls instead: ``_sync/_io.holding``)."""

    def __init__(self, backend: Any, calls: list[ScriptCall], replies: list[Reply]) -> None:
        self.backend, self.calls, self.replies = backend, calls, replies


def unwinding(
    op: Op[T], cancelled: BaseException, backend: Any
) -> Generator[Finish, list[Reply], None]:
    """What a cancelled operation gives back, as the calls to let finish (the guards'
    ``unwind`` sends each, through any cancellation, and sends its replies in): what the
    calls under way took, by their replies (:func:`undo`), when ``cancelled`` is
    :class:`Interrupted`; then what ``op`` gives back when ``cancelled`` is thrown into it,
    on ``backend`` or elsewhere (a fallback's). Ends when ``op`` does; the cancellation it
    raises goes on."""
    if isinstance(cancelled, Interrupted):
        given = undo(cancelled.calls, cancelled.replies)
        if given:
            yield cancelled.backend, given
    try:
        step = op.throw(cancelled)
        while isinstance(step, (list, Elsewhere)):
            where = (step.backend, step.calls) if isinstance(step, Elsewhere) else (backend, step)
            step = op.send((yield where))
    except StopIteration:
        return


def refund_op(plan: PolicyPlan, receipt: Receipt, now: int | None) -> Op[Decision]:
    """Give back exactly what one hit consumed (its receipt), in every part at once."""
    return plan.decide((yield plan.refund_calls(receipt, now)), mode=REFUND)


def reset_op(calls: list[ScriptCall]) -> Op[None]:
    """Forget the states ``calls`` name (:func:`~freqguard.engine.resets.reset_calls`), in
    one batch; a failure raises, whatever the policy's ``on_error``: a reset that did not
    happen must not look as if it had."""
    yield calls


def many_op(
    plan: PolicyPlan,
    texts: list[dict[str, str]],
    cost: int,
    now: Callable[[], int | None],
    nodes: bool = False,
) -> Op[list[Decision | BackendUnavailable]]:
    """Many contexts at once, in order; one batch when the policy lives on one part.

    A context whose calls failed gets its error in place of a decision, and the others are
    decided: on a store of several ``nodes`` (a Redis Cluster) a batch can fail on one node
    and be answered by the rest. On a store of one node, the first failure is everyone's:
    the contexts after it are not tried (each would wait for the same dead store). A store
    that refuses some calls as misconfigured (a :class:`ConfigError`: an ACL that allows
    only some keys) fails the batch: what the hits it admitted took goes back (their marks,
    or receipts), then the error is raised.
    """
    if len(plan.parts) > 1 and cost > 0:
        results: list[Decision | BackendUnavailable] = []
        for t in texts:  # a comprehension cannot yield
            try:
                results.append((yield from decide_op(plan, t, cost, HIT, now(), True)))
            except BackendUnavailable as exc:
                if not nodes:
                    return results + [exc] * (len(texts) - len(results))
                results.append(exc)
            except GeneratorExit:
                raise
            except BaseException as exc:  # cancelled, refused: the hits decided so far go back
                taken = [r.receipt for r in results if isinstance(r, Decision) and r.receipt]
                yield from give_back([c for t in taken for c in plan.refund_calls(t, now())])
                if isinstance(exc, ConfigError):
                    exc.in_batch(len(results))
                raise
        return results
    at = now()
    width = len(plan.parts)
    calls = []
    for index, t in enumerate(texts):
        try:
            calls += plan.calls(t, at, cost, HIT)
        except ConfigError as exc:  # a zone the context misses: named by its place
            exc.in_batch(index)
            raise
    try:
        replies: list[Any] = yield calls
    except PartialFailure as exc:  # some nodes answered
        replies = exc.results
    except BackendUnavailable as exc:
        return [exc] * len(texts)
    except ConfigError as exc:  # refused in part (an ACL): what the rest took goes back
        if exc.results is not None:
            yield from give_back(undo(*_answered(calls, exc.results)))
        raise
    out: list[Decision | BackendUnavailable] = []
    for i, t in enumerate(texts):
        part = replies[i * width : (i + 1) * width]
        failed = next((r for r in part if isinstance(r, BackendUnavailable)), None)
        out.append(plan.decide(part, t, cost, HIT, batch=True) if failed is None else failed)
    return out


def seconds_or_none(timeout: object) -> bool:
    """Whether ``timeout`` is what ``acquire`` takes: None, or finite seconds >= 0."""
    if timeout is None:
        return True
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        return False
    return 0 <= timeout < sys.float_info.max  # a time on a clock's float: an int past it is not


def turn_key(policy: str, texts: Mapping[str, str]) -> Hashable:
    """What ``acquire``'s waiters on one key line up by in a process (``_io.Turns``): the
    policy and the hit's context as the store's key has it (its values as text), once the
    guard has checked the call."""
    return (policy, frozenset(texts.items()))


class _Costed(Protocol):
    cost: int


_W = TypeVar("_W", bound=_Costed)


def to_wake(waiters: Iterable[_W], free: int) -> Iterator[_W]:
    """The waiters of a line (each with a ``cost``) to wake as its first leaves, admitted
    with ``free`` units left: the next, and each after it while the units left hold its
    cost (a window freed at once is asked for together; one more than fits, to sleep for
    the next turn)."""
    for waiter in waiters:
        yield waiter
        if waiter.cost > free:
            return
        free -= waiter.cost


def own_line(place: Any) -> bool:
    """Whether an ``acquire`` whose line place is ``place`` (``_io._Place``, either face)
    runs inside one that holds a place in the same line (an observer's own ``acquire``,
    told in its caller's turn): waiting in line, it would wait for itself."""
    outer = place.outer
    while outer is not None:
        if outer.key == place.key and outer.mine is not None:
            return True
        outer = outer.outer
    return False


def acquire_op(
    plan: PolicyPlan,
    attempt: Callable[[int | None], Op[Decision]],
    cost: int,
    timeout: float | None,
    now: Callable[[], int | None],
    clock: Clock,
) -> Op[Decision]:
    """Wait for this caller's own turn, then consume; never reserve future capacity.

    Each denial says exactly when the hit would fit (``retry_after``); the caller sleeps that
    long and tries again (``attempt(now)``: a hit), so there is no polling, and nothing is
    taken from the future. If the turn is further away than the timeout allows, it fails at
    once with ``CapExceeded``. The deadline is set as the op is made: ``timeout`` bounds
    the whole wait, a process's line included (``_io.Turns``).
    """
    deadline = None if timeout is None else clock.now() + timeout
    return _waiting(plan, attempt, timeout, deadline, now, clock)


def _waiting(
    plan: PolicyPlan,
    attempt: Callable[[int | None], Op[Decision]],
    timeout: float | None,
    deadline: float | None,
    now: Callable[[], int | None],
    clock: Clock,
) -> Op[Decision]:
    """:func:`acquire_op`'s asking and sleeping, to ``deadline`` on ``clock``."""
    while True:
        decision = yield from attempt(now())
        if decision.allowed:
            return decision
        if deadline is not None and clock.now() + decision.retry_after > deadline:
            raise CapExceeded(
                decision,
                f"policy {plan.name!r}: the next turn is in {decision.retry_after:.3f}s, "
                f"later than the timeout of {timeout}s allows",
            )
        yield Sleep(decision.retry_after, deadline)
