"""The sync counterpart of ``freqguard/_async/_io.py``, written by hand: a thread is not
cancelled part way, but the main thread is interrupted (Ctrl-C: ``KeyboardInterrupt``, this
side's :data:`Cancelled`).

An operation whose calls must finish (``whole``: a lease taken or given back, a batch) holds
a Ctrl-C back while its calls are out on a store outside the process, in the main thread
while SIGINT has Python's own handler: the interrupt cut the reply's read, and a lease the
store took was known to nobody (held until it lapsed). Not on a ``MemoryBackend``: its calls
take microseconds in the process a Ctrl-C usually ends, and holding one back costs more than
such a call (two ``signal.signal`` calls). Once the calls are answered, :func:`unwind` gives
back what they took, and the interrupt is raised, as the async guard does with a
cancellation. A second Ctrl-C meanwhile is raised at once (what the calls did is then not
known).
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any, TypeVar

from freqguard.backends.memory import MemoryBackend
from freqguard.clock import Clock
from freqguard.engine.ops import Interrupted, Op, unwinding
from freqguard.script.calls import Reply, ScriptCall

__all__ = ["Cancelled", "send", "sleep", "unwind"]

T = TypeVar("T")
_log = logging.getLogger("freqguard")

Cancelled = KeyboardInterrupt
_MAIN = threading.main_thread()


def sleep(clock: Clock, seconds: float) -> None:
    clock.sleep(seconds)


def send(backend: Any, calls: list[ScriptCall], whole: bool) -> list[Reply]:
    """``backend.execute_many(calls)``; with ``whole``, a Ctrl-C held back until they are
    answered, then an :class:`_Interrupted` with the replies (or, when the calls failed
    too, the interrupt: what they did is not known)."""
    if not whole or isinstance(backend, MemoryBackend) or threading.current_thread() is not _MAIN:
        return backend.execute_many(calls)  # type: ignore[no-any-return]
    came: list[int] = []

    def note(signum: int, frame: object) -> None:  # a first Ctrl-C noted, a second raised
        if came:
            raise KeyboardInterrupt
        came.append(signum)

    # one swap each way (signal.getsignal costs as much): where SIGINT had a handler of the
    # program's own, it is put back at once and left to it
    previous = signal.signal(signal.SIGINT, note)
    try:
        if previous is not signal.default_int_handler:
            signal.signal(signal.SIGINT, previous)
            return backend.execute_many(calls)  # type: ignore[no-any-return]
        try:
            replies: list[Reply] = backend.execute_many(calls)
        except Exception:
            if not came:
                raise
            raise KeyboardInterrupt from None
    finally:
        if previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous)
    if came:
        raise _Interrupted(backend, calls, replies)
    return replies


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
        return send(backend, calls, True)
    except _Interrupted as again:
        return again.replies


class _Interrupted(Interrupted, KeyboardInterrupt):
    """A Ctrl-C that came while ``calls`` were out on ``backend``, which answered them after
    it: ``replies``."""
