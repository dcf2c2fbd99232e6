"""The counts the metrics observers keep: one lock and a few list updates per decision.

The metrics libraries' own per-call paths cost several times a memory hit's margin
(prometheus_client takes a lock per counter and per histogram bucket; the OpenTelemetry SDK
hashes the attributes and consults exemplar filters on every call). So the observers count
here, cumulatively, and the libraries read the counts when they collect: a Prometheus
``Collector``, OpenTelemetry observable counters.
"""

from __future__ import annotations

import sys
import threading
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from itertools import pairwise
from typing import TYPE_CHECKING, NamedTuple

from freqguard.errors import ConfigError, shown
from freqguard.observe.base import error_label

if TYPE_CHECKING:
    from freqguard.decision import Decision
    from freqguard.errors import BackendUnavailable

#: A decision cell: [count, sum of seconds, count per bucket (the last one: above them all)].
Cell = list[float]


class Counts(NamedTuple):
    """A consistent copy of a :class:`Tally`."""

    decisions: dict[tuple[str, bool, str], Cell]
    denials: dict[tuple[str, str], int]
    errors: dict[tuple[str, str], int]


def check_buckets(buckets: Iterable[float]) -> tuple[float, ...]:
    """Histogram upper bounds: finite seconds > 0, increasing (``+Inf`` is implied)."""
    bounds = tuple(buckets)
    if (
        not bounds
        or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)
        or not all(0 < b < sys.float_info.max for b in bounds)  # as floats (an int too)
        or any(a >= b for a, b in pairwise(bounds))
    ):
        raise ConfigError(
            f"buckets must be increasing finite seconds > 0 (+Inf is implied), got {shown(bounds)}"
        )
    return tuple(float(b) for b in bounds)


class Tally:
    """An observer that counts: cumulative decision counts, times and denials, and store
    errors, behind one lock. The metrics observers are tallies (a subclass's ``decided`` is
    this one, not a call more).

    Keys are bounded: policies, the rules that deny, five sources, backend and error
    classes; never a context value.
    """

    __slots__ = ("_decisions", "_denials", "_errors", "_lock", "bounds")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._lock = threading.Lock()
        self._decisions: dict[tuple[str, bool, str], Cell] = {}
        self._denials: dict[tuple[str, str], int] = {}
        self._errors: dict[tuple[str, str], int] = {}

    def decided(self, decision: Decision, context: Mapping[str, str], seconds: float) -> None:
        """Count one decision (and, when denied, each rule that said no)."""
        policy, allowed = decision.policy, decision.allowed
        # The source attribute is left unset on a store's decision (the common case), and the
        # ``source`` property pays for an AttributeError then: getattr's default is cheaper.
        source = getattr(decision, "_source", "backend")
        key = (policy, allowed, source)
        cell = self._decisions.get(key)
        if cell is None:
            cell = self._new_cell(key)
        bucket = bisect_left(self.bounds, seconds) + 2  # the first bound >= seconds
        lock = self._lock
        # acquire/try/finally rather than ``with``: a third less time here, as safe
        lock.acquire()
        try:
            cell[0] += 1
            cell[1] += seconds
            cell[bucket] += 1
            if not allowed and source != "fail-closed":  # fail-closed: no rule said no
                denials = self._denials
                for rule in decision.denied_by:
                    denial = (policy, rule.id)
                    denials[denial] = denials.get(denial, 0) + 1
        finally:
            lock.release()

    def failed(self, error: BackendUnavailable, policy: str, backend: str) -> None:
        """Count one store error by backend and error class."""
        key = (backend, error_label(error))
        with self._lock:
            self._errors[key] = self._errors.get(key, 0) + 1

    def counts(self) -> Counts:
        """A copy of every count, taken at one instant."""
        with self._lock:
            return Counts(
                {key: list(cell) for key, cell in self._decisions.items()},
                dict(self._denials),
                dict(self._errors),
            )

    def _new_cell(self, key: tuple[str, bool, str]) -> Cell:
        with self._lock:
            return self._decisions.setdefault(key, [0, 0.0] + [0] * (len(self.bounds) + 1))
