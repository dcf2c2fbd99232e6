"""What a guard does when the store fails: each policy's ``on_error`` (:class:`Failover`), the
degraded answers, a fallback backend's run of an operation, a batch settled hit by hit, and
a policy's limits shared out among the workers that fall back
(:class:`~freqguard.policy.Fallback`). I/O-free: the guards drive these (``on_error`` is
described in :mod:`freqguard.failure`)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any, TypeVar

from freqguard.decision import Decision, make_decision, set_source_all, with_source
from freqguard.engine.breaker import Breaker, CircuitOpen
from freqguard.engine.ops import Elsewhere, taken_on
from freqguard.engine.plan import PolicyPlan, keep
from freqguard.engine.requests import Unfit
from freqguard.engine.shared import shared_out
from freqguard.errors import BackendUnavailable, ConfigError, raise_failures
from freqguard.policy import Fallback, check_on_error
from freqguard.script.calls import Reply

__all__ = [
    "Failover",
    "elsewhere",
    "fail_answer",
    "resilient",
    "settle_many",
]

T = TypeVar("T")
_US = 1_000_000


class Failover:
    """Each policy's ``on_error``, and how the policy's operations answer a store failure
    by it: checked when the policy is registered (a :class:`~freqguard.policy.Fallback`'s
    limits shared out then, not at a hit), the degraded answers, the operation run again on
    the fallback backend.

    Args:
        on_error: the guard's ``on_error``, checked (what a policy without its own follows).
        owner: the guard's class name, for messages.
        methods: what the guard calls on a backend (and on a fallback backend).
        breaker: the guard's breaker: a fail-closed answer waits for its probe.
        prefix: the guard's key prefix (a fallback's keys are built with it).

    Attributes:
        default: the guard's ``on_error``, as this guard drives it.
    """

    __slots__ = (
        "_adapt",
        "_before",
        "_breaker",
        "_driven",
        "_drivers",
        "_given",
        "_given_default",
        "_kept",
        "_making",
        "_methods",
        "_owner",
        "_prefix",
        "_shared",
        "default",
    )

    def __init__(
        self,
        on_error: object,
        owner: str,
        methods: tuple[str, ...],
        breaker: Breaker | None,
        prefix: str,
    ) -> None:
        self.default = on_error
        self._given_default = on_error  # as given: a face of this guard adapts it (facing)
        self._owner, self._methods = owner, methods
        self._breaker, self._prefix = breaker, prefix
        self._adapt: Callable[[object], object] = _same
        # each guard that drives these on_error, and how: the owner, and its faces
        self._drivers: tuple[tuple[Callable[[object], object], str, tuple[str, ...]], ...]
        self._drivers = ((_same, owner, methods),)
        self._given: dict[str, object] = {}  # per policy, as given
        self._before: dict[str, dict[str, object]] = {}  # per policy, the last it replaced
        self._driven: Mapping[str, object] = self._given  # as this guard drives it
        self._shared: dict[tuple[str, int], tuple[PolicyPlan, PolicyPlan]] = {}
        # per policy, by the shared-out plan's fingerprint: (plan, shared-out plan)
        self._kept: dict[str, dict[str, tuple[PolicyPlan, PolicyPlan]]] = {}
        self._making = threading.Lock()  # shared with the faces (copy.copy), as the dicts

    def facing(
        self, adapt: Callable[[object], object], owner: str, methods: tuple[str, ...]
    ) -> Failover:
        """The same policies' ``on_error``, shared not copied, for the async face of a sync
        guard: ``adapt`` makes each fallback backend one the face can drive."""
        face = copy.copy(self)
        face.default = adapt(self.default)
        face._adapt, face._owner, face._methods = adapt, owner, methods
        face._drivers = (*self._drivers, (adapt, owner, methods))  # the owner's checks too
        face._driven = _Adapted(self._given, adapt)
        return face

    def add(self, plan: PolicyPlan) -> None:
        """Take the ``on_error`` of a policy being registered (its own, or the guard's),
        checked as this guard will drive it.

        Raises:
            ConfigError: an ``on_error`` this guard cannot drive, or a Fallback whose
                shared-out limits are refused.
        """
        policy = plan.policy
        on_error = self._given_default if policy.on_error is None else policy.on_error
        for adapt, owner, methods in self._drivers:  # a face's registration: the owner's too
            check_on_error(adapt(on_error), f"policy {policy.name!r} on {owner}", methods)
        if isinstance(on_error, Fallback):
            self._shared_out(plan, on_error)
        previous = self._given.get(plan.name)
        if previous is not None and previous is not on_error:  # closed with the guard's
            versions = dict(self._before.get(plan.name, {}))  # new: a close reads the old
            keep(versions, str(id(previous)), previous)
            self._before[plan.name] = versions
        self._given[plan.name] = on_error

    def backends(self, besides: object) -> list[Any]:
        """Every fallback backend but ``besides`` (the guard's store), each once, as this
        guard drives them, those deploys replaced too (the last ``MOST_REPLACED`` a policy):
        a guard's close closes them with its store (a configuration's ``on_error = {
        fallback = "..." }`` makes one only the guard holds)."""
        # snapshots (one C call each): a policy registered meanwhile changes these dicts
        kept = [v for versions in list(self._before.values()) for v in list(versions.values())]
        before = (self._adapt(v) for v in kept)
        given = (self.default, *(self._driven[name] for name in list(self._driven)), *before)
        found = (value.backend if isinstance(value, Fallback) else value for value in given)
        backends = (b for b in found if not isinstance(b, str) and b is not besides)
        return list({id(b): b for b in backends}.values())

    def of(self, plan: PolicyPlan) -> object:
        """``plan``'s ``on_error``, as this guard drives it."""
        return self._driven[plan.name]

    def on_failure(self, plan: PolicyPlan, cost: int = 0) -> tuple[object, PolicyPlan, object]:
        """How a store failure of ``plan`` is answered (``"raise"``, ``"allow"``, ``"deny"``
        or the backend to fall back on), the plan a fallback decides with (``plan``
        itself, or its limits shared out, :class:`~freqguard.policy.Fallback`, made
        once), and the fallback backend as the guard was given it (what a receipt taken
        there names, ``ops.taken_on``; its ``on_error`` when no backend): all of one read
        of the policy's ``on_error`` (a deploy between two reads had a lease taken on one
        fallback and its receipt name another). A ``cost`` the shared-out limits can
        never admit fails closed instead."""
        value = self._given[plan.name]
        given = value.backend if isinstance(value, Fallback) else value
        if not isinstance(on_error := self._drive(value), Fallback):
            return on_error, plan, given
        there = self._shared_out(plan, on_error)
        return (on_error.backend if there.fits(cost) else "deny"), there, given

    def _drive(self, value: object) -> object:
        """An ``on_error`` as given, as this guard drives it (a face's adapted once)."""
        driven = self._driven
        return driven.adapted(value) if isinstance(driven, _Adapted) else value

    def guarded(
        self,
        plan: PolicyPlan,
        make: Callable[[PolicyPlan], Op[Decision]],
        cost: int,
        *,
        hit: bool = False,
    ) -> Op[Decision]:
        """``make(plan)``, an operation of ``cost``, with a store failure answered by the
        policy's ``on_error`` (a fallback runs it again there, with the plan it decides with
        there; a ``hit`` of a cost its shared-out limits can never admit fails closed
        instead, to wait for the store)."""
        how, there, given = self.on_failure(plan, cost if hit else 0)
        if how == "raise":
            return make(plan)
        answer = self.answer(plan, cost)
        again = lambda: taken_on(make(there), given)  # noqa: E731
        return resilient(lambda: make(plan), how, answer, again)

    def answer(self, plan: PolicyPlan, cost: int) -> Callable[[str, BackendUnavailable], Decision]:
        """The degraded answer to a hit of ``plan`` of ``cost``, by its source
        (``"fail-open"``, ``"fail-closed"``) and the error (:func:`fail_answer`)."""
        rules, breaker = plan.policy.rules, self._breaker
        return lambda source, exc: fail_answer(plan.name, rules, cost, source, exc, breaker)

    def drive(self, backend: object) -> object:
        """A fallback backend as the guard was given it, as this face drives it."""
        return self._adapt(backend)

    def taken_under(self, name: str, fingerprint: str) -> tuple[PolicyPlan, PolicyPlan] | None:
        """The plan and its shared-out plan a receipt of ``name`` taken on a fallback bears
        the fingerprint of (the last :data:`~freqguard.engine.plan.MOST_REPLACED` made), though the
        policy or its Fallback's ``workers`` changed since; None if not kept."""
        return self._kept.get(name, {}).get(fingerprint)

    def _shared_out(self, plan: PolicyPlan, fallback: Fallback) -> PolicyPlan:
        """``plan`` with its limits shared out among the fallback's ``workers``, its keys as
        the fallback's backend builds them (its bins), made once and kept (a lease taken
        on it goes back by it after a deploy)."""
        workers = fallback.workers
        made = self._shared.get((plan.name, workers))
        if made is None or made[0] is not plan:
            with self._making:  # one at a time: a hit with the plan before a deploy raced
                made = self._shared.get((plan.name, workers))  # it, and one kept was lost
                if made is None or made[0] is not plan:
                    made = self._share(plan, fallback)
        return made[1]

    def _share(self, plan: PolicyPlan, fallback: Fallback) -> tuple[PolicyPlan, PolicyPlan]:
        """``plan`` shared out anew, cached, and kept among the policy's versions."""
        bins: int = getattr(fallback.backend, "bins", 0)
        scaled = PolicyPlan(shared_out(plan.policy, fallback.workers), self._prefix, bins=bins)
        made = self._shared[(plan.name, fallback.workers)] = (plan, scaled)
        versions = dict(self._kept.get(plan.name, {}))  # new: a release reads the old
        keep(versions, scaled.fingerprint, made)
        self._kept[plan.name] = versions
        return made


class _Adapted(Mapping[str, object]):
    """A live view of another guard's per-policy ``on_error``, each value adapted once (a
    hit reads it: no adapter may be made per hit)."""

    def __init__(self, source: dict[str, object], adapt: Callable[[object], object]) -> None:
        self._source, self._adapt = source, adapt
        self._made: dict[int, tuple[object, object]] = {}  # id(value) -> (value, adapted)

    def __getitem__(self, name: str) -> object:
        return self.adapted(self._source[name])

    def adapted(self, value: object) -> object:
        """``value`` (one of the source's) adapted, once."""
        made = self._made.get(id(value))
        if made is None or made[0] is not value:  # those no policy has now are forgotten
            # snapshots (one C call each): a deploy in another thread changes the source
            live = set(map(id, list(self._source.values())))
            kept = {key: m for key, m in list(self._made.items()) if key in live}
            made = kept[id(value)] = (value, self._adapt(value))
            self._made = kept
        return made[1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._source)

    def __len__(self) -> int:
        return len(self._source)


def _same(value: object) -> object:
    return value


Step = Any  # the core's steps, or Elsewhere
Op = Generator[Step, list[Reply], T]


def elsewhere(op: Op[T], backend: object) -> Op[T]:
    """``op`` with every batch of calls sent to ``backend`` instead of the store."""
    try:
        step = next(op)
        while True:
            try:
                replies = yield (Elsewhere(backend, step) if isinstance(step, list) else step)
            except BaseException as exc:  # handed to the operation, to undo
                step = op.throw(exc)
            else:
                step = op.send(replies)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def resilient(
    make: Callable[[], Op[T]],
    on_error: object,
    answer: Callable[[str, BackendUnavailable], T],
    again: Callable[[], Op[T]] | None = None,
) -> Op[T]:
    """Run ``make()``; if the store fails, answer by ``on_error``: ``answer(source, error)``
    for allow/deny, or the whole operation again (``again()``, default ``make()``) on the
    fallback backend, its decisions' source set to ``"fallback"`` (failing closed for a
    cost its shared-out limits cannot hold for that hit: a tier's, a priority's)."""
    try:
        return (yield from make())
    except BackendUnavailable as exc:
        if on_error == "raise":
            raise
        if isinstance(on_error, str):
            return answer("fail-open" if on_error == "allow" else "fail-closed", exc)
        try:
            return set_source_all((yield from elsewhere((again or make)(), on_error)), "fallback")
        except Unfit:  # a cost the shared-out limits cannot hold for this hit: as fits() says
            return answer("fail-closed", exc)


def settle_many(
    batch: Op[list[Any]],
    on_error: object,
    answer: Callable[[str, BackendUnavailable], Decision],
    rerun: Callable[[list[int]], Op[list[Any]]],
    undo: Callable[[list[Any]], Op[None]],
) -> Op[list[Decision]]:
    """A batch whose failed hits (``batch`` gives their errors in place of decisions) are
    answered by ``on_error``, and the rest by the store: ``answer(source, error)`` for
    allow/deny, or the failed hits again on the fallback backend (``rerun(positions)``;
    should the fallback fail or refuse them, what the store admitted goes back first,
    ``undo(results)``, and that is raised). With ``"raise"``, a failure shared by every
    hit is raised as it is; a part failed and a part decided,
    :class:`~freqguard.PartialFailure` with each hit's decision or error."""
    results = yield from batch
    if on_error == "raise":
        raise_failures(results, "hits")
        return results
    failed = [i for i, result in enumerate(results) if isinstance(result, BackendUnavailable)]
    if not failed:
        return results
    if isinstance(on_error, str):
        source = "fail-open" if on_error == "allow" else "fail-closed"
        for i in failed:
            results[i] = answer(source, results[i])
        return results
    try:
        redone = yield from elsewhere(rerun(failed), on_error)
        lost = next((d for d in redone if isinstance(d, BackendUnavailable)), None)
        if lost is not None:  # the fallback failed too
            raise lost
    except (BackendUnavailable, ConfigError):  # the caller sees no decision: none kept
        yield from undo(results)
        raise
    for i, decision in zip(failed, redone, strict=True):
        results[i] = with_source(decision, "fallback")
    return results


def fail_answer(
    name: str,
    rules: tuple[Any, ...],
    cost: int,
    source: str,
    error: BackendUnavailable,
    breaker: Breaker | None,
) -> Decision:
    """The decision ``on_error`` gives when no store answered.

    Fail open admits the hit and reports each rule as if the hit were its only one (nothing
    is known); fail closed denies it by every enforcing rule until the store is probed again
    (the breaker's wait, or its cool-down).
    """
    if source == "fail-open":
        raw = tuple((rule, max(rule.capacity - cost, 0), 0, 0) for rule in rules)
        return with_source(make_decision(name, True, 0.0, (), lambda: raw), source)
    if isinstance(error, CircuitOpen):
        wait = error.retry_after
    else:
        wait = breaker.retry_after() if breaker is not None else 1.0
    wait_us = max(int(wait * _US), 1)
    raw = tuple((rule, 0, wait_us, 0 if rule.shadow else wait_us) for rule in rules)
    denied = tuple(rule for rule in rules if not rule.shadow)
    if not denied:  # a policy of shadow rules only never denies, not even failing closed
        return fail_answer(name, rules, cost, "fail-open", error, breaker)
    return with_source(make_decision(name, False, wait_us / _US, denied, lambda: raw), source)
