"""A limits user porting code by docs/coming-from/limits.md (a second review's run), in
memory: each test is an idiom that failed without naming freqguard's way, a failing test
first."""

from __future__ import annotations

import pytest

from freqguard import AsyncGuard, Guard


def _their_storages() -> list[tuple[str, object]]:
    from limits import storage
    from limits.aio import storage as aio_storage

    return [
        ("Guard", storage.MemoryStorage()),
        ("AsyncGuard", aio_storage.MemoryStorage()),
    ]


@pytest.mark.parametrize(("guard", "theirs"), _their_storages(), ids=["sync", "aio"])
def test_their_storage_given_to_a_guard_names_our_backends(guard: str, theirs: object) -> None:
    """limits.md's ``limits.aio`` row: ``aio.strategies.MovingWindowRateLimiter(
    aio.storage.MemoryStorage())`` is ``AsyncGuard(async_backend_from_url(...), ...)``.
    Their storage handed to the guard out of habit: ``Guard(storage.MemoryStorage())`` is
    refused naming "limits' storage MemoryStorage: freqguard's backends are ...", but
    ``AsyncGuard(aio.storage.MemoryStorage())`` said only "got
    <limits.aio.storage.memory.MemoryStorage object at 0x...>" (its module is
    ``limits.aio.storage``, which the check did not know). Expected: the same hint, with
    the async maker."""
    made = {"Guard": Guard, "AsyncGuard": AsyncGuard}[guard]
    maker = "backend_from_url" if guard == "Guard" else "async_backend_from_url"
    with pytest.raises(TypeError, match="limits' storage MemoryStorage") as found:
        made(theirs)
    assert f"{maker}('redis://...')" in str(found.value)
