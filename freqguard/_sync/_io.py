"""The sync counterpart of ``freqguard/_async/_io.py``, written by hand: a thread is not
cancelled part way, but the main thread is interrupted (Ctrl-C: ``KeyboardInterrupt``, this
side's :data:`Cancelled`).

A lease taken or given back holds a Ctrl-C back (:class:`holding`) from before its calls go
out until the guard knows what they did, in the main thread while SIGINT has a handler in
Python (SIGTERM's, SIGQUIT's, SIGABRT's and SIGHUP's, a program's own, are held back
alike: design note 97), on any store: an interrupt that cut the reply's read, or landed
between the store's answer and the decision in the caller's hands, left a lease the store
took known to nobody (held until it lapsed). At the hold's end the interrupt is raised:
the guard gives the lease back first, as the async guard does on a cancellation. A second
Ctrl-C meanwhile is raised at once (what the calls did is then not known). Nothing is held
back elsewhere: a call of a hit or a batch a Ctrl-C cuts counts or not, as a cancelled one
may (the strict side), and a hold costs a ``getsignal`` for each of :data:`_HELD` and
two calls to ``signal`` for each it holds (7 to 25 µs a held signal, by the machine's
load: its wrappers turn handlers into enums through exceptions). A Ctrl-C anywhere in an
operation of several steps (a hit over several parts, a batch, ``acquire``) unwinds it as
a cancellation does the async guard's: what its earlier steps took goes back. A
``MemoryBackend``'s call is held too, for a lease (a Ctrl-C after its write, before its
answer, left the lease held: design note 95); any of its calls a Ctrl-C cuts is made whole
or not at all (``script.twin.run`` puts back what it found).
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import itertools
import logging
import signal
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from freqguard.clock import Clock
from freqguard.decision import Decision
from freqguard.engine.ops import Op, Sleep, own_line, to_wake, turn_key, unwinding
from freqguard.script.calls import Reply, ScriptCall

__all__ = ["Cancelled", "Interrupt", "Turns", "holding", "send", "sleep", "unheld", "unwind"]

T = TypeVar("T")
_log = logging.getLogger("freqguard")

Cancelled = KeyboardInterrupt
#: What ends a lease's take or give-back part way and has it given back: a Ctrl-C, or the
#: ``SystemExit`` of a program's handler of SIGTERM (a deploy stopping a worker) or another
#: of :data:`_HELD`.
Interrupt = (KeyboardInterrupt, SystemExit)
_MAIN = threading.main_thread()


def unheld(func: object) -> str | None:
    """What a call of ``func`` only makes, to run after the call (a generator; a coroutine,
    an ``async def``'s), which a lease taken around the call would not hold while it runs;
    None when the call runs the body. Told of ``func`` itself: a wrapper may consume what
    it wraps (``contextlib.contextmanager``'s, ``asyncio.run``'s, asgiref's
    ``async_to_sync``)."""
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        return "a generator"
    if inspect.iscoroutinefunction(func):
        return "a coroutine (an async def: its lease is as_async(guard).lease(...)'s)"
    return None


def sleep(clock: Clock, step: Sleep) -> None:
    """A step's wait: in an ``acquire``, by its place in the process's line (see
    :class:`Turns`); else the clock's sleep."""
    place = _PLACE.get()
    if place is None:
        clock.sleep(step.seconds)
    else:
        place.wait(clock, step)


class Turns:
    """The async side's :class:`~freqguard._async._io.Turns` for threads: the callers of
    one guard's ``acquire`` on one policy and context that the store has denied, in line."""

    def __init__(self) -> None:
        self._queues: dict[Any, deque[_Turn]] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def place(self, policy: str, texts: Mapping[str, str], cost: int = 1) -> Iterator[_Place]:
        """An ``acquire``'s place (``cost``: its units), taken when the store first denies
        it, and left as the block ends, however."""
        outer, thread = _PLACE.get(), threading.get_ident()
        if outer is not None and outer.thread != thread:  # a thread started in an acquire
            outer = None  # in a copy of its context: that acquire is not its caller's
        place = _Place(self, turn_key(policy, texts), outer, thread, cost)
        token = _PLACE.set(place)
        try:
            yield place
        finally:
            try:
                place.leave()
            except BaseException:  # a Ctrl-C (a SIGTERM's exit) part way: it finishes
                place.leave()
                raise
            finally:
                _PLACE.reset(token)


class _Turn(threading.Event):
    """A caller's turn in a line, set when it is first; ``cost``, the units it asks."""

    def __init__(self, cost: int) -> None:
        super().__init__()
        self.cost = cost


class _Place:
    """One ``acquire``'s place in a line: ``mine``, its turn, set when it is first;
    ``outer``, the place of the acquire the same ``thread`` runs it in, if any."""

    __slots__ = ("_turns", "cost", "free", "key", "mine", "outer", "thread")

    def __init__(
        self, turns: Turns, key: Any, outer: _Place | None, thread: int, cost: int = 1
    ) -> None:
        self._turns, self.key, self.outer, self.cost = turns, key, outer, cost
        self.thread = thread  # the thread it waits in: an outer place must be its own
        self.mine: _Turn | None = None
        self.free = 0  # the units its admission left: that many more are woken with the next

    def took(self, decision: Decision) -> Decision:
        """``decision``, the acquire's; as it leaves, the next in line is woken and as many
        after it as the units the decision left hold, by each one's cost, and one more (the
        async side's :meth:`~freqguard._async._io._Place.took`)."""
        self.free = decision.remaining if decision.allowed else 0
        return decision

    def wait(self, clock: Clock, step: Sleep) -> None:
        """The first in line sleeps the step's seconds; any other waits for its turn (then
        asks at once), at most to its deadline."""
        if self.mine is None:
            if own_line(self):
                clock.sleep(step.seconds)
                return
            self.mine = _Turn(self.cost)  # first: a Ctrl-C after it leaves no place behind
            with self._turns._lock:
                queue = self._turns._queues.setdefault(self.key, deque())
                queue.append(self.mine)
                if len(queue) == 1:
                    self.mine.set()
        if self.mine.is_set():
            clock.sleep(step.seconds)
            return
        left = None if step.until is None else max(0.0, step.until - clock.now())
        # past TIMEOUT_MAX (292 years) Event.wait raises OverflowError: as good as None
        self.mine.wait(None if left is None or left > threading.TIMEOUT_MAX else left)

    def leave(self) -> None:
        """Out of the line (if in it); the next one's turn, if this one was first. Run
        again after a Ctrl-C part way, it finishes: the next's turn is given before this
        place is taken out, and ``mine`` forgotten last (review: a Ctrl-C after ``mine``
        was forgotten left its event first in line, the followers waiting for ever)."""
        mine = self.mine
        if mine is None:
            return
        turns = self._turns
        with turns._lock:
            queue = turns._queues.get(self.key)
            if queue is not None and mine in queue:
                if queue[0] is mine:
                    for waiter in to_wake(itertools.islice(queue, 1, None), self.free):
                        waiter.set()
                queue.remove(mine)
            if queue is not None and not queue:
                del turns._queues[self.key]
        self.mine = None


#: The line place of the ``acquire`` the running thread is in, read by :func:`sleep`.
_PLACE: contextvars.ContextVar[_Place | None] = contextvars.ContextVar(
    "freqguard_turn", default=None
)


def send(backend: Any, calls: list[ScriptCall], whole: bool) -> list[Reply]:
    """``backend.execute_many(calls)`` (``whole`` is the async side's: a thread's Ctrl-C is
    held back by :class:`holding`, around the whole of what a lease does)."""
    return backend.execute_many(calls)  # type: ignore[no-any-return]


class holding:
    """A Ctrl-C held back in the block, on a store outside the process, in the main thread
    while SIGINT has Python's own handler; so too a signal whose handler is the program's
    own, in Python (SIGTERM's that calls ``sys.exit`` as a deploy stops a worker, SIGINT's),
    run as the block ends. A handler set outside Python is left to it. A Ctrl-C is raised
    as the block ends (``raising``), after it, or at once when the same stop signal comes
    again (:data:`_ESCAPE`: a program's handlers then run at once; a SIGHUP never).
    ``entered``: the hold is in force (or none was needed), so what the block claims is
    the block's to give back. Blocks nest: an inner one finds the outer's handlers and
    holds nothing itself."""

    def __init__(self, backend: Any, raising: bool = True) -> None:
        self.came: list[int] = []
        self.entered, self._raising, self._restoring = False, raising, False
        self._backend, self._previous = backend, _NONE  # put back once, then emptied
        self._handlers = _NONE  # those held, kept: each signal that came runs its own

    def __enter__(self) -> holding:
        previous = _holdable()
        if previous:
            self._previous = self._handlers = previous  # first: an exception as one is
            done: dict[int, Any] = {}  # set puts them back
            try:
                for signum, handler in previous.items():
                    signal.signal(signum, self._note)
                    done[signum] = handler
            except (TypeError, ValueError):  # not this interpreter's to set: as they are
                _put_back(done)
                self._previous = self._handlers = _NONE
            except BaseException:  # another signal's handler raised as it was set
                _put_back(previous)
                raise
        self.entered = True
        return self

    def _note(self, signum: int, frame: object) -> None:
        if signum in self.came and signum in _ESCAPE and not self._restoring:  # a stop again:
            came, self.came = [*self.came, signum], []  # each that came at once, put back first
            self.restore()  # (it may land where __exit__ never runs)
            if self._run(came, frame):
                raise KeyboardInterrupt
            return
        self.came.append(signum)

    def _run(self, came: list[int], frame: object) -> bool:
        """Run the program's own handler of each signal in ``came``, in order, every one
        though one raises (its exception raised once they ran: a ``sys.exit`` on SIGTERM
        lost a SIGINT's handler after it); whether a Ctrl-C to Python's own handler is
        among them (raised by the caller, once)."""
        interrupted, raised = False, None
        for signum in came:
            handler = self._handlers.get(signum)
            if handler is signal.default_int_handler or not callable(handler):
                interrupted = True
                continue
            try:
                handler(signum, frame)  # as if it came now
            except BaseException as exc:
                raised = raised or exc
        if raised is not None:
            raise raised
        return interrupted

    def restore(self) -> BaseException | None:
        """Put the handlers back, once (``__exit__`` does; a caller's ``finally`` too, for
        a signal that lands as ``__exit__`` begins, before its first line: review found
        the noting handler left for good, and every later hold off); what another
        signal's handler raised meanwhile, if anything."""
        previous = self._previous
        if not previous:
            return None
        self._restoring = True  # a signal as they are put back (signal runs it first): noted
        other = _put_back(previous)
        self._previous = _NONE  # once put back (a signal as _put_back begins: tried again)
        return other

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        other = self.restore()
        came, self.came = self.came, []
        raised = kind is not None and issubclass(kind, KeyboardInterrupt)
        if self._run(came, None) and self._raising and not raised:  # after a failure too:
            raise KeyboardInterrupt from None  # what it did is not known
        if other is not None:
            raise other


_NONE: dict[int, Any] = {}  # no handler held
#: The signals that, sent a second time meanwhile, run every handler that came at once (a
#: second Ctrl-C: the store hangs); never a reload's SIGHUP, however often it comes.
_ESCAPE = frozenset(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGQUIT", "SIGABRT")
    if hasattr(signal, name)
)
#: The signals whose handlers a hold holds back: Ctrl-C, the one a deploy stops with, and
#: those a server's worker exits on (gunicorn's: SIGQUIT, a quick shutdown; SIGABRT, past
#: its timeout; a daemon's SIGHUP), and Celery's soft time limit (SIGUSR1, whose handler
#: raises ``SoftTimeLimitExceeded`` wherever the task is), where the platform has them.
_HELD = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGQUIT", "SIGABRT", "SIGHUP", "SIGUSR1")
    if hasattr(signal, name)
)


def _put_back(handlers: dict[int, Any]) -> BaseException | None:
    """Each signal's handler set back, through what another signal's handler raises as it
    is set (``signal.signal`` runs pending handlers first, and its Python wrapper checks
    for signals after setting it: review found the noting handler left in place for
    good); the first such exception, for the caller to raise once they are set."""
    other: BaseException | None = None
    for signum, handler in handlers.items():
        for _ in range(8):  # each raise is a signal that came: they end
            try:
                signal.signal(signum, handler)
                break
            except BaseException as exc:
                other = other or exc
        else:
            signal.signal(signum, handler)  # as a last try, whatever it raises
    return other


def _holdable() -> dict[int, Any]:
    """The handlers a hold holds back, by signal: in the main thread, each of :data:`_HELD`
    whose handler is Python's own Ctrl-C or the program's own in Python, and no hold's
    (an outer hold is in force); else none."""
    if threading.current_thread() is not _MAIN:
        return _NONE
    found: dict[int, Any] = {}
    for signum in _HELD:
        handler = signal.getsignal(signum)
        if callable(handler) and not isinstance(getattr(handler, "__self__", None), holding):
            found[signum] = handler
    return found


def unwind(op: Op[T], cancelled: BaseException, backend: Any) -> BaseException:
    """The caller was interrupted: what the operation took before (``op`` gives it back when
    the interrupt is thrown into it) goes back to the store, each call let finish (a further
    Ctrl-C held back). Returns the interrupt to raise."""
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
    return cancelled


def _finish(backend: Any, calls: list[ScriptCall]) -> list[Reply]:
    """``calls`` sent and answered, a Ctrl-C held back meanwhile (the one being unwound is
    raised after)."""
    hold = holding(backend, raising=False)
    try:
        with hold:
            return send(backend, calls, True)
    finally:
        hold.restore()
