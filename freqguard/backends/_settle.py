"""The last stage of the Redis edge: what a batch's results ask before they are replies.

A call goes one way: framed (``_resp``), routed to the node that owns its key (``_routing``),
sent on a lane (``_lanes``), settled (here). Settling reads each result; a reply is done,
and an error reply says what to do again, in this order, each step bounded:

====================================  ===============================================
the result                            the step (:func:`next_step`)
====================================  ===============================================
"Function not found" / NOSCRIPT       :data:`LOAD`: again behind the library's load,
(``_library.missing``)                then in transactions no flush can come between
UNCLAIMED (``_claims.unclaimed``)     :data:`CLAIM`: again once the bin is claimed
                                      (up to three times: a claimed bin can be
                                      swept away before the resend)
BINS_OTHER (``_claims.other_bins``)   a :class:`~freqguard.ConfigError`, the call's
                                      failure (raised once the batch is settled)
MOVED, ASK, TRYAGAIN, a lost node     :data:`REROUTE`: the long way (the cluster
(on a cluster: ``_routing.REROUTE``)  client follows it, its slot map learnt again)
anything else                         a failure: the call's own, or its node's
====================================  ===============================================

A call done again is settled again, so a claim's resend that finds the library flushed is
loaded as the first send was; what a step cannot mend the second time (:class:`Settling`
counts) is the call's failure. Once every result is a reply or a failure,
:func:`raise_failed` raises the failures: a refusal of the configuration first, carrying
the other calls' replies, so that the guard gives back what they took. No I/O here: the
backend runs each step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoPermissionError

from freqguard.backends._boundary import Unreplicated
from freqguard.backends._claims import other_bins, unclaimed
from freqguard.backends._library import missing
from freqguard.backends._resp import record_key
from freqguard.backends._routing import REROUTE as _REROUTE
from freqguard.errors import BackendUnavailable, ConfigError, raise_failures
from freqguard.script.calls import ScriptCall

__all__ = ["CLAIM", "LOAD", "REROUTE", "Settling", "raise_failed", "refusal"]

LOAD, CLAIM, REROUTE = "load", "claim", "reroute"

#: loads a settling may send: behind the load, then atomically; as many for a claim's resend
_LOADS = 4
#: claims a settling may make: a bin claimed can be swept away, emptied, by another client's
#: write before the resend comes (seen under load), so the claim is made again, bounded
_CLAIMS = 3


class Settling:
    """What one batch has had done again, and what is left to do (see the module's table).

    Attributes:
        failed: positions whose error is final (a failure, not a step's to mend).
    """

    __slots__ = ("_bins", "_claims", "_cluster", "_loads", "_rerouted", "failed")

    def __init__(self, cluster: bool, bins: int) -> None:
        self._cluster, self._bins = cluster, bins
        self._loads = 0
        self._claims = 0
        self._rerouted: set[int] = set()
        self.failed: set[int] = set()

    def next_step(
        self, calls: Sequence[ScriptCall], results: list[object]
    ) -> tuple[str, list[int]] | None:
        """The next step and the positions it is for; None when every result is a reply or
        a failure. A call a bin refuses (it holds another bins setting) fails with the
        :class:`~freqguard.ConfigError` that says so, put in its place in ``results``: raised
        after the batch is settled (:func:`raise_failed`), with the other calls' replies,
        so that what they admitted can be given back."""
        loads, claims, reroutes = [], [], []
        for index, result in enumerate(results):
            if not isinstance(result, Exception) or index in self.failed:
                continue
            if missing(result) and self._loads < _LOADS:
                loads.append(index)
            elif self._bins and unclaimed(result) and self._claims < _CLAIMS:
                claims.append(index)
            elif self._cluster and isinstance(result, _REROUTE) and index not in self._rerouted:
                reroutes.append(index)
            else:
                if self._bins and (refused := refusal(result, calls[index], self._bins)):
                    results[index] = refused  # another bins setting: that ConfigError
                self.failed.add(index)
        if loads:
            self._loads += 1
            return LOAD, loads
        if claims:
            self._claims += 1
            return CLAIM, claims
        if reroutes:
            self._rerouted.update(reroutes)
            return REROUTE, reroutes
        return None

    def atomic(self) -> bool:
        """Whether the load just counted goes in transactions: the second of each pair (a
        flush from another client came between the first's load and its calls)."""
        return self._loads % 2 == 0


def raise_failed(replies: list[Any], results: list[object], cluster: bool) -> None:
    """Raise the failures among a settled batch's ``replies`` (``results``: as they came):
    a refusal of the configuration first (``NOPERM`` for some keys), carrying every call's
    reply or error when only some were refused (the guard gives back what the others
    took); then, on a standalone server, the first error as it came (a write its replicas
    lack aside: that call's alone), ``sent`` when other calls of the batch ran; on a
    cluster, one node's error for all as it is, else each call's in a ``PartialFailure``."""
    refused = next((r for r in replies if isinstance(r, ConfigError)), None)
    if refused is not None:
        if any(not isinstance(r, ConfigError) for r in replies):  # refused in part
            refused.results = replies
        raise refused
    if not cluster:
        ran = any(not isinstance(r, Exception) or isinstance(r, Unreplicated) for r in results)
        for result, reply in zip(results, replies, strict=True):
            if isinstance(result, Exception) and not isinstance(result, Unreplicated):
                if ran and isinstance(reply, BackendUnavailable):
                    raise _in_part(reply) from result
                raise result
    raise_failures(replies, "redis cluster calls")


def _in_part(error: BackendUnavailable) -> BackendUnavailable:
    """The failure of a batch on one server that ran some of its calls and refused one (an
    error reply: READONLY, NOREPLICAS...): ``sent``, since part of it was applied (a refund
    retried would give that part back twice), and ``answered`` (the server is up)."""
    error.sent = True
    error.args = (f"{error} (other calls of its batch were applied)",)
    return error


def refusal(error: Exception, call: ScriptCall, bins: int) -> Exception | None:
    """``call``'s error if it refuses the call as misconfigured, as a settled batch keeps it
    in the reply's place: a bin of another bins setting (a ConfigError, raised from the
    error), an ACL's ``NOPERM`` (translated at the boundary); None for any other."""
    other = other_bins(error, record_key(call), bins)
    if other is not None:
        other.__cause__ = error
        return other
    return error if isinstance(error, NoPermissionError) else None
