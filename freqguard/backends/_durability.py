"""``wait_replicas``: which calls WAIT follows, and what its reply makes of their results.

I/O-free, for both Redis backends (the sync one is generated): the backend sends WAIT's frame
after the calls, on their connection, and hands the replies here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from freqguard.backends._boundary import Unreplicated
from freqguard.backends._redispy import socket_timeout
from freqguard.backends._resp import wait_frame
from freqguard.errors import ConfigError
from freqguard.script.calls import ScriptCall, admitted
from freqguard.script.contract import HIT

__all__ = ["Durability"]


class Durability:
    """How many replicas must hold an admission, and within how long.

    Attributes:
        wait: WAIT's frame (b"": no waiting).
        replicas: WAIT's first argument.
        timeout_ms: WAIT's second.

    Raises:
        ConfigError: a bad ``replicas`` or ``timeout`` (or one not shorter than the
            client's socket timeout: every write would time out first).
    """

    __slots__ = ("replicas", "timeout_ms", "wait")

    def __init__(self, replicas: int, timeout: float | None, client: object) -> None:
        if timeout is not None and not replicas:  # as a URL's: never quietly ignored
            raise ConfigError("wait_timeout needs wait_replicas >= 1 (no WAIT is sent without)")
        timeout = 0.1 if timeout is None else timeout
        self.wait = wait_frame(replicas, timeout)
        socket = socket_timeout(client)
        if self.wait and socket is not None and timeout >= socket:
            raise ConfigError(
                f"wait_timeout ({timeout} s) must be shorter than the client's "
                f"socket_timeout ({socket} s): every write would time out first"
            )
        self.replicas, self.timeout_ms = replicas, round(timeout * 1000)

    def frame(self, calls: Sequence[ScriptCall]) -> bytes:
        """WAIT's frame, to follow ``calls`` on their connection, when an admission among
        them must reach the replicas (one of them is a hit that may consume); else b"". A
        refund or a reset that a failover loses leaves units taken, on the strict side, so
        it waits for nobody."""
        wait = self.wait
        if wait and any(call.mode == HIT and call.cost for call in calls):
            return wait
        return b""

    def acked(
        self,
        replies: list[object],
        calls: Sequence[ScriptCall],
        read: Callable[[list[object]], list[object]] = list,
    ) -> list[object]:
        """The results of ``calls``, ``read`` from the replies before WAIT's (the last): when
        fewer replicas than asked acknowledged them, or WAIT itself was refused, each hit the
        master admitted gets an :class:`Unreplicated` error carrying its reply instead. The
        rest keep their replies: a denial wrote nothing, and a refund, a reset or a check
        needs no replica (see :meth:`frame`)."""
        *before, acked = replies
        results = read(before)
        short = self._unreplicated(acked)
        if short is None:
            return results
        return [
            Unreplicated(str(short), result)
            if isinstance(result, bytes) and admitted(call.mode, call.cost, result)
            else result
            for call, result in zip(calls, results, strict=True)
        ]

    def _unreplicated(self, acked: object) -> str | None:
        """Why the writes before WAIT are not known to be replicated, by WAIT's reply
        ``acked``; None when enough replicas acknowledged them."""
        if isinstance(acked, int) and acked >= self.replicas:
            return None
        if isinstance(acked, Exception):  # WAIT refused (an ACL, a proxy): they are applied
            return (
                f"WAIT was refused ({acked}): the writes were applied on the master, not "
                "known to be replicated (wait_replicas)"
            )
        return (
            f"only {acked} of {self.replicas} replicas acknowledged the writes within "
            f"{self.timeout_ms} ms (wait_replicas): applied on the master, which may lose them"
        )
