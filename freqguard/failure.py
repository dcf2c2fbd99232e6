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

from freqguard.engine.breaker import Breaker, CircuitOpen
from freqguard.policy import ON_ERROR, Fallback, check_on_error

__all__ = ["ON_ERROR", "Breaker", "CircuitOpen", "Fallback", "check_on_error"]
