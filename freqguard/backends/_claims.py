"""One way to keep a policy's records per prefix: each client checks its ``bins`` setting
against the store's before its first call of a policy.

Records in a hash each (``bins=0``) and records shared in N bins live under different
keys, and so do N bins and M: clients of one prefix with different settings would count
apart, each up to the cap. So the first client of a policy records its setting in the
store (``KeyLayout.layout_key``: ``<prefix>:{*<policy>}:<policy>:bins``, for
:data:`HOLD` seconds), and every client compares its own with it before its first call of
that policy, and again every :data:`RECHECK` seconds, which keeps the key alive while any
client runs: a client with another setting is refused with a
:class:`~freqguard.ConfigError` that names both, before it writes anything. Calls that
only read (a peek: ``freqguard ping``, ``/readyz``) compare with a setting recorded and
record none: they write nothing. No I/O here: :func:`claim` yields the requests, as
``_inspect.inspection`` does.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Generator, Sequence
from functools import partial
from time import monotonic
from typing import Any

from redis import exceptions as rex

from freqguard.errors import ConfigError
from freqguard.script.calls import ScriptCall
from freqguard.script.contract import BINS_OTHER, CHECK, LIMIT, UNCLAIMED

__all__ = [
    "HOLD",
    "RECHECK",
    "Claims",
    "claim",
    "other_bins",
    "other_setting",
    "reads_only",
    "unclaimed",
]

#: Seconds after which a backend checks its claims again (two requests a policy each time),
#: and how long the store keeps a claim no client renews.
RECHECK = 600
HOLD = 86_400


class Claims:
    """The layout keys a backend has checked, and when to check them again."""

    __slots__ = ("_done", "_next", "bins")

    def __init__(self, bins: int) -> None:
        self.bins = bins
        self._done: set[str] = set()
        self._next = monotonic() + RECHECK

    def wanted(self, call: ScriptCall) -> bool:
        """Whether ``call``'s policy must be checked before it goes (the hot path's test)."""
        if call.part.layouts[0].layout_key not in self._done:
            return True
        if monotonic() < self._next:
            return False
        self._next = monotonic() + RECHECK
        self._done.clear()
        return True

    def keys(self, calls: Sequence[ScriptCall]) -> list[tuple[str, bool]]:
        """The layout keys of ``calls`` not checked yet, each once, and whether a call of
        it writes (a claim is recorded only then)."""
        found: dict[str, bool] = {}
        for call in calls:
            key = call.part.layouts[0].layout_key
            if key not in self._done:
                found[key] = found.get(key, False) or not reads_only(call)
        return sorted(found.items())

    def done(self, key: str) -> None:
        self._done.add(key)

    def forget(self, key: str) -> None:
        """Check ``key`` again before the next call (a bin was found unclaimed)."""
        self._done.discard(key)

    def on_checked(self, key: str) -> Callable[[], None]:
        """What says ``key`` was checked (:func:`claim`'s ``checked``)."""
        return partial(self.done, key)


def reads_only(call: ScriptCall) -> bool:
    """Whether ``call`` writes nothing: a peek, or a read of per-key limits."""
    return call.mode == CHECK or (call.mode == LIMIT and call.change == "")


def claim(
    client: Any, key: str, bins: int, checked: Callable[[], None], record: bool = True
) -> Generator[Callable[[], Any], Any, None]:
    """Record ``bins`` under ``key`` if no client did, else compare with what is there,
    and say so (``checked()``); without ``record`` (calls that only read), compare with a
    setting recorded, and leave a key none holds to the first call that writes (checked
    then). A server that refuses the requests (an ACL without SET or
    GET, renamed commands) is warned of, once per key, and not checked again; one that
    cannot be reached leaves it to the next call (which fails or not on its own).

    Raises:
        ConfigError: the store's clients keep the policy's records another way.
    """
    mine = str(bins)
    try:
        yield from _compare(client, key, mine, checked, record)
    except _UNREACHED:
        return


_UNREACHED = (rex.ConnectionError, rex.TimeoutError, rex.RedisClusterException)


def _compare(
    client: Any, key: str, mine: str, checked: Callable[[], None], record: bool
) -> Generator[Callable[[], Any], Any, None]:
    try:
        try:
            made = record and (yield lambda: client.set(key, mine, nx=True, ex=HOLD))
        except rex.OutOfMemoryError:  # a full server is still read: compare, claim nothing
            made = False
        if made:
            checked()
            return
        found = yield lambda: client.get(key)
        if isinstance(found, bytes):
            found = found.decode("utf-8", "replace")
        if found is None:  # gone meanwhile: claimed at the next check
            return
        if found == mine:  # renewed (EXPIRE runs on a full server too)
            yield lambda: client.expire(key, HOLD)
            checked()
            return
    except rex.ResponseError as exc:
        if not _refused(exc):  # MOVED, a busy server...: as any call's error
            raise
        checked()
        if key not in _WARNED:
            _WARNED.add(key)
            _log.warning(
                "freqguard: cannot check that every client keeps %s with bins=%s (the "
                "server refused: %s); clients with another bins setting would count "
                "apart, each up to the cap (docs/redis.md, 'Changing bins')",
                key,
                mine,
                exc,
            )
        return
    raise other_setting(key.rsplit(":", 2)[-2], found, mine, key)


def other_setting(policy: str, found: object, mine: object, where: str) -> ConfigError:
    """The error of a client whose bins setting is not the one ``where`` records."""
    return ConfigError(
        f"policy {policy!r}: the clients of this store keep its records with "
        f"bins={found} (recorded in {where}), and this client has bins={mine}: the two "
        "would count apart, each up to the cap. Give every client of a key prefix the same "
        "bins setting (docs/redis.md, 'Changing bins')"
    )


def unclaimed(result: object) -> bool:
    """Whether a call's result says it would have written a bin that holds no setting (a
    new bin, or one a flush or a restart emptied): it wrote nothing, and goes again once
    the bin is claimed (``contract.UNCLAIMED``)."""
    return isinstance(result, rex.ResponseError) and UNCLAIMED in str(result)


def other_bins(result: object, key: bytes, mine: int) -> ConfigError | None:
    """The error of a call refused by a bin that holds another setting
    (``contract.BINS_OTHER``), or None."""
    if not isinstance(result, rex.ResponseError):
        return None
    found = re.search(re.escape(BINS_OTHER) + r"([0-9]+)", str(result))
    if found is None:
        return None
    text = key.decode("utf-8", "replace")
    return other_setting(text.split("}:", 1)[-1], found.group(1), mine, text)


def _refused(exc: rex.ResponseError) -> bool:
    """Whether the server refuses the claim's commands themselves (an ACL, a command
    renamed away), rather than failing the request."""
    return isinstance(exc, rex.NoPermissionError) or "unknown command" in str(exc).lower()


_WARNED: set[str] = set()  # keys whose claim a server refused, warned of once
_log = logging.getLogger("freqguard")
