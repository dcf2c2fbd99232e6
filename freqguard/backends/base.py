"""What a backend is: one narrow operation, "run the policy script with these keys".

A backend holds no semantics. The strategies (``freqguard.script.strategies``, and their Lua twins)
own all of it; a backend only runs the script where the state lives: in-process for
:class:`~freqguard.MemoryBackend`, inside Redis for the Redis backends. Sync and async methods
have different names (``execute`` / ``aexecute``) so one object can serve both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from freqguard.clock import Clock
from freqguard.script.calls import Reply, ScriptCall

__all__ = ["AsyncBackend", "Reply", "ScriptCall", "SyncBackend"]


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
