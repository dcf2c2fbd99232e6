"""The circuit breaker: stop calling a store (or one node of it) that keeps failing, so that
an outage does not also become a latency outage. While a circuit is open every call to its
node fails at once (:class:`CircuitOpen`) and ``on_error`` answers; after the cool-down one
call probes the node."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from freqguard.errors import BackendUnavailable, ConfigError, shown

__all__ = ["Breaker", "CircuitOpen"]

_log = logging.getLogger("freqguard")


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
            raise ConfigError(f"Breaker failures must be an integer >= 1, got {shown(failures)}")
        if (
            isinstance(cooldown, bool)
            or not isinstance(cooldown, (int, float))
            or not 0 < cooldown < sys.float_info.max  # seconds on a clock's float
        ):
            raise ConfigError(f"Breaker cooldown must be finite seconds > 0, got {shown(cooldown)}")
        if not callable(clock):  # a Clock (ManualClock()): its seconds
            now = getattr(clock, "now", None)
            if not callable(now):
                raise ConfigError(
                    f"Breaker clock must be a function of seconds (time.monotonic, "
                    f"ManualClock().now) or a Clock, got {shown(clock)}"
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

    def failed(self, node: object = None, error: BaseException | None = None) -> None:
        """A call to ``node`` got no answer (``error``: what failed, which the line that
        opens the circuit names: a guard without observers logs no other)."""
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
            last = "" if error is None else f" (the last: {str(error)[:300]})"
            _log.warning(
                "freqguard: circuit open after %d consecutive %s failures%s; "
                "probing again in %.1fs",
                count,
                where,
                last,
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

    def holding_off(self) -> float | None:
        """Seconds until the first open circuit's probe is due (None: none is open and
        waiting): while it waits, calls to its node are answered at once, unsent."""
        now = self._clock()
        waits = [
            c.open_until - now
            for c in list(self._circuits.values())
            if c.open_until is not None and not c.probing and c.open_until > now
        ]
        return min(waits) if waits else None

    def retry_after(self, node: object = None) -> float:
        """Seconds until ``node`` is probed (the cool-down when its circuit is closed)."""
        circuit = self._circuits.get(node)
        until = None if circuit is None else circuit.open_until
        if until is None:
            return self.cooldown
        return max(until - self._clock(), 0.001)

    def __repr__(self) -> str:
        return f"Breaker(failures={self.failures}, cooldown={self.cooldown}, state={self.state!r})"
