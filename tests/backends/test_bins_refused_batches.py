"""A batch that meets a record kept with another bins setting is a ConfigError, whatever
``on_error`` says, and leaves nothing behind: the hits its other calls admitted are given
back before the error is raised, as for a batch an ACL refuses in part
(``test_redis_acl_batches.py``). It was raised at once, the admitted hits kept.

It happens in one batch when the store's record of the setting is gone (its day-long hold
ended with no client to renew it, or a flush) while bins written with the old setting
remain (records of a week's rule outlive it): a client with another setting claims the
record and writes bins of its own, and a batch of either client then spans bins of both
settings. The new client meets an old bin (``BINS_OTHER``, from the script); the old
client, which checked the record before it was gone, meets a bin that holds no setting,
and its claim finds the record now says another (a refusal while the batch settles).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from typing import Any

import pytest

from freqguard import (
    AsyncGuard,
    ConfigError,
    Guard,
    Policy,
    Rule,
    async_backend_from_url,
    backend_from_url,
)
from freqguard.script.keys import policy_key, raw_digest
from tests.conftest import flush
from tests.servers import RedisServer

OLD, NEW = 4, 8  # the two settings: bins k < 4 are the same keys under both


def _policies(on_error: str) -> list[Policy]:
    return [Policy("p", Rule("2/minute", by="r"), on_error=on_error)]


def _in_bin(bins: int, wanted: int, skip: int = 0) -> str:
    """A partition value whose record is in bin ``wanted`` of ``bins`` (after ``skip``)."""
    found = (r for r in (f"r{i}" for i in range(10_000)) if _bin(r, bins) == wanted)
    return [next(found) for _ in range(skip + 1)][-1]


def _bin(value: str, bins: int) -> int:
    return int.from_bytes(raw_digest(value), "big") % bins


#: the old client's records, in bins 0 and 1 (the same keys as the new client's 0 and 1)
KEPT = [_in_bin(OLD, 0), _in_bin(OLD, 1)]
#: the new client's record, in bin 5 of 8: a key the old setting never writes
MINE = _in_bin(NEW, 5)
#: a record the new client keeps in an old bin (0 of 8: the old client's bin 0)
THEIRS = next(r for r in (f"t{i}" for i in range(10_000)) if _bin(r, NEW) == 0)
#: a record the old client keeps in bin 2, which holds no setting yet
UNWRITTEN = _in_bin(OLD, 2)


@pytest.fixture(params=["redis", "cluster"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The store's URL, without its bins setting; emptied first."""
    if request.param == "cluster":
        nodes: list[RedisServer] = request.getfixturevalue("redis_cluster")
        scheme = "redis+cluster"
    else:
        nodes = [request.getfixturevalue("redis_server")]
        scheme = "redis"
    flush(nodes)
    yield f"{scheme}://127.0.0.1:{nodes[0].port}/0"
    flush(nodes)


async def _done(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _guard(url: str, side: str, bins: int, on_error: str) -> Guard | AsyncGuard:
    if side == "sync":
        return Guard(backend_from_url(f"{url}?bins={bins}"), _policies(on_error))
    return AsyncGuard(async_backend_from_url(f"{url}?bins={bins}"), _policies(on_error))


async def _left(guard: Guard | AsyncGuard, values: list[str]) -> list[int]:
    return [(await _done(guard.peek("p", r=r))).remaining for r in values]


async def _scenario(url: str, side: str, on_error: str) -> None:
    old = _guard(url, side, OLD, on_error)
    new = _guard(url, side, NEW, on_error)
    try:
        for r in KEPT:
            assert (await _done(old.hit("p", r=r))).allowed  # its setting checked, bins written
        # the store's record of the setting gone (its hold ended), the old bins kept
        admin = backend_from_url(url).client
        try:
            admin.delete(policy_key("fg", "p", "bins"))
        finally:
            admin.close()
        assert (await _done(new.hit("p", r=MINE))).allowed  # claims the record, and bin 5
        with pytest.raises(ConfigError, match=r"bins=4.*bins=8"):
            await _done(new.hit_many("p", [{"r": MINE}, {"r": THEIRS}]))
        assert await _left(new, [MINE]) == [1]  # the refused batch's hit on MINE given back
        with pytest.raises(ConfigError, match=r"bins=8.*bins=4"):
            await _done(old.hit_many("p", [{"r": KEPT[0]}, {"r": UNWRITTEN}]))
        assert await _left(old, [KEPT[0]]) == [1]  # and the old client's on KEPT[0]
    finally:
        for guard in (old, new):
            await _done(guard.close() if isinstance(guard, Guard) else guard.aclose())


@pytest.mark.parametrize("side", ["sync", "async"])
@pytest.mark.parametrize("on_error", ["raise", "allow"])
def test_a_batch_meeting_another_bins_setting_gives_back_what_it_took(
    url: str, side: str, on_error: str
) -> None:
    assert _bin(THEIRS, OLD) == 0  # an old bin: the old client's KEPT[0] is there
    asyncio.run(_scenario(url, side, on_error))
