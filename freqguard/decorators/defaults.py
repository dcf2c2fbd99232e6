"""The process-wide default guard: what ``@capped`` uses when given no ``guard=``.

It is a sync :class:`Guard` with an :class:`AsyncGuard` face over the same state, made on
first use (in memory) or by :func:`configure`. ``configure`` replaces both; a decorated
function looks the default up at each call, so it follows the latest one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from freqguard.backends.base import SyncBackend
from freqguard.backends.memory import MemoryBackend
from freqguard.decorators.adapters import as_async, sharing
from freqguard.guard import AsyncGuard, Guard
from freqguard.policy import Policy

__all__ = ["configure", "default_async_guard", "default_guard"]

# the current pair (sync, async), set by configure(); empty until the first use
_current: list[tuple[Guard, AsyncGuard]] = []


def configure(
    backend: str | SyncBackend | None = None, policies: Sequence[Policy] = (), **options: Any
) -> Guard:
    """Set the process-wide guard that ``@capped`` uses when given none.

    Args:
        backend: a URL (``"redis://…"``), a backend object, or None for a new memory backend.
        policies: policies to register (``@capped`` registers its own as it needs them).
        **options: the guards' keyword options: ``prefix``, ``on_error``, ``deny_cache``,
            ``observers``, ``breaker`` (see :class:`~freqguard.Guard`).

    Returns:
        The new default sync guard (an async face over the same state is made alongside).
    """
    from freqguard.backends.urls import async_backend_from_url, backend_from_url

    if backend is None or isinstance(backend, MemoryBackend):
        memory = MemoryBackend() if backend is None else backend
        sync_guard = Guard(memory, policies, **options)
        async_guard = as_async(sync_guard)
    elif isinstance(backend, str):
        sync_guard = Guard(backend_from_url(backend), policies, **options)
        async_guard = sharing(sync_guard, async_backend_from_url(backend))
    else:
        sync_guard = Guard(backend, policies, **options)
        async_guard = as_async(sync_guard)
    _current[:] = [(sync_guard, async_guard)]
    return sync_guard


def _pair() -> tuple[Guard, AsyncGuard]:
    if not _current:
        configure()
    return _current[0]


def default_guard() -> Guard:
    """The current default sync guard (an in-memory one, made on first use)."""
    return _pair()[0]


def default_async_guard() -> AsyncGuard:
    """The current default async guard, over the same state as :func:`default_guard`."""
    return _pair()[1]
