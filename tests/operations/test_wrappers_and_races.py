"""What a cap decorates is taken as what it is, and threads sharing a guard do not race its
registration or its close: ``@capped`` over wrappers (an ``async def`` running a sync
function in a thread, a sync function running an ``async def`` to its end, one handing
back the generator it was given), two threads registering one name, a close while
another thread registers. Each an adversarial review's finding of the day's changes,
written failing first, deterministic (threads paused at the racing point by trace
functions and events, time pinned by a ManualClock)."""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TypeVar

from freqguard import (
    AsyncGuard,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
    capped,
)

START = 1_700_000_000.0
T = TypeVar("T")


# -- 1. @capped decides sync or async on the function unwrapped, not on what it decorates ---


def _in_thread(function: Callable[..., T]) -> Callable[..., Any]:
    """asyncer's ``asyncify``, aiofiles' ``wrap``: an ``async def`` that runs a sync
    function in a worker thread, saying what it wraps (``functools.wraps``)."""

    @functools.wraps(function)
    async def wrapper(*args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(function, *args, **kwargs)

    return wrapper


def _run_to_end(function: Callable[..., Any]) -> Callable[..., Any]:
    """The reverse: a sync function that runs an ``async def`` to its end
    (``asyncio.run``), saying what it wraps."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(function(*args, **kwargs))

    return wrapper


def test_capped_over_an_async_wrapper_of_a_sync_function_is_still_async() -> None:
    """``@capped`` chose sync or async by ``inspect.iscoroutinefunction`` of what it
    decorates; it now asks of ``inspect.unwrap(func)``, the innermost function. An
    ``async def`` wrapper that runs a sync function in a thread (asyncer's ``asyncify``,
    aiofiles' wrappers: ``functools.wraps`` on an ``async def``) unwraps to the sync
    function, so the cap wraps it as a sync function: each call asks the sync guard, at
    the call, on the event loop's thread. On an AsyncGuard that is refused at every call
    (got: ConfigError "a sync function needs a Guard"); on a sync Guard the loop blocks on
    the store (and ``on_exceeded='skip'`` hands ``await`` a None). No leases involved: a
    plain rate, working yesterday. Expected: the call runs, one unit counted."""
    guard = AsyncGuard(policies=[Policy("api", Rule("5/minute"))], clock=ManualClock(START))

    @capped("api", guard=guard)
    @_in_thread
    def work() -> int:
        return 1

    async def main() -> tuple[int, int]:
        ran = await work()
        return ran, (await guard.peek("api")).remaining

    assert asyncio.run(main()) == (1, 4)  # got ConfigError: a sync function needs a Guard


def test_capped_over_a_sync_wrapper_of_an_async_def_is_still_sync() -> None:
    """The reverse: a sync function that runs an ``async def`` to its end (a script's
    ``asyncio.run`` wrapper, with ``functools.wraps``) unwraps to the ``async def``, so
    the cap wraps it in an ``async def``: a call from sync code returns a coroutine that
    nobody awaits, the body never runs and nothing is counted (a RuntimeWarning at
    best). No leases involved. Expected: the call runs, one unit counted."""
    guard = Guard(policies=[Policy("api", Rule("5/minute"))], clock=ManualClock(START))

    @capped("api", guard=guard)
    @_run_to_end
    async def work() -> int:
        await asyncio.sleep(0)
        return 1

    ran = work()
    if asyncio.iscoroutine(ran):  # what it returns today: close it, no warning
        ran.close()
    assert ran == 1  # got <coroutine object ...>: the body never ran
    assert guard.peek("api").remaining == 4


def test_a_lease_decorating_a_sync_wrapper_that_runs_an_async_def_holds_it() -> None:
    """The lease decorator's new refusal (``_sync/_io.py``'s ``unheld``) asks the same of
    ``inspect.unwrap(func)``: a sync function that runs an ``async def`` to its end
    (``functools.wraps``) is refused as "a coroutine ... that runs after it, unleased",
    though its whole body runs inside the call, so inside the lease (it did at 90231f3).
    Expected: decorated, the body run with the one lease held, the lease back after."""
    guard = Guard(
        policies=[Policy("vendor", Rule("1 concurrent", lease=60, name="cc"))],
        clock=ManualClock(START),
    )

    async def call() -> int:
        await asyncio.sleep(0)
        return guard.peek("vendor").rules[0].remaining

    held = guard.lease("vendor")(_run_to_end(call))  # got ConfigError: "a coroutine"
    assert held() == 0  # run with the lease held
    assert guard.peek("vendor").rules[0].remaining == 1


# -- 2. the registry's lock is around the add, not around compile's check and the add ------


def test_two_threads_registering_different_policies_of_one_name_refuse_one() -> None:
    """``add_policy`` refuses a different policy of a name already registered ("a
    different policy named ... is already registered"): ``@capped(..., name="shared")``
    over two functions whose rules or keys differ is told at their first calls. The
    registry now changes under a lock, but only :meth:`PolicyRegistry.add` holds it;
    :meth:`PolicyRegistry.compile` checks the name unlocked, and ``register`` adds after
    (``failover.add`` between). Two threads registering at once (two ``@capped`` caps of
    one name, each registered by its first call, in a server's threadpool) both pass the
    check, and the later add silently replaces the first policy: both ``add_policy``
    calls succeed, and the first thread's callers count by rules that are not theirs.
    The first thread is held (by a trace function) as its ``compile`` returns, until the
    second's ``add_policy`` is done. Expected: one of the two refused."""
    guard = Guard(clock=ManualClock(START))
    registry = guard._policies  # its lock, told when the second thread waits on it
    paused, second_waits = threading.Event(), threading.Event()
    outcomes: list[str] = []

    class Told:
        def __init__(self, lock: Any) -> None:
            self.lock = lock

        def __enter__(self) -> Any:
            if threading.current_thread().name == "second":
                second_waits.set()  # about to wait for the first's change to end
            return self.lock.__enter__()

        def __exit__(self, *exc: object) -> Any:
            return self.lock.__exit__(*exc)

    registry._changing = Told(registry._changing)  # type: ignore[assignment]

    def on_return(frame: FrameType, event: str, arg: object) -> Any:
        if event == "return":
            paused.set()  # checked and compiled, not yet added
            second_waits.wait(30)  # the second is at the lock: locked, it waits there
        return on_return

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        code = frame.f_code
        if event == "call" and code.co_name == "compile" and "registry" in code.co_filename:
            return on_return
        return None

    def register(policy: Policy) -> None:
        try:
            guard.add_policy(policy)
            outcomes.append("added")
        except ConfigError:
            outcomes.append("refused")

    def first() -> None:
        sys.settrace(tracer)
        try:
            register(Policy("shared", Rule("5/minute")))
        finally:
            sys.settrace(None)
            paused.set()

    one = threading.Thread(target=first)
    one.start()
    assert paused.wait(30)
    two = threading.Thread(target=register, args=(Policy("shared", Rule("10/minute")),))
    two.name = "second"  # the other cap's first call
    two.start()
    one.join(30)
    two.join(30)
    assert sorted(outcomes) == ["added", "refused"]  # got ['added', 'added']


# -- 3. ran() closes whatever generator a leased call returns, its own or its caller's -----


def test_a_leased_call_that_returns_a_generator_returns_it_as_it_is() -> None:
    """A leased call that hands back a generator (one it was given; a wrapper's) does its
    own work under the lease and returns the generator as it is, the lease back: refusing
    it closed a caller's own (a review), and holding it under a lease of its own had a
    service over a capped repository deny itself (another). A generator function is
    capped itself to be held while it runs (docs/strategies/concurrency.md)."""
    guard = Guard(
        policies=[Policy("vendor", Rule("1 concurrent", lease=60, name="cc"))],
        clock=ManualClock(START),
    )
    checked: list[int] = []

    @capped("vendor", guard=guard)
    def route(rows: Iterator[int]) -> Iterator[int]:
        checked.append(guard.peek("vendor").rules[0].remaining)  # the call's work, leased
        return rows

    source = (n for n in range(3))
    assert route(source) is source
    assert list(source) == [0, 1, 2]
    assert checked == [0]
    assert guard.peek("vendor").rules[0].remaining == 1


# -- 4. the failover's dicts still change in place under a reader -------------------------


class _Recording(MemoryBackend):
    """A fallback backend that says whether it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_guard_closes_its_fallback_while_another_thread_registers_a_policy() -> None:
    """Design note 100: "any dict a reader holds is never changed". The registry's are
    copy on write now, but the failover's per-policy ``on_error`` (``Failover._given``,
    and ``_before``) still change in place as a policy is registered
    (``Failover.add``), and ``Failover.backends`` iterates them as the guard closes (its
    store, then every fallback). A policy registered by another thread meanwhile (a
    threadpool's first call of a ``@capped`` function, a configuration watcher) as the
    app shuts down: "dictionary changed size during iteration" out of ``close()``, the
    store closed and the fallback left open. The closing thread is held (by a trace
    function) as it begins iterating the policies' ``on_error``, until the other
    thread's ``add_policy`` is done. Expected: closed, the fallback too."""
    fallback = _Recording()
    guard = Guard(
        MemoryBackend(),
        [Policy("api", Rule("5/minute"))],
        clock=ManualClock(START),
        on_error=fallback,
    )
    paused, registered = threading.Event(), threading.Event()
    outcome: list[object] = []

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        code, up = frame.f_code, frame.f_back
        in_backends = up is not None and up.f_code.co_name == "backends"
        if event == "call" and code.co_name == "<genexpr>" and in_backends:
            paused.set()  # the policies' iterator made, not yet read
            registered.wait(5)  # at once, today; a fix that snapshots goes on
        return None

    def close() -> None:
        sys.settrace(tracer)
        try:
            guard.close()
            outcome.append("closed")
        except Exception as exc:  # what close raised is the finding
            outcome.append(exc)
        finally:
            sys.settrace(None)
            paused.set()  # no such iteration (a fix): nothing to wait for

    closing = threading.Thread(target=close)
    closing.start()
    assert paused.wait(30)
    guard.add_policy(Policy("late", Rule("10/minute")))  # another thread's first call
    registered.set()
    closing.join(30)
    assert outcome == ["closed"]  # got [RuntimeError('dictionary changed size ...')]
    assert fallback.closed  # got False: left open


def test_capped_over_a_classmethod_or_a_staticmethod() -> None:
    """``@capped`` over ``@classmethod`` raised ``TypeError: <classmethod ...> is not a
    callable object`` as it was decorated (its key's check read the descriptor's
    signature; a review's note): the function a call runs is the descriptor's, sync or
    async, bound as wrapt binds it, the class not a dimension."""
    guard = Guard(policies=[Policy("p", Rule("1/minute", by="user"))], clock=ManualClock(START))
    aguard = AsyncGuard(
        policies=[Policy("p", Rule("1/minute", by="user"))], clock=ManualClock(START)
    )

    class Sender:
        @capped("p", key="user", guard=guard, on_exceeded="skip")
        @classmethod
        def send(cls, user: str) -> str:
            return f"{cls.__name__} to {user}"

        @capped("p", key="user", guard=aguard, on_exceeded="skip")
        @classmethod
        async def asend(cls, user: str) -> str:
            return f"{cls.__name__} to {user}"

        @capped("p", key="user", guard=guard, on_exceeded="skip")
        @staticmethod
        def ping(user: str) -> str:
            return f"ping {user}"

    assert [Sender.send("a"), Sender().send("a"), Sender.send("b")] == [
        "Sender to a",
        None,
        "Sender to b",
    ]
    assert [Sender.ping("c"), Sender().ping("c")] == ["ping c", None]

    async def main() -> list[str | None]:
        return [await Sender.asend("a"), await Sender().asend("a")]

    assert asyncio.run(main()) == ["Sender to a", None]
