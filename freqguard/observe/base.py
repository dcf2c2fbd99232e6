"""The observer protocol, the logging observer and the labels every observer uses (the
room's face, :mod:`freqguard.observe`, says what observers are told)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from freqguard.script.keys import digest

if TYPE_CHECKING:
    from freqguard.decision import Decision
    from freqguard.errors import BackendUnavailable

__all__ = [
    "DECISION_BUCKETS",
    "LoggingObserver",
    "Observer",
    "RepeatFilter",
    "backend_label",
    "error_label",
]

#: The decision-time histograms' upper bounds, in seconds: from 50 µs (a memory hit) to
#: 2.5 s (a store timing out), so that both ends of a deployment land in distinct buckets.
DECISION_BUCKETS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)


@runtime_checkable
class Observer(Protocol):
    """What a guard tells its observers. Both methods must be fast and must not raise (an
    exception from an observer reaches the caller of ``hit``)."""

    def decided(self, decision: Decision, context: Mapping[str, str], seconds: float) -> None:
        """A hit was decided.

        Args:
            decision: the answer; ``decision.source`` says how it was made.
            context: the hit's dimension values as text (may hold recipients or content:
                never log or label with them; :func:`freqguard.script.keys.digest` them).
            seconds: how long the decision took (for a batch, its time divided evenly).
        """

    def failed(self, error: BackendUnavailable, policy: str, backend: str) -> None:
        """The store failed on a call for ``policy`` (``on_error`` answers next).

        Args:
            error: the error; ``error.__cause__`` holds the driver's original one.
            policy: the policy whose operation failed.
            backend: the backend's label (:func:`backend_label`).
        """


def backend_label(backend: object) -> str:
    """A short, bounded label for a backend: its class name, e.g. ``RedisBackend``."""
    return type(backend).__name__


def error_label(error: BaseException) -> str:
    """A short, bounded label for an error: the class of its cause when chained, e.g.
    ``ConnectionError``, ``TimeoutError``, ``CircuitOpen``."""
    cause = error.__cause__
    return type(cause if cause is not None else error).__name__


class RepeatFilter:
    """Which log lines of a kind to write: the first at once, then at most one every
    ``quiet`` seconds a kind, saying how many were held back meanwhile (a store that fails
    answers every call with a failure; a line each would flood the log). Kinds are few
    (backend, error, policy); past ``most`` of them, those quiet and holding nothing back
    are forgotten, and a new kind that still finds no room is counted with every other
    such kind, as one."""

    def __init__(self, quiet: float, clock: Any = time.monotonic, most: int = 4096) -> None:
        self.quiet, self._clock, self._most = quiet, clock, most
        self._lock = threading.Lock()
        self._last: dict[object, tuple[float, int]] = {}  # a kind: (let through at, held)

    def due(self, kind: object) -> int | None:
        """None: a line of ``kind`` is held back (counted); else write it, with how many
        were held back since the last."""
        now = self._clock()
        with self._lock:
            if kind not in self._last and len(self._last) >= self._most:
                self._forget(now)
                if len(self._last) >= self._most:
                    kind = _OVERFLOW
            last = self._last.get(kind)
            if last is not None and now - last[0] < self.quiet:
                self._last[kind] = (last[0], last[1] + 1)
                return None
            self._last[kind] = (now, 0)
        return last[1] if last is not None else 0

    def _forget(self, now: float) -> None:
        """The kinds whose quiet time is over and that hold nothing back: a line of theirs
        would be written at once anyway."""
        done = [k for k, (at, held) in self._last.items() if held == 0 and now - at >= self.quiet]
        for kind in done:
            del self._last[kind]


_OVERFLOW = object()  # the kinds past RepeatFilter's most, counted as one


class LoggingObserver:
    """Log decisions and store failures on the logger ``"freqguard"``.

    Denials at DEBUG (policy, rules, retry_after, the context's digest: never its values);
    store failures at WARNING, the same error repeated within ``quiet`` seconds counted and
    summed up in the next warning instead of logged each time.

    Args:
        logger: the logger (default ``logging.getLogger("freqguard")``).
        quiet: seconds during which a repeated error is not logged again.
        clock: a monotonic clock in seconds (tests inject one).
    """

    def __init__(
        self,
        logger: logging.Logger | None = None,
        *,
        quiet: float = 10.0,
        clock: Any = time.monotonic,
    ) -> None:
        self.logger = logger or logging.getLogger("freqguard")
        self._repeats = RepeatFilter(quiet, clock)

    @property
    def quiet(self) -> float:
        """Seconds during which a repeated error is not logged again."""
        return self._repeats.quiet

    @quiet.setter
    def quiet(self, seconds: float) -> None:
        self._repeats.quiet = seconds

    def decided(self, decision: Decision, context: Mapping[str, str], seconds: float) -> None:
        if decision.allowed or not self.logger.isEnabledFor(logging.DEBUG):
            return
        self.logger.debug(
            "denied policy=%s rules=%s retry_after=%.3f source=%s key=%s",
            decision.policy,
            ",".join(rule.id for rule in decision.denied_by),
            decision.retry_after,
            decision.source,
            digest(decision.policy, *(f"{k}={v}" for k, v in sorted(context.items()))),
        )

    def failed(self, error: BackendUnavailable, policy: str, backend: str) -> None:
        what = (backend, error_label(error), policy)
        suppressed = self._repeats.due(what)
        if suppressed is None:
            return
        more = f" ({suppressed} more since the last warning)" if suppressed else ""
        self.logger.warning(
            "store failure backend=%s error=%s policy=%s: %s%s",
            backend,
            what[1],
            policy,
            error,
            more,
        )
