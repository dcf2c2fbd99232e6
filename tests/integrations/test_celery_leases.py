"""A task of a policy that holds leases (a concurrency rule: calls in flight to a vendor)
holds one while its body runs, under every exit: its hit was a ConfigError at every run
("take its leases with guard.lease"), so a concurrency cap on a task could not be had.
Given back when the body returns (its rate rules keep the call), refunded whole when it
raises (as a failing body's hit is), never taken for a task that is denied."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("celery")
from celery import Celery

from freqguard import CapExceeded, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.integrations.celery import capped_task
from tests.conftest import START

VENDOR = Policy(
    "vendor",
    Rule("2 concurrent", lease=60, by="account", name="flight"),
    Rule("10/minute", by="account", name="rate"),
)


@pytest.fixture
def app() -> Iterator[Celery]:
    app = Celery("leased", broker="memory://", backend="cache+memory://", set_as_current=False)
    app.conf.task_always_eager = True
    app.conf.task_store_eager_result = False
    yield app
    app.close()


@pytest.fixture
def guard() -> Guard:
    return Guard(MemoryBackend(), [VENDOR], clock=ManualClock(START))


def _left(guard: Guard) -> dict[str, int]:
    return {state.rule.id: state.remaining for state in guard.peek("vendor", account="a").rules}


def test_a_task_holds_a_lease_while_its_body_runs_and_gives_it_back(
    app: Celery, guard: Guard
) -> None:
    seen: list[dict[str, int]] = []

    @capped_task(app, VENDOR, guard=guard, name="leased.push")
    def push(account: str) -> str:
        seen.append(_left(guard))
        return "pushed"

    assert [push.delay(account="a").get() for _ in range(3)] == ["pushed"] * 3
    assert seen == [{"flight": 1, "rate": 9}, {"flight": 1, "rate": 8}, {"flight": 1, "rate": 7}]
    assert _left(guard) == {"flight": 2, "rate": 7}  # the calls counted, the leases back


def test_a_task_with_every_lease_held_elsewhere_is_denied_and_its_body_never_runs(
    app: Celery, guard: Guard
) -> None:
    ran: list[str] = []
    held = [guard.take_lease("vendor", account="a") for _ in range(2)]

    @capped_task(app, VENDOR, guard=guard, name="leased.dropped", on_denied="drop")
    def push(account: str) -> str:
        ran.append(account)
        return "pushed"

    dropped = push.delay(account="a").get()
    assert dropped["dropped"] is True
    assert dropped["denied_by"] == ["flight"]
    assert ran == []
    for decision in held:
        guard.release(decision)
    assert push.delay(account="a").get() == "pushed"


def test_a_failing_body_gives_back_its_lease_and_its_call(app: Celery, guard: Guard) -> None:
    @capped_task(app, VENDOR, guard=guard, name="leased.failing", on_denied="raise")
    def push(account: str) -> str:
        raise ConnectionError("vendor down")

    for _ in range(3):  # more than the leases: each went back
        with pytest.raises(ConnectionError):
            push.delay(account="a").get()
    assert _left(guard) == {"flight": 2, "rate": 10}


def test_a_denial_raises_as_asked(app: Celery, guard: Guard) -> None:
    held = [guard.take_lease("vendor", account="a") for _ in range(2)]

    @capped_task(app, VENDOR, guard=guard, name="leased.raised", on_denied="raise")
    def push(account: str) -> str:
        return "pushed"

    with pytest.raises(CapExceeded, match="flight"):
        push.delay(account="a").get()
    assert len(held) == 2
