"""The sync counterpart of ``freqguard/_async/_io.py``, written by hand: a thread is not
cancelled part way, but the main thread is interrupted (Ctrl-C: ``KeyboardInterrupt``, this
side's :data:`Cancelled`).

A lease taken or given back (``whole`` is ``HELD``) holds a Ctrl-C back while its calls are
out on a store outside the process, in the main thread while SIGINT has Python's own
handler: the interrupt cut the reply's read, and a lease the store took was known to nobody
(held until it lapsed). Once the calls are answered, :func:`unwind` gives back what they
took, and the interrupt is raised, as the async guard does with a cancellation; a second
Ctrl-C meanwhile is raised at once (what the calls did is then not known). Nothing is held
back elsewhere: a call of a hit or a batch a Ctrl-C cuts counts or not, as a cancelled one
may (the strict side), and holding one back costs three calls to ``signal`` (about 25 µs:
its wrappers turn handlers into enums through exceptions). A Ctrl-C anywhere in an
operation of several steps (a hit over several parts, a batch, ``acquire``) unwinds it as
a cancellation does the async guard's: what its earlier steps took goes back. Nothing is
held back on a ``MemoryBackend``: its calls take microseconds in the process a Ctrl-C
usually ends.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any, TypeVar

from freqguard.backends.memory import MemoryBackend
from freqguard.clock import Clock
from freqguard.engine.ops import HELD, Interrupted, Op, unwinding
from freqguard.script.calls import Reply, ScriptCall

__all__ = ["Cancelled", "send", "sleep", "unwind"]

T = TypeVar("T")
_log = logging.getLogger("freqguard")

Cancelled = KeyboardInterrupt
_MAIN = threading.main_thread()


def sleep(clock: Clock, seconds: float) -> None:
    clock.sleep(seconds)


def send(backend: Any, calls: list[ScriptCall], whole: int) -> list[Reply]:
    """``backend.execute_many(calls)``; with ``whole`` ``HELD``, a Ctrl-C held back until
    they are answered, then an :class:`_Interrupted` with the replies (or, when the calls
    failed too, the interrupt: what they did is not known)."""
    previous = _holdable() if whole == HELD and not isinstance(backend, MemoryBackend) else None
    if previous is None:
        return backend.execute_many(calls)  # type: ignore[no-any-return]
    came: list[int] = []
    restoring: list[bool] = []

    def note(signum: int, frame: object) -> None:
        if came and not restoring:  # a second Ctrl-C while the calls are out: at once
            raise KeyboardInterrupt
        came.append(signum)

    try:
        signal.signal(signal.SIGINT, note)
    except (TypeError, ValueError):  # not this interpreter's to set: sent as it is
        return backend.execute_many(calls)  # type: ignore[no-any-return]
    try:
        try:
            replies: list[Reply] = backend.execute_many(calls)
        except Exception:
            if not came:
                raise
            raise KeyboardInterrupt from None
    finally:
        restoring.append(True)  # a Ctrl-C as it is put back (signal runs it first): noted
        signal.signal(signal.SIGINT, previous)
    if came:
        raise _Interrupted(backend, calls, replies)
    return replies


def _holdable() -> Any:
    """SIGINT's handler where a Ctrl-C can be held back: Python's own, in the main thread
    (a program's own handler, or one set outside Python, is left to it); else None."""
    if threading.current_thread() is not _MAIN:
        return None
    handler = signal.getsignal(signal.SIGINT)
    return handler if handler is signal.default_int_handler else None


def unwind(op: Op[T], cancelled: BaseException, backend: Any) -> BaseException:
    """The caller was interrupted: what the calls under way took (when they finished) and
    what the operation took before (``op`` gives it back when the interrupt is thrown into
    it) goes back to the store, each call let finish (a further Ctrl-C held back). Returns
    the interrupt to raise."""
    steps = unwinding(op, cancelled, backend)
    try:
        where = next(steps)
        while True:
            where = steps.send(_finish(*where))
    except (KeyboardInterrupt, StopIteration):
        pass
    except Exception:  # the store failed meanwhile: the units stay taken, the strict side
        _log.warning("freqguard: an interrupted operation could not give back what it took")
        op.close()
    return KeyboardInterrupt() if isinstance(cancelled, _Interrupted) else cancelled


def _finish(backend: Any, calls: list[ScriptCall]) -> list[Reply]:
    """``calls`` sent and answered, a Ctrl-C held back meanwhile."""
    try:
        return send(backend, calls, HELD)
    except _Interrupted as again:
        return again.replies


class _Interrupted(Interrupted, KeyboardInterrupt):
    """A Ctrl-C that came while ``calls`` were out on ``backend``, which answered them after
    it: ``replies``."""
