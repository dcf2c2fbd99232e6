"""A request's leases given back each (``integrations._held``): one whose release fails
keeps none of the others, and one given back already (by the view) is left be."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from freqguard import AsyncGuard, Guard, ManualClock, Policy, Rule
from freqguard.integrations._held import arelease_each, release_each

LEASED = [Policy(name, Rule("1 concurrent", lease=60, name="cc")) for name in ("a", "b", "c")]


class _Failing:
    """A guard whose release of policy ``a``'s lease fails (the store did)."""

    def __init__(self, guard: Any) -> None:
        self.guard = guard

    def release(self, decision: Any) -> Any:
        if decision.policy == "a":
            raise OSError("the store failed")
        return self.guard.release(decision)


def test_a_failed_release_keeps_none_of_the_others() -> None:
    """Review: Flask's, Django's and the ASGI middleware's loops stopped at the first
    release that raised: a request holding two leases (a route's and a named cap's) kept
    the second until it lapsed."""
    guard = Guard(policies=LEASED, clock=ManualClock(0))
    held = [guard.take_lease(name) for name in ("a", "b", "c")]
    guard.release(held[2])  # given back by the view already: left be
    with pytest.raises(OSError, match="store failed"):
        release_each(cast(Guard, _Failing(guard)), held)
    assert [guard.peek(name).remaining for name in ("b", "c")] == [1, 1]


def test_a_failed_release_keeps_none_of_the_others_async() -> None:
    class _AsyncFailing(_Failing):
        async def release(self, decision: Any) -> Any:
            if decision.policy == "a":
                raise OSError("the store failed")
            return await self.guard.release(decision)

    async def main() -> list[int]:
        guard = AsyncGuard(policies=LEASED, clock=ManualClock(0))
        held = [await guard.take_lease(name) for name in ("a", "b", "c")]
        await guard.release(held[2])
        with pytest.raises(OSError, match="store failed"):
            await arelease_each(cast(AsyncGuard, _AsyncFailing(guard)), held)
        return [(await guard.peek(name)).remaining for name in ("b", "c")]

    assert asyncio.run(main()) == [1, 1]
