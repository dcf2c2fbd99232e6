"""The rig of the failure policy's tests (``test_failure_policy.py``, ``test_fallback.py``,
``test_breaker.py``, ``test_deny_cache.py``, and the edges' modules beside them): a real
MemoryBackend behind a switch that makes every call fail as a dead Redis does
(BackendUnavailable from a ConnectionError), the async side of a test store, and the
policies decided on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from freqguard import BackendUnavailable, Clock, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.failure import Breaker
from freqguard.script.calls import Reply, ScriptCall

SMS = Policy(
    "sms",
    Rule("2/59 seconds", by=("recipient", "content"), strategy="sliding-log", name="same-content"),
    Rule("3/minute", by="recipient", strategy="sliding-log", name="per-minute"),
)
VENDOR = Policy("vendor", Rule("2/second", strategy="gcra", burst=1, name="calls"))


class AsyncSide:
    """The async methods and the closes of a test store whose sync ones do the work."""

    def execute(self, call: ScriptCall) -> Reply:
        raise NotImplementedError

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        raise NotImplementedError

    async def aexecute(self, call: ScriptCall) -> Reply:
        return self.execute(call)

    async def aexecute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        return self.execute_many(calls)

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class Switch(AsyncSide):
    """A MemoryBackend that fails every call while ``down``, counting the calls it got."""

    def __init__(self, clock: ManualClock) -> None:
        self.inner = MemoryBackend(clock)
        self.clock: Clock = clock
        self.down = False
        self.sent = False  # refused connections; True: timeouts (the call may be applied)
        self.calls = 0

    def _check(self) -> None:
        self.calls += 1
        if self.down:
            raise BackendUnavailable("store down", sent=self.sent) from ConnectionError("refused")

    def execute(self, call: ScriptCall) -> Reply:
        self._check()
        return self.inner.execute(call)

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        self._check()
        return self.inner.execute_many(calls)


def make(
    clock: ManualClock, on_error: Any = "raise", breaker: Breaker | None = None, **kw: Any
) -> tuple[Guard, Switch]:
    store = Switch(clock)
    guard = Guard(store, [SMS, VENDOR], clock, on_error=on_error, breaker=breaker, **kw)
    return guard, store


CTX: dict[str, Any] = {"recipient": "r1", "content": "hello"}
