"""How ``@capped`` takes a generator function: its call is decided at the generator's first
step (one never iterated takes nothing), and a lease it holds is given back when the
generator ends, raises or is closed (a streamed answer is in flight until then)."""

from __future__ import annotations

import contextlib
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
    at once (``exceeded`` told) or raises. What is sent or thrown in goes on to it."""
    async with contextlib.AsyncExitStack() as stack:
        decision = await decide(stack)
        if not decision.allowed:
            exceeded(decision)
            return
        inner = make()
        stack.push_async_callback(inner.aclose)
        step = inner.asend(None)
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
