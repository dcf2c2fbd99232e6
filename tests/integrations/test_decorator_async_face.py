"""An ``async def`` under @capped on a sync Guard uses that guard's live policies."""

from __future__ import annotations

import asyncio

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.decorators import capped
from freqguard.integrations.asgi import async_guard_for


def test_a_policy_added_after_the_first_async_call_is_known(clock: ManualClock) -> None:
    guard = Guard(MemoryBackend(), clock=clock)

    @capped("5/minute", key="user", guard=guard)
    async def early(user: str) -> str:
        return user

    assert asyncio.run(early("u")) == "u"  # the async side of the guard exists from here
    guard.add_policy(Policy("late", Rule("1/minute", by="user")))

    @capped("late", key="user", guard=guard, on_exceeded="skip")
    async def late(user: str) -> str:
        return user

    async def twice() -> list[str | None]:
        return [await late("u"), await late("u")]

    assert asyncio.run(twice()) == ["u", None]


def test_policies_registered_on_the_async_side_are_the_guards(clock: ManualClock) -> None:
    guard = Guard(MemoryBackend(), clock=clock)
    view = async_guard_for(guard)  # what the Starlette middleware uses for a sync guard
    view.add_policy(Policy("from-async", Rule("1/minute", by="user")))
    assert "from-async" in guard.policies
    assert guard.hit("from-async", user="u").allowed
    assert not asyncio.run(view.hit("from-async", user="u")).allowed  # one state, one policy
