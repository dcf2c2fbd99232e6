"""What a guard does when the store fails: ``on_error``, the circuit breaker, degraded answers.

I/O-free: the guards drive these. ``on_error`` says how a failed store call is answered:

* ``"raise"`` (the default): :class:`~freqguard.BackendUnavailable` reaches the caller;
* ``"allow"``: fail open, the hit is admitted (``decision.source == "fail-open"``);
* ``"deny"``: fail closed, the hit is denied with a ``retry_after`` > 0 (``"fail-closed"``);
* a backend (e.g. ``MemoryBackend()``): the operation runs again, whole, on that backend
  (``"fallback"``); its caps are that backend's, e.g. per process;
* a :class:`Fallback` (``Fallback(MemoryBackend(), workers=8)``): the same, with each rule's
  limit (and burst) divided by the number of workers that fall back, so that together they
  admit about what the store would.

The :class:`Breaker` stops calling a store that keeps failing, so that an outage does not
also become a latency outage: while it is open every call fails at once and ``on_error``
answers; after the cool-down one call probes the store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator
from typing import Any, NamedTuple, TypeVar

from freqguard.backends.base import Reply, ScriptCall
from freqguard.decision import Decision, make_decision, with_source
from freqguard.errors import BackendUnavailable, ConfigError, raise_failures
from freqguard.policy import Policy
from freqguard.rates import Rate
from freqguard.rules import Rule

__all__ = ["ON_ERROR", "Breaker", "CircuitOpen", "Elsewhere", "Fallback", "check_on_error"]

T = TypeVar("T")
_US = 1_000_000
ON_ERROR = ("raise", "allow", "deny")
_log = logging.getLogger("freqguard")


class Fallback:
    """A backend to fall back on while the store is away, with the caps shared out.

    A fallback ``MemoryBackend()`` keeps per-process counts: N worker processes falling back
    admit up to N times a limit between them. ``Fallback(MemoryBackend(), workers=N)`` gives
    each process 1/N of every rule's limit (and of a bucket's burst), rounded down and at
    least 1, so that the N together admit about the limit (at most N times it where a limit
    is smaller than N). Its decisions say ``source == "fallback"`` and report the shared-out
    limits.

    Args:
        backend: the backend to decide on (a sync one for Guard, an async one for
            AsyncGuard; ``MemoryBackend`` is both).
        workers: how many processes share the limits while falling back (>= 1).

    Raises:
        ConfigError: ``workers`` is not an integer >= 1, or ``backend`` is not a backend.
    """

    __slots__ = ("backend", "workers")

    def __init__(self, backend: Any, workers: int) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigError(f"Fallback workers must be an integer >= 1, got {workers!r}")
        if isinstance(backend, (str, Fallback)) or not hasattr(backend, "clock"):
            raise ConfigError(f"Fallback takes a backend (e.g. MemoryBackend()), got {backend!r}")
        self.backend, self.workers = backend, workers

    def __repr__(self) -> str:
        return f"Fallback({self.backend!r}, workers={self.workers})"


def shared_out(policy: Policy, workers: int) -> Policy:
    """``policy`` with each rule's limit and burst divided by ``workers`` (rounded down, at
    least 1); rule ids kept, so that decisions name the same rules."""
    if workers == 1:
        return policy
    rules = []
    for rule in policy.rules:
        burst = None if rule.burst is None else max(rule.burst // workers, 1)
        try:
            rate = Rate(max(rule.rate.limit // workers, 1), rule.rate.window)
            rules.append(
                Rule(rate, rule.by, rule.strategy, name=rule.id, burst=burst, shadow=rule.shadow)
            )
        except ConfigError as exc:
            raise ConfigError(
                f"on_error=Fallback(..., workers={workers}) shares rule {rule.id!r} of policy "
                f"{policy.name!r} out as {max(rule.rate.limit // workers, 1)} per "
                f"{rule.rate.window} (burst {burst}), which is refused: {exc}"
            ) from None
    return Policy(policy.name, *rules)


def check_on_error(value: object, where: str, methods: tuple[str, ...] | None = None) -> object:
    """``value`` if it is a valid ``on_error``: ``"raise"``, ``"allow"``, ``"deny"``, a
    backend or a :class:`Fallback` (with ``methods``, when given: what the guard will call
    on the backend)."""
    if isinstance(value, Fallback):
        check_on_error(value.backend, where, methods)
        return value
    if isinstance(value, str):
        if value in ON_ERROR:
            return value
    elif hasattr(value, "clock"):
        wanted = methods or ("execute_many",)
        if all(callable(getattr(value, m, None)) for m in wanted) or (
            methods is None and callable(getattr(value, "aexecute_many", None))
        ):
            return value
        if methods is not None:
            raise ConfigError(
                f"{where}: the fallback backend {value!r} lacks {', '.join(methods)}: a "
                f"{'sync' if methods[0] == 'execute' else 'async'} guard needs one it can drive"
            )
    raise ConfigError(
        f"{where}: on_error must be 'raise', 'allow', 'deny' or a backend to fall back on "
        f"(e.g. MemoryBackend()), got {value!r}"
    )


class CircuitOpen(BackendUnavailable):
    """The breaker is open: the store was not called.

    Attributes:
        retry_after: seconds until the breaker lets one call probe the store.
    """

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message, sent=False)
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[object, ...]:  # picklable, e.g. across process pools
        return (type(self), (str(self), self.retry_after))


class _Circuit:
    """One node's circuit: consecutive failures, and while open, until when."""

    __slots__ = ("count", "open_until", "probing", "since")

    def __init__(self, since: float) -> None:
        self.count = 0
        self.open_until: float | None = None
        self.probing = False
        self.since = since  # its last failure, or when its probe went out


class Breaker:
    """A consecutive-failure circuit breaker, shared by the threads of one guard, with one
    circuit per store node.

    Each circuit, closed, lets every call through and counts its node's consecutive
    failures; at ``failures`` it opens for ``cooldown`` seconds, during which no call
    reaches that node. Then it lets one call through (half-open, the probe): a success
    closes it, a failure opens it again. A probe not heard of within a cool-down (its
    caller cancelled, say) is taken as lost, and the next call probes. Any success of the
    node resets its count.

    A node is what the backend's ``node_of(call)`` names: a Redis Cluster node's address, so
    a hung node opens the circuit of its own slots only and the other nodes go on deciding;
    ``None`` (the one circuit) for a standalone server, the memory backend, or a backend
    that does not say. A circuit nobody has called for a cool-down (two, once open) is
    forgotten: a node whose slots moved away leaves nothing behind.

    Args:
        failures: consecutive failures that open a circuit (>= 1).
        cooldown: seconds a circuit stays open before probing (> 0).
        clock: a monotonic clock in seconds (``time.monotonic``), or a
            :class:`~freqguard.Clock` whose ``now`` it reads (tests pass a ``ManualClock``).

    Raises:
        ConfigError: a bad ``failures``, ``cooldown`` or ``clock``.
    """

    __slots__ = ("_circuits", "_clock", "_lock", "cooldown", "counting", "failures", "tripped")

    def __init__(
        self,
        failures: int = 5,
        cooldown: float = 5.0,
        *,
        clock: Callable[[], float] | Any = time.monotonic,
    ) -> None:
        if isinstance(failures, bool) or not isinstance(failures, int) or failures < 1:
            raise ConfigError(f"Breaker failures must be an integer >= 1, got {failures!r}")
        if (
            isinstance(cooldown, bool)
            or not isinstance(cooldown, (int, float))
            or not 0 < cooldown < float("inf")
        ):
            raise ConfigError(f"Breaker cooldown must be finite seconds > 0, got {cooldown!r}")
        if not callable(clock):  # a Clock (ManualClock()): its seconds
            now = getattr(clock, "now", None)
            if not callable(now):
                raise ConfigError(
                    f"Breaker clock must be a function of seconds (time.monotonic, "
                    f"ManualClock().now) or a Clock, got {clock!r}"
                )
            clock = now
        self.failures = failures
        self.cooldown = float(cooldown)
        self._clock = clock
        self._lock = threading.Lock()
        self._circuits: dict[object, _Circuit] = {}  # nodes with failures counted: few
        #: Whether any node has failures counted: only then is a call's node asked for.
        self.counting = False
        #: Whether any circuit is open or half-open: only then are calls checked.
        self.tripped = False

    @property
    def state(self) -> str:
        """``"closed"`` when every circuit is; else ``"open"`` when one is open and waiting,
        or ``"half-open"`` (its probe due or under way). See :meth:`state_of` per node."""
        states = {self.state_of(node) for node in list(self._circuits)}
        return next((s for s in ("open", "half-open") if s in states), "closed")

    def state_of(self, node: object = None) -> str:
        """One node's circuit: ``"closed"``, ``"open"`` or ``"half-open"``."""
        circuit = self._circuits.get(node)
        if circuit is None or circuit.open_until is None:
            return "closed"
        waiting = self._clock() < circuit.open_until and not circuit.probing
        return "open" if waiting else "half-open"

    def check(self, what: str, node: object = None) -> None:
        """Raise :class:`CircuitOpen` unless a call may go to ``node`` now."""
        if not self.tripped:  # every circuit closed: the common case, no lock
            return
        with self._lock:
            now = self._clock()
            self._sweep(now)
            circuit = self._circuits.get(node)
            if circuit is None or circuit.open_until is None:
                return
            until = circuit.open_until
            lost = circuit.probing and now - circuit.since >= self.cooldown
            if now >= until and (not circuit.probing or lost):
                circuit.probing, circuit.since = True, now  # this call is the probe
                return
            wait = max(until - now, 0.0) if not circuit.probing else self.cooldown
        where = "" if node is None else f" to {node}"
        raise CircuitOpen(
            f"{what}: the circuit{where} is open after {self.failures} consecutive failures; "
            f"the store is probed again in {wait:.3f}s",
            retry_after=wait,
        )

    def succeeded(self, node: object = None) -> None:
        """A call to ``node`` answered."""
        if not self.counting:
            return
        with self._lock:
            circuit = self._circuits.pop(node, None)
            reopened = circuit is not None and circuit.open_until is not None
            self._sweep(self._clock())
        if reopened:
            where = "the store" if node is None else f"store node {node}"
            _log.warning("freqguard: %s answers again; circuit closed", where)

    def failed(self, node: object = None) -> None:
        """A call to ``node`` got no answer."""
        with self._lock:
            now = self._clock()
            circuit = self._circuits.get(node)
            if circuit is None:
                circuit = self._circuits[node] = _Circuit(now)
            circuit.count += 1
            circuit.since = now
            opened = circuit.probing or (
                circuit.open_until is None and circuit.count >= self.failures
            )
            if opened:
                circuit.open_until = now + self.cooldown
                circuit.probing = False
            count = circuit.count
            self._sweep(now)
        if opened:
            where = "store" if node is None else f"store node {node}"
            _log.warning(
                "freqguard: circuit open after %d consecutive %s failures; probing again in %.1fs",
                count,
                where,
                self.cooldown,
            )

    def _sweep(self, now: float) -> None:
        """Forget the circuits nobody called for a while, then say what is left (under the
        lock)."""
        for node, circuit in list(self._circuits.items()):
            quiet = now - circuit.since
            if quiet > (self.cooldown if circuit.open_until is None else 2 * self.cooldown):
                del self._circuits[node]
        self.counting = bool(self._circuits)
        self.tripped = any(c.open_until is not None for c in self._circuits.values())

    def retry_after(self, node: object = None) -> float:
        """Seconds until ``node`` is probed (the cool-down when its circuit is closed)."""
        circuit = self._circuits.get(node)
        until = None if circuit is None else circuit.open_until
        if until is None:
            return self.cooldown
        return max(until - self._clock(), 0.001)

    def __repr__(self) -> str:
        return f"Breaker(failures={self.failures}, cooldown={self.cooldown}, state={self.state!r})"


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
