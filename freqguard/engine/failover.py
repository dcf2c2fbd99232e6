"""What a guard does when the store fails: the degraded answers of ``on_error``, a fallback
backend's run of an operation, a batch settled hit by hit, and a policy's limits shared out
among the workers that fall back (:class:`~freqguard.policy.Fallback`). I/O-free: the
guards drive these (``on_error`` is described in :mod:`freqguard.failure`)."""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Any, NamedTuple, TypeVar

from freqguard.decision import Decision, make_decision, with_source
from freqguard.engine.breaker import Breaker, CircuitOpen
from freqguard.errors import BackendUnavailable, ConfigError, raise_failures
from freqguard.policy import Policy
from freqguard.rates import Rate, parse_rate
from freqguard.rules import Rule
from freqguard.script.calls import Reply, ScriptCall

__all__ = [
    "Elsewhere",
    "elsewhere",
    "fail_answer",
    "mark_all",
    "resilient",
    "settle_many",
    "shared_out",
]

T = TypeVar("T")
_US = 1_000_000


def shared_out(policy: Policy, workers: int) -> Policy:
    """``policy`` with each rule's limit and burst divided by ``workers`` (rounded down, at
    least 1); rule ids kept, so that decisions name the same rules."""
    if workers == 1:
        return policy
    rules = []
    for rule in policy.rules:
        if rule.quiet is not None:  # the quiet hours are the same for every worker
            rules.append(rule)
            continue
        burst = None if rule.burst is None else max(rule.burst // workers, 1)
        try:
            rate = Rate(max(rule.rate.limit // workers, 1), rule.rate.window)
            rate_for = None if rule.rate_for is None else _shared_tier(rule.rate_for, workers)
            rules.append(
                Rule(
                    rate,
                    rule.by,
                    rule.strategy,
                    name=rule.id,
                    burst=burst,
                    shadow=rule.shadow,
                    rate_for=rate_for,
                    reads=rule.reads,
                    calendar=rule.calendar,
                    tz=rule.tz,
                    tz_from=rule.tz_from,
                    only=rule.only,
                    caps=_shared_caps(rule, burst if burst is not None else rate.limit),
                )
            )
        except ConfigError as exc:
            raise ConfigError(
                f"on_error=Fallback(..., workers={workers}) shares rule {rule.id!r} of policy "
                f"{policy.name!r} out as {max(rule.rate.limit // workers, 1)} per "
                f"{rule.rate.window} (burst {burst}), which is refused: {exc}"
            ) from None
    return Policy(policy.name, *rules, priorities=policy.priorities)


def _shared_caps(rule: Rule, capacity: int) -> dict[str, int] | None:
    """A rule's caps in the same proportion of its shared-out capacity (none where that is
    too small to leave a priority less than the whole)."""
    if not rule.caps or capacity < 2:
        return None
    return {p: min(max(cap * capacity // rule.capacity, 1), capacity - 1) for p, cap in rule.caps}


def _shared_tier(
    rate_for: Callable[[Mapping[str, str]], Rate | str | None], workers: int
) -> Callable[[Mapping[str, str]], Rate | None]:
    """A tier's rate shared out among ``workers``, as the rule's own is."""

    def shared(texts: Mapping[str, str]) -> Rate | None:
        got = rate_for(texts)
        if got is None:
            return None
        rate = parse_rate(got) if isinstance(got, str) else got
        if not isinstance(rate, Rate):
            return rate  # the tier's own check names the mistake
        return Rate(max(rate.limit // workers, 1), rate.window)

    return shared


class Elsewhere(NamedTuple):
    """An operation step: run these calls on this backend (the fallback), not the store."""

    backend: Any
    calls: list[ScriptCall]


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
    mark: Callable[[T, str], T],
    again: Callable[[], Op[T]] | None = None,
) -> Op[T]:
    """Run ``make()``; if the store fails, answer by ``on_error``: ``answer(source, error)``
    for allow/deny, or the whole operation again (``again()``, default ``make()``) on the
    fallback backend, its result marked by ``mark(result, "fallback")``."""
    try:
        return (yield from make())
    except BackendUnavailable as exc:
        if on_error == "raise":
            raise
        if isinstance(on_error, str):
            return answer("fail-open" if on_error == "allow" else "fail-closed", exc)
        return mark((yield from elsewhere((again or make)(), on_error)), "fallback")


def settle_many(
    batch: Op[list[Any]],
    on_error: object,
    answer: Callable[[str, BackendUnavailable], Decision],
    rerun: Callable[[list[int]], Op[list[Any]]],
) -> Op[list[Decision]]:
    """A batch whose failed hits (``batch`` gives their errors in place of decisions) are
    answered by ``on_error``, and the rest by the store: ``answer(source, error)`` for
    allow/deny, or the failed hits again on the fallback backend (``rerun(positions)``).
    With ``"raise"``, a failure shared by every hit is raised as it is; a part failed and a
    part decided, :class:`~freqguard.PartialFailure` with each hit's decision or error."""
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
    redone = yield from elsewhere(rerun(failed), on_error)
    for i, decision in zip(failed, redone, strict=True):
        if isinstance(decision, BackendUnavailable):  # the fallback failed too
            raise decision
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


def mark_all(result: T, source: str) -> T:
    """Mark a decision, or each of a list of decisions, as made by ``source``."""
    if isinstance(result, Decision):
        with_source(result, source)
    elif isinstance(result, list):
        for decision in result:
            with_source(decision, source)
    return result
