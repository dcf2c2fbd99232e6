"""What a backend is: one narrow operation, "run the policy script with these keys".

A backend holds no semantics. The strategies (``freqguard.strategies``, and their Lua twins)
own all of it; a backend only runs the script where the state lives: in-process for
:class:`~freqguard.MemoryBackend`, inside Redis for the Redis backends. Sync and async methods
have different names (``execute`` / ``aexecute``) so one object can serve both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from freqguard.clock import Clock
from freqguard.script import Reply, Slot
from freqguard.strategies.base import Mark

__all__ = ["AsyncBackend", "Reply", "ScriptCall", "SyncBackend"]


class ScriptCall(NamedTuple):
    """One invocation of the policy script on one slot.

    It carries the hit's dimension values, not keys: each backend derives what it stores by
    from the slot's key layouts (memory: the key strings, :meth:`keys`; Redis: one record
    and a field per state), so neither builds the other's form.
    """

    slot: Slot
    texts: Mapping[str, str]  # the hit's dimension values, as text
    now: int | None  # µs; None: the backend's own time (Redis: server TIME)
    cost: int
    mode: int
    # REFUND only: per state, what the hit to give back left there (Reply.marks); None
    # for a state it did not consume. No marks at all: give back the newest units.
    marks: tuple[Mark | None, ...] | None = None

    def keys(self) -> tuple[str, ...]:
        """The key of each state, in the slot's order (see :mod:`freqguard.keys`)."""
        texts = self.texts
        return tuple([layout.build(texts) for layout in self.slot.layouts])


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
