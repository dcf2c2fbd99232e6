"""What a guard does when the store fails: ``on_error``, the circuit breaker, degraded answers.

I/O-free: the guards drive these. ``on_error`` says how a failed store call is answered:

* ``"raise"`` (the default): :class:`~freqguard.BackendUnavailable` reaches the caller;
* ``"allow"``: fail open, the hit is admitted (``decision.source == "fail-open"``);
* ``"deny"``: fail closed, the hit is denied with a ``retry_after`` > 0 (``"fail-closed"``);
* a backend (e.g. ``MemoryBackend()``): the operation runs again, whole, on that backend
  (``"fallback"``); its caps are that backend's, e.g. per process.

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
from freqguard.errors import BackendUnavailable, ConfigError

__all__ = ["ON_ERROR", "Breaker", "CircuitOpen", "Elsewhere", "check_on_error"]

T = TypeVar("T")
_US = 1_000_000
ON_ERROR = ("raise", "allow", "deny")
_log = logging.getLogger("freqguard")


def check_on_error(value: object, where: str, methods: tuple[str, ...] | None = None) -> object:
    """``value`` if it is a valid ``on_error``: ``"raise"``, ``"allow"``, ``"deny"`` or a
    backend (with ``methods``, when given: what the guard will call on it)."""
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


class Breaker:
    """A consecutive-failure circuit breaker, shared by the threads of one guard.

    Closed, it lets every call through and counts consecutive failures; at ``failures`` it
    opens for ``cooldown`` seconds, during which no call reaches the store. Then it lets one
    call through (half-open, the probe): a success closes it, a failure opens it again.
    Any success resets the count.

    Args:
        failures: consecutive failures that open it (>= 1).
        cooldown: seconds it stays open before probing (> 0).
        clock: a monotonic clock in seconds (tests pass ``ManualClock().now``).
    """

    __slots__ = ("_clock", "_count", "_lock", "_open_until", "_probing", "cooldown", "failures")

    def __init__(
        self,
        failures: int = 5,
        cooldown: float = 5.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(failures, bool) or not isinstance(failures, int) or failures < 1:
            raise ConfigError(f"Breaker failures must be an integer >= 1, got {failures!r}")
        if (
            isinstance(cooldown, bool)
            or not isinstance(cooldown, (int, float))
            or not 0 < cooldown < float("inf")
        ):
            raise ConfigError(f"Breaker cooldown must be finite seconds > 0, got {cooldown!r}")
        self.failures = failures
        self.cooldown = float(cooldown)
        self._clock = clock
        self._lock = threading.Lock()
        self._count = 0
        self._open_until: float | None = None
        self._probing = False

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half-open"`` (a probe is due or under way)."""
        if self._open_until is None:
            return "closed"
        return "open" if self._clock() < self._open_until and not self._probing else "half-open"

    def check(self, what: str) -> None:
        """Raise :class:`CircuitOpen` unless a call may go to the store now."""
        if self._open_until is None:  # closed: the common case, no lock
            return
        with self._lock:
            until = self._open_until
            if until is None:
                return
            now = self._clock()
            if now >= until and not self._probing:
                self._probing = True  # this call is the probe; the others wait for it
                return
            wait = max(until - now, 0.0) if not self._probing else self.cooldown
        raise CircuitOpen(
            f"{what}: the circuit is open after {self.failures} consecutive failures; "
            f"the store is probed again in {wait:.3f}s",
            retry_after=wait,
        )

    def succeeded(self) -> None:
        if self._count or self._open_until is not None:
            with self._lock:
                reopened = self._open_until is not None
                self._count, self._open_until, self._probing = 0, None, False
            if reopened:
                _log.warning("freqguard: the store answers again; circuit closed")

    def failed(self) -> None:
        with self._lock:
            self._count += 1
            if self._probing or (self._open_until is None and self._count >= self.failures):
                self._open_until = self._clock() + self.cooldown
                self._probing = False
                opened = True
            else:
                opened = False
        if opened:
            _log.warning(
                "freqguard: circuit open after %d consecutive store failures; probing again "
                "in %.1fs",
                self._count,
                self.cooldown,
            )

    def retry_after(self) -> float:
        """Seconds until the store is probed (the cool-down when closed)."""
        until = self._open_until
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
) -> Op[T]:
    """Run ``make()``; if the store fails, answer by ``on_error``: ``answer(source, error)``
    for allow/deny, or the whole operation again on the fallback backend, its result marked
    by ``mark(result, "fallback")``."""
    try:
        return (yield from make())
    except BackendUnavailable as exc:
        if on_error == "raise":
            raise
        if isinstance(on_error, str):
            return answer("fail-open" if on_error == "allow" else "fail-closed", exc)
        return mark((yield from elsewhere(make(), on_error)), "fallback")


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
