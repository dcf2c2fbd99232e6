"""@capped's sync and async forms decide alike, mode by mode: functions and with-blocks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from freqguard import AsyncGuard, CapExceeded, Guard, ManualClock, MemoryBackend
from freqguard.decorators.decorator import OnExceeded, capped

START = 1_700_000_000.0
MODES: list[OnExceeded] = ["raise", "skip", "wait", lambda d: f"late by {d.retry_after:.0f}s"]


def guards() -> tuple[Guard, AsyncGuard, ManualClock, ManualClock]:
    sync_clock, async_clock = ManualClock(START), ManualClock(START)
    return (
        Guard(MemoryBackend(sync_clock), clock=sync_clock),
        AsyncGuard(MemoryBackend(async_clock), clock=async_clock),
        sync_clock,
        async_clock,
    )


def outcome(call: Callable[[], object]) -> object:
    try:
        return call()
    except CapExceeded as exc:
        return f"refused by {exc.decision.policy}"


async def async_outcome(call: Callable[[], Awaitable[object]]) -> object:
    try:
        return await call()
    except CapExceeded as exc:
        return f"refused by {exc.decision.policy}"


@pytest.mark.parametrize("mode", MODES, ids=["raise", "skip", "wait", "callable"])
def test_functions(mode: OnExceeded) -> None:
    sync_guard, async_guard, sync_clock, async_clock = guards()

    @capped("2/minute", key="user", guard=sync_guard, on_exceeded=mode, name="f")
    def f(user: str) -> str:
        return user

    @capped("2/minute", key="user", guard=async_guard, on_exceeded=mode, name="f")
    async def af(user: str) -> str:
        return user

    async def three() -> list[object]:
        return [await async_outcome(lambda: af("u")) for _ in range(3)]

    sync_out = [outcome(lambda: f("u")) for _ in range(3)]
    assert sync_out[:2] == ["u", "u"]
    assert asyncio.run(three()) == sync_out
    assert async_clock.now() == sync_clock.now()  # a wait waited as long on both


@pytest.mark.parametrize("mode", ["raise", "wait"])
def test_blocks(mode: OnExceeded) -> None:
    sync_guard, async_guard, sync_clock, async_clock = guards()
    sync_cap = capped("2/minute", guard=sync_guard, on_exceeded=mode, context={"user": "u"})
    async_cap = capped("2/minute", guard=async_guard, on_exceeded=mode, context={"user": "u"})

    def enter() -> object:
        with sync_cap as decision:
            return (decision.allowed, decision.remaining)

    async def async_enter() -> object:
        async with async_cap as decision:
            return (decision.allowed, decision.remaining)

    async def three() -> list[object]:
        return [await async_outcome(async_enter) for _ in range(3)]

    sync_out = [outcome(enter) for _ in range(3)]
    assert sync_out[:2] == [(True, 1), (True, 0)]
    assert asyncio.run(three()) == sync_out
    assert async_clock.now() == sync_clock.now()
