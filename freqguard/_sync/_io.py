"""The sync counterpart of ``freqguard/_async/_io.py``, written by hand: a thread is not
cancelled part way, so :data:`Cancelled` is never raised, :func:`send` just sends and
:func:`unwind` is never reached."""

from __future__ import annotations

from typing import Any, TypeVar

from freqguard.clock import Clock
from freqguard.engine.ops import Op
from freqguard.script.calls import Reply, ScriptCall

__all__ = ["Cancelled", "send", "sleep", "unwind"]

T = TypeVar("T")


class Cancelled(BaseException):
    """Never raised: the async guard's ``asyncio.CancelledError``, which a thread has no
    counterpart of."""


def sleep(clock: Clock, seconds: float) -> None:
    clock.sleep(seconds)


def send(backend: Any, calls: list[ScriptCall], whole: bool) -> list[Reply]:
    """``backend.execute_many(calls)`` (``whole`` matters only to the async guard)."""
    return backend.execute_many(calls)  # type: ignore[no-any-return]


def unwind(op: Op[T], cancelled: BaseException, backend: Any) -> BaseException:
    """Never called (nothing raises :data:`Cancelled`)."""
    raise AssertionError("a sync operation is never cancelled part way") from cancelled
