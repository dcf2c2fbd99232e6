"""Leases at the edges of the guard: decorators of functions whose call only makes what runs
later (a generator, a coroutine), threads sharing one guard (a receipt read first by two at
once, a deploy while a release looks for its plan, a policy registered while the ASGI
middleware holds a request's lease) and the default guard's two faces. Each test an
adversarial review's finding, written failing first, without sleeps (threads are paused at
the racing point by events and trace functions), on a MemoryBackend on a pinned clock (the
last on the suite's own redis-server). A lease goes back exactly once, whatever ends the
call; counts are checked against what is in flight."""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from freqguard import ConfigError, Guard, ManualClock, Policy, Rule, capped, configure
from freqguard.decorators import defaults
from freqguard.engine.plan import PolicyPlan
from freqguard.integrations.asgi import FreqGuardMiddleware, Limit
from tests.conftest import flush
from tests.servers import RedisServer

START = 1_700_000_000.0
ONE = Policy("vendor", Rule("1 concurrent", lease=60, name="cc"))
_TWO = Policy("two", Rule("2 concurrent", lease=60, name="cc"))


# -- 1. guard.lease(...) as a decorator of a lazy function ----------------------------------


def _generator(guard: Guard) -> Callable[[], Iterator[int]]:
    def stream() -> Iterator[int]:  # a streamed answer: in flight while it is iterated
        yield guard.peek("vendor").remaining

    return stream


def _coroutine(guard: Guard) -> Callable[[], Any]:
    async def call() -> int:  # an async def decorated with a sync guard's lease
        await asyncio.sleep(0)
        return guard.peek("vendor").remaining

    return call


@pytest.mark.parametrize("make", [_generator, _coroutine], ids=["generator", "async-def"])
def test_a_lease_that_decorates_a_lazy_function_is_held_while_its_body_runs(
    make: Callable[[Guard], Callable[[], Any]],
) -> None:
    """``guard.lease(...)`` decorates ("a lease for each call", docs/strategies/
    concurrency.md), as contextlib's context managers do: the block is around the call.
    A generator function's call (a streamed answer, the concurrency page's own example of
    a call in flight) and an ``async def``'s under a sync guard only make the generator or
    the coroutine: the lease is taken and given back before the body runs, so every
    stream runs with no lease held and a "1 concurrent" rule caps nothing (got: 1 lease
    free inside the body, any number of bodies at once). ``@capped`` holds the lease over
    a generator's iteration; this decorator should too, or refuse such a function."""
    guard = Guard(policies=[ONE], clock=ManualClock(START))
    function = make(guard)
    with pytest.raises(ConfigError, match=r"runs after it, unleased: cap it with @capped"):
        guard.lease("vendor")(function)  # refused as it is decorated: none runs unleased


def _traced(function: Callable[..., Any]) -> Callable[..., Any]:
    """A plain decorator (tracing, logging, retries) between @capped and the function."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    return wrapper


# -- 2. threads sharing one guard: a receipt built twice, the registry read unlocked ---------


def test_two_threads_refunding_one_lease_give_it_back_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``refund(decision)`` gives back "only once": two refunds of one decision at once
    are meant to let one through (``engine/refunds.py``'s ``_CLAIM`` lock around the
    receipt's ``spent``), e.g. a watchdog thread giving a stuck call's lease back as the
    call's own thread ends. But a decision's receipt is built lazily, on its first read
    (``Decision.receipt``: read, build, store, unlocked), and a lease's decision is handed
    out unread (``take_lease``, ``with guard.lease(...) as d``). Two threads reading it
    first at once each build a Receipt of their own, each unspent, and each claims its
    own: both refunds go through. Here the first thread is held (deterministically, by
    a wrapper around the plan's receipt builder) after building its receipt until the
    second's refund is done.

    Counted: two leases of "2 concurrent" (one µs, the pinned clock) and two units of a
    fixed window; one refund. Expected: one refund refused ("already refunded"), one lease
    held (the other caller's), 9 of 10 units left. Got: both refunds went through, the
    other caller's lease freed too (two more admitted: three in flight), and 10 units
    left (one hit counted by no one)."""
    policy = Policy(
        "llm",
        Rule("2 concurrent", lease=60, name="cc"),
        Rule("10/minute", strategy="fixed-window", name="rate"),
    )
    guard = Guard(policies=[policy], clock=ManualClock(START))
    built, other_done = threading.Event(), threading.Event()
    original = PolicyPlan._receipt

    def receipt(self: PolicyPlan, *args: Any) -> Any:
        made = original(self, *args)
        if threading.current_thread().name == "watchdog":
            built.set()  # built, not yet stored on the decision
            # until the other refund is done (at once, today); a fix that builds the
            # receipt under a lock has that refund wait for this one: then it goes on
            other_done.wait(5)
        return made

    monkeypatch.setattr(PolicyPlan, "_receipt", receipt)
    mine = guard.take_lease("llm")
    theirs = guard.take_lease("llm")  # another caller's call in flight
    assert mine.allowed
    assert theirs.allowed
    outcomes: list[str] = []

    def refund() -> None:
        try:
            guard.refund(mine)
            outcomes.append("refunded")
        except ConfigError as exc:
            outcomes.append(str(exc))

    def watch() -> None:
        try:
            refund()
        finally:
            built.set()  # a receipt built before (a fix): no pause, nothing to wait for

    watchdog = threading.Thread(target=watch, name="watchdog")
    watchdog.start()
    assert built.wait(30)
    refund()  # the call's own thread, as the watchdog's is under way
    other_done.set()
    watchdog.join(30)
    assert outcomes.count("refunded") == 1, outcomes  # got: both went through
    rules = {state.rule.id: state.remaining for state in guard.peek("llm").rules}
    assert rules == {"cc": 1, "rate": 9}  # got {'cc': 2, 'rate': 10}


def _version(per_minute: int) -> Policy:
    return Policy(
        "llm", Rule("2 concurrent", lease=60, name="cc"), Rule(f"{per_minute}/minute", name="rate")
    )


def _run_paused(
    work: Callable[[], object], at: Callable[[FrameType], bool], go_on: threading.Event
) -> tuple[threading.Thread, threading.Event, list[object]]:
    """``work`` in a thread of its own, held (a trace function) at the first call of a
    frame ``at`` picks until ``go_on`` is set (at once, once the race is fixed, where no
    such frame comes: the returned event is set as the work ends); what it came to
    (``"done"``, or what it raised) in the list."""
    paused, outcome = threading.Event(), list[object]()

    def tracer(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and at(frame):
            paused.set()
            go_on.wait(5)

    def run() -> None:
        sys.settrace(tracer)
        try:
            work()
            outcome.append("done")
        except Exception as exc:  # what the work raised is the finding
            outcome.append(exc)
        finally:
            sys.settrace(None)
            paused.set()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, paused, outcome


def test_a_release_after_a_deploy_holds_while_another_thread_deploys() -> None:
    """A lease taken before a deploy goes back by the plan it was taken under, found among
    the replaced plans the registry keeps (``PolicyRegistry.taken_under``: a generator
    over ``reversed(self._replaced[name].values())``). A deploy in another thread (a
    configuration applied by a watcher thread, twice in a row, while calls end) adds the
    plan it replaces to that very dict (``keep``) while the release iterates it:
    ``RuntimeError: dictionary changed size during iteration`` out of ``release`` (and
    out of a lease block's end), the lease held until it lapses. The releasing thread is
    held (deterministically, by a trace function) where the iteration begins, until the
    other thread's deploy is done. Expected: released, both leases free."""
    guard = Guard(policies=[_version(100)], clock=ManualClock(START))
    lease = guard.take_lease("llm")
    guard.add_policy(_version(200), replace=True)  # the first deploy: the lease's plan kept
    deployed = threading.Event()

    def at(frame: FrameType) -> bool:  # the replaced plans' iterator made, not yet read
        code = frame.f_code
        return code.co_name == "<genexpr>" and "registry" in code.co_filename

    releasing, paused, outcome = _run_paused(lambda: guard.release(lease), at, deployed)
    assert paused.wait(30)
    guard.add_policy(_version(300), replace=True)  # the second deploy, in this thread
    deployed.set()
    releasing.join(30)
    assert outcome == ["done"]  # got [RuntimeError('dictionary changed size ...')]
    assert guard.peek("llm").rules[0].remaining == 2  # got 1: held until it lapses


def test_an_asgi_request_gives_its_lease_back_while_another_thread_registers_a_policy() -> None:
    """The same registry, read unlocked where a lease is out: the ASGI middleware, given a
    sync Guard (its async face shares the registry), takes the request's lease, then reads
    ``guard.policies`` (a dict built by iterating the registry's plans) before the ``try``
    that gives the lease back. A policy registered meanwhile by another thread (the first
    call of a sync endpoint's ``@capped("10/minute", guard=guard)`` in the server's
    threadpool registers its policy then) changes the dict's size under the iteration:
    ``RuntimeError`` out of the middleware, the request's lease held until it lapses (got:
    1 of 2 free after the request ended). The event loop's thread is held (by a trace
    function) inside that read until the other thread has registered its policy."""
    guard = Guard(policies=[_TWO], clock=ManualClock(START))

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    capped_app = FreqGuardMiddleware(
        app, guard=guard, limits=[Limit("/llm", rule=_TWO, key=lambda request: {})]
    )
    registered = threading.Event()

    def at(frame: FrameType) -> bool:  # the request's lease taken; the plans' read begun
        code, callers, up = frame.f_code, list[str](), frame.f_back
        while up is not None and len(callers) < 4:
            callers, up = [*callers, up.f_code.co_name], up.f_back
        in_registry = code.co_name == "<dictcomp>" and "registry" in code.co_filename
        return in_registry and "_leasing" in callers

    async def request() -> None:
        scope = {"type": "http", "method": "GET", "path": "/llm", "headers": []}

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Any) -> None:
            pass

        await capped_app(scope, receive, send)

    serving, paused, outcome = _run_paused(lambda: asyncio.run(request()), at, registered)
    assert paused.wait(30)
    guard.add_policy(Policy("endpoint", Rule("10/minute")))  # the threadpool's first call
    registered.set()
    serving.join(30)
    assert outcome == ["done"]  # got [RuntimeError('dictionary changed size ...')]
    assert guard.peek("two").rules[0].remaining == 2  # got 1: held until it lapses


# -- 3. the default guard's two faces on a Redis URL ----------------------------------------


def test_a_deploy_on_the_default_guard_reaches_its_async_face_on_a_redis_url(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``configure(url, policies)`` makes the default sync guard and "an async face over
    the same state" (its docstring; docs/integrations.md: configure("redis://…") "shares
    it"), which ``@capped`` uses for ``async def``. For a backend object or memory that is
    ``as_async(guard)``, whose registry is the guard's ("a policy added to either side,
    now or later, is known to the other"); for a URL it is a second, separate
    ``AsyncGuard``. A deploy through the guard ``configure`` returned (the concurrency rule
    lowered from 2 to 1, its name kept, as the concurrency page asks) reaches sync callers
    only: an ``async def`` under ``@capped`` still counts by the old limit, and runs while
    the one lease "1 concurrent" allows is held by a sync caller (got: "ran", two in
    flight). A later deploy that renames or re-strategizes the rule likewise splits the
    two faces' counts."""
    flush([redis_server])
    monkeypatch.setattr(defaults, "_current", [])  # this test's default guard, then none
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    guard = configure(url, [Policy("vendor", Rule("2 concurrent", lease=60, name="cc"))])
    guard.add_policy(Policy("vendor", Rule("1 concurrent", lease=60, name="cc")), replace=True)

    @capped("vendor", on_exceeded="skip")
    async def call() -> str:
        return "ran"

    async def main() -> str | None:
        try:
            with guard.lease("vendor") as held:  # a sync caller's call in flight
                assert held.allowed
                return await call()
        finally:
            await defaults.default_async_guard().aclose()
            guard.close()

    assert asyncio.run(main()) is None  # got "ran": two in flight under "1 concurrent"


def test_capped_waiting_on_a_lease_policy_is_refused_as_it_is_decorated() -> None:
    """``on_exceeded="wait"`` over a policy that counts leases is refused: on an explicit
    guard that has the policy, as the function is decorated (it was at its first call; a
    new user's run of docs/strategies/concurrency.md)."""
    guard = Guard(policies=[ONE], clock=ManualClock(START))
    with pytest.raises(ConfigError, match="counts leases: on_exceeded='wait'"):
        capped("vendor", guard=guard, on_exceeded="wait")(lambda: 1)
