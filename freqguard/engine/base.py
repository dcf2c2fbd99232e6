"""What Guard and AsyncGuard share: everything but the few lines that send.

One class, in four rooms by job, each building on the one before: the registry and
settings (:mod:`~freqguard.engine.registry`), what is done around each step's store calls
(:mod:`~freqguard.engine.accounting`), the operations prepared
(:mod:`~freqguard.engine.hits`) and refunds of one decision
(:mod:`~freqguard.engine.refunds`).
"""

from __future__ import annotations

from freqguard.engine.refunds import Refunds
from freqguard.engine.registry import DEFAULT_BREAKER, check_backend

__all__ = ["DEFAULT_BREAKER", "GuardBase", "check_backend"]


class GuardBase(Refunds):
    """Policies, clock, validation, failure handling, deny cache, observers: all but I/O."""
