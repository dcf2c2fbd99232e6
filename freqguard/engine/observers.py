"""A guard's observers, told of each decision and each store failure: one that raises
changes no decision and no ``on_error`` answer, and is logged once."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from freqguard.decision import Decision
from freqguard.errors import BackendUnavailable
from freqguard.observe.base import Observer

__all__ = ["Observers"]

_log = logging.getLogger("freqguard")


class Observers:
    """The observers of one guard, on one backend (``label``, as they are told it).

    Attributes:
        active: whether there is any (only then is a hit timed).
    """

    __slots__ = ("_broke", "_label", "_observers", "active")

    def __init__(self, observers: tuple[Observer, ...], label: str) -> None:
        self._observers = observers
        self._label = label
        self.active = bool(observers)
        self._broke: set[tuple[int, str, type[Exception]]] = set()  # errors logged

    def decided(self, decision: Decision, texts: Mapping[str, str], seconds: float) -> None:
        """A hit was decided, in ``seconds``."""
        for observer in self._observers:
            try:
                observer.decided(decision, texts, seconds)
            except Exception as exc:  # an observer never changes a decision
                self._broke_once(observer, "decided", exc)

    def failed(self, error: BackendUnavailable, policy: str) -> None:
        """The store failed on a call of ``policy``."""
        for observer in self._observers:
            try:
                observer.failed(error, policy, self._label)
            except Exception as exc:  # nor how a failure is answered
                self._broke_once(observer, "failed", exc)

    def _broke_once(self, observer: Observer, method: str, exc: Exception) -> None:
        """Log an observer's error once per observer, method and kind of error: it changes
        no decision, no ``on_error`` answer and no breaker count."""
        seen = (id(observer), method, type(exc))
        if seen in self._broke:
            return
        self._broke.add(seen)
        _log.error(
            "freqguard: observer %r raised in %s(), ignored (logged once): %r",
            observer,
            method,
            exc,
            exc_info=exc,
        )
