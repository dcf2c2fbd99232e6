"""What the observer tests share (``test_observers.py``, ``test_observers_otel.py``,
``test_observers_logging.py``): the policies, a MemoryBackend whose store can be taken away
(every call then failing as a Redis backend's does), and a day of traffic with a known
count of each kind of decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from freqguard import BackendUnavailable, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.observe import Observer
from freqguard.script.calls import Reply, ScriptCall

RECIPIENT = "18829340001"
SMS = Policy(
    "sms",
    Rule("2/minute", by="recipient", name="rcpt-1m"),
    Rule("2 per 59 seconds", by=("recipient", "content"), name="content-59s"),
)
LOGIN = Policy("login", Rule("1/minute", by="user", name="user-1m"))


class Outage:
    """A MemoryBackend whose store can be taken away: every call then fails as a Redis
    backend's does, BackendUnavailable from a ConnectionError."""

    def __init__(self) -> None:
        self.inner = MemoryBackend()
        self.clock = self.inner.clock
        self.down = False

    def execute(self, call: ScriptCall) -> Reply:
        return self.execute_many([call])[0]

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        if self.down:
            try:
                raise ConnectionError("connection refused")
            except ConnectionError as exc:
                raise BackendUnavailable("the store failed: connection refused") from exc
        return self.inner.execute_many(calls)

    def close(self) -> None:
        self.inner.close()


def traffic(clock: ManualClock, observer: Observer) -> Guard:
    """A guard with a deny cache and ``observer``, after :func:`a_day_of_traffic`."""
    guard = Guard(MemoryBackend(), [SMS, LOGIN], clock=clock, deny_cache=100, observers=[observer])
    a_day_of_traffic(guard)
    return guard


def a_day_of_traffic(guard: Guard) -> None:
    """sms: 3 allowed, 3 denied by the store, 2 by the deny cache; login: 1 and 1."""
    ctx: dict[str, Any] = {"recipient": RECIPIENT, "content": "code 1"}
    for _ in range(2):
        assert guard.hit("sms", **ctx).allowed
    denied = guard.hit("sms", **ctx)
    assert denied.source == "backend"
    assert [rule.name for rule in denied.denied_by] == ["rcpt-1m", "content-59s"]
    assert [d.source for d in guard.hit_many("sms", [ctx])] == ["deny-cache"]
    assert guard.hit("sms", **ctx).source == "deny-cache"
    other = guard.hit("sms", recipient=RECIPIENT, content="other")  # not the cached context
    assert other.source == "backend"
    assert [rule.name for rule in other.denied_by] == ["rcpt-1m"]
    assert guard.hit("sms", recipient="someone else", content="code 1").allowed
    too_much = guard.hit("sms", recipient="someone else", content="code 1", cost=2)
    assert [rule.name for rule in too_much.denied_by] == ["rcpt-1m", "content-59s"]
    assert guard.acquire("login", user="ann").allowed
    assert not guard.hit("login", user="ann").allowed
