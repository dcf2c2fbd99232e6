"""How ``@capped`` takes a generator function: its call is decided at the generator's first
step (one never iterated takes nothing), and a lease it holds is given back when the
generator ends, raises or is closed (a streamed answer is in flight until then)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from typing import Any

from freqguard.decision import Decision
from freqguard.guard import Guard

__all__ = ["async_held", "held"]


def held(
    guard: Guard,
    name: str,
    cost: int,
    ctx: dict[str, object],
    exceeded: Callable[[Decision], Any],
    make: Callable[[], Generator[Any, Any, Any]],
) -> Generator[Any, Any, Any]:
    """The generator ``make`` makes, holding a lease of policy ``name`` from its first step to
    its end; denied, it ends at once with what ``exceeded`` returns (or raises)."""
    with guard.lease(name, cost, **ctx) as lease:
        if not lease.allowed:
            return exceeded(lease)
        return (yield from make())


async def async_held(
    decide: Callable[[contextlib.AsyncExitStack[Any]], Awaitable[Decision]],
    exceeded: Callable[[Decision], Any],
    make: Callable[[], AsyncGenerator[Any, Any]],
) -> AsyncGenerator[Any, Any]:
    """The async generator ``make`` makes, decided at its first step by ``decide`` (which may
    enter a lease on the stack it is given, held until the generator ends); denied, it ends
    at once (``exceeded`` told) or raises. What is sent or thrown in goes on to it. Its
    body is closed by it alone, before the lease goes back (see :func:`_first_step`), and
    the loop's end waits for that (see :class:`_Ending`)."""
    async with contextlib.AsyncExitStack() as stack:
        ending = _Ending()
        await ending.watch(stack)
        decision = await decide(stack)
        if not decision.allowed:
            exceeded(decision)
            return
        inner = make()
        stack.push_async_callback(inner.aclose)
        stack.callback(ending.begin)  # the first of the wrapper's close
        step = _first_step(inner)
        while True:
            try:
                item = await step
            except StopAsyncIteration:
                return
            try:
                sent = yield item
            except GeneratorExit:
                raise
            except BaseException as exc:
                step = inner.athrow(exc)
            else:
                step = inner.asend(sent)


def _first_step(inner: AsyncGenerator[Any, Any]) -> Any:
    """``inner``'s first step, made without the event loop's first-iteration hook: the loop
    closes at its end every async generator that hook told it of, at once, and closed the
    body and its wrapper together: one close failed ("already running", reported as an
    error), and the lease could go back while the body's ``finally`` still ran. The
    finalizer stays: a body its wrapper never closed is still closed when collected."""
    firstiter, finalizer = sys.get_asyncgen_hooks()
    sys.set_asyncgen_hooks(None, finalizer)
    try:
        return inner.asend(None)
    finally:
        sys.set_asyncgen_hooks(firstiter, finalizer)


class _Ending:
    """What has the loop's end wait for a capped generator's close: a generator the loop
    knows (its first step made with the hooks), which that end closes, and whose close
    waits while the wrapper's runs (the loop's end, ``shutdown_asyncgens``, waits for the
    generators it closes, not for the close a collected one's finalizer starts: a stream
    its task left open as the task was cancelled, whose lease was given back only if the
    loop still turned)."""

    def __init__(self) -> None:
        self.begun = False  # the wrapper's close has begun: its body, then its lease
        self.done = asyncio.Event()  # ... and has ended

    async def watch(self, stack: contextlib.AsyncExitStack[Any]) -> None:
        """Keep a watcher open until the wrapper's close has ended (pushed on ``stack``
        first, it is closed last: after the body and the lease)."""
        watcher = self._watcher()
        await watcher.asend(None)
        stack.push_async_callback(_close_idle, watcher)
        stack.callback(self.done.set)

    def begin(self) -> None:
        """The wrapper's close has begun."""
        self.begun = True

    async def _watcher(self) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            if not self.done.is_set():  # closed with the wrapper, at the loop's end
                await asyncio.sleep(0)  # the loop's closes begun alike, the wrapper's too
                if self.begun:
                    await self.done.wait()


async def _close_idle(generator: AsyncGenerator[Any, Any]) -> None:
    """Close ``generator`` unless its close is running already (the loop's, at its end)."""
    if not getattr(generator, "ag_running", False):
        await generator.aclose()
