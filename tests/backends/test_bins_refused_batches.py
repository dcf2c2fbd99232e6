"""A batch that meets a record kept with another bins setting is a ConfigError, whatever
``on_error`` says, and leaves nothing behind: the hits its other calls admitted are given
back before the error is raised, as for a batch an ACL refuses in part
(``test_redis_acl_batches.py``). It was raised at once, the admitted hits kept.

It happens in one batch when the store's record of the setting is gone (its day-long hold
ended with no client to renew it, or a flush) while bins written with the old setting
remain (records of a week's rule outlive it): a client with another setting claims the
record and writes bins of its own, and its batch then spans its bins and an old one
(``BINS_OTHER``, from the script, for the call on the old bin).

The old client's batch meets the change the other way: a bin that holds no setting, whose
claim finds the store's record now says another. That refusal comes from the claim, and
the client's every write is refused from then on by the same check, its give-back too: the
units its batch took stay taken (the strict side), in bins whose setting the store no
longer records (each client of that setting is refused at its next check).
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
from tests.conftest import flush, store_nodes

OLD, NEW = 4, 8  # the two settings: bins k < 4 are the same keys under both


def _policies(on_error: str) -> list[Policy]:
    return [Policy("p", Rule("2/minute", by="r"), on_error=on_error)]


def _in_bin(bins: int, wanted: int, head: str = "r") -> str:
    """A partition value whose record is in bin ``wanted`` of ``bins``."""
    return next(r for r in (f"{head}{i}" for i in range(10_000)) if _bin(r, bins) == wanted)


def _bin(value: str, bins: int) -> int:
    return int.from_bytes(raw_digest(value), "big") % bins


#: the old client's record, in bin 0 of 4: the same key as the new client's bin 0
KEPT = _in_bin(OLD, 0)
#: the new client's record, in bin 5 of 8: a key the old setting never writes
MINE = _in_bin(NEW, 5)
#: a record the new client keeps in an old bin (0 of 8: the old client's bin 0)
THEIRS = _in_bin(NEW, 0, head="t")


@pytest.fixture(params=["redis", "cluster"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The store's URL, without its bins setting; emptied first."""
    scheme, nodes = store_nodes(request, request.param)
    yield f"{scheme}://127.0.0.1:{nodes[0].port}/0"
    flush(nodes)


async def _done(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _guard(url: str, side: str, bins: int, on_error: str) -> Guard | AsyncGuard:
    if side == "sync":
        return Guard(backend_from_url(f"{url}?bins={bins}"), _policies(on_error))
    return AsyncGuard(async_backend_from_url(f"{url}?bins={bins}"), _policies(on_error))


async def _left(guard: Guard | AsyncGuard, value: str) -> int:
    decision = await _done(guard.peek("p", r=value))
    return int(decision.remaining)


async def _scenario(url: str, side: str, on_error: str) -> None:
    old = _guard(url, side, OLD, on_error)
    new = _guard(url, side, NEW, on_error)
    try:
        assert (await _done(old.hit("p", r=KEPT))).allowed  # its setting checked, bin 0 written
        # the store's record of the setting gone (its hold ended), the old bins kept
        admin = backend_from_url(url)
        try:
            admin.client.delete(policy_key("fg", "p", "bins"))  # type: ignore[union-attr]
        finally:
            admin.close()
        assert (await _done(new.hit("p", r=MINE))).allowed  # claims the record, and bin 5
        with pytest.raises(ConfigError, match=r"bins=4.*bins=8"):
            await _done(new.hit_many("p", [{"r": MINE}, {"r": THEIRS}]))
        assert await _left(new, MINE) == 1  # the refused batch's hit on MINE given back
    finally:
        for guard in (old, new):
            if isinstance(guard, Guard):
                guard.close()
            else:
                await guard.aclose()


@pytest.mark.parametrize("side", ["sync", "async"])
@pytest.mark.parametrize("on_error", ["raise", "allow"])
def test_a_batch_meeting_another_bins_setting_gives_back_what_it_took(
    url: str, side: str, on_error: str
) -> None:
    asyncio.run(_scenario(url, side, on_error))
