"""What a backend is: one narrow operation, "run the policy script with these keys".

A backend holds no semantics. The strategies (``freqguard.script.strategies``, and their Lua twins)
own all of it; a backend only runs the script where the state lives: in-process for
:class:`~freqguard.MemoryBackend`, inside Redis for the Redis backends. Sync and async methods
have different names (``execute`` / ``aexecute``) so one object can serve both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Protocol, TypeVar, runtime_checkable

from freqguard.clock import Clock
from freqguard.script.calls import Reply, ScriptCall

__all__ = ["FINISHING", "AsyncBackend", "Reply", "ScriptCall", "SyncBackend", "answered"]

T = TypeVar("T")

#: Set (in the task that sends them) for calls the async guard lets finish, whatever
#: cancels them: a lease taken or given back, a batch. An async backend waits for such a
#: call's reply through a cancellation of the task that waits, so that the guard learns
#: what the call did and gives back what it took; ``asyncio.run`` cancels every task left
#: at once as it ends, the guard's own among them.
FINISHING: ContextVar[bool] = ContextVar("freqguard_finishing", default=False)


async def answered(future: asyncio.Future[T]) -> T:
    """``future``'s result (the replies to calls sent); under :data:`FINISHING` waited for
    through every cancellation of the task that waits: the calls are out, and the guard
    must learn what they did. A future cancelled itself (its sender gone) is raised."""
    if not FINISHING.get():
        return await future
    while True:
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.cancelled():
                raise


@runtime_checkable
class SyncBackend(Protocol):
    clock: Clock  # what waits (acquire) sleep on when the Guard has no clock of its own

    def execute(self, call: ScriptCall) -> Reply: ...

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        """Run calls in order; calls on the same key see each other's effects."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class AsyncBackend(Protocol):
    clock: Clock

    async def aexecute(self, call: ScriptCall) -> Reply: ...

    async def aexecute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]: ...

    async def aclose(self) -> None: ...
