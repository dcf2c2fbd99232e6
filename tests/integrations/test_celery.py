"""capped_task's logic, run eagerly (``task_always_eager``) on a ManualClock, and its
re-send and redelivery paths run as a worker would run them, on Celery's in-memory broker.
The real workers on real brokers are in test_celery_workers.py."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("celery", reason="the celery extra is not installed")

from celery import Celery, Task
from celery.exceptions import Retry

from freqguard import (
    CapExceeded,
    ConfigError,
    ContextError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    QuietHours,
    Rule,
)
from freqguard.integrations.celery import ON_DENIED, TASK_ONCE, capped_task
from tests.conftest import START, examples
from tests.integrations.celery_rig import app as app
from tests.integrations.celery_rig import run_as_worker

SMS = Policy("sms", Rule("2/minute", by="recipient", name="rcpt-1m"))


class VendorDown(Exception):
    pass


@pytest.fixture
def guard(clock: ManualClock) -> Guard:
    return Guard(MemoryBackend(), [], clock=clock)


def test_allowed_runs_then_denied_defers_by_retry_after(app: Celery, guard: Guard) -> None:
    sent: list[str] = []

    @capped_task(app, SMS, guard=guard, shared=False)
    def send(recipient: str, content: str) -> str:
        sent.append(content)
        return f"sent {content}"

    assert [send.delay(recipient="+1", content=str(i)).get() for i in range(2)] == [
        "sent 0",
        "sent 1",
    ]
    third = send.delay(recipient="+1", content="2").get()
    assert third == {
        "deferred": True,
        "policy": "sms",
        "denied_by": ["rcpt-1m"],
        "retry_after": 60.0,
    }
    assert sent == ["0", "1"]
    assert send.delay(recipient="+2", content="other").get() == "sent other"


def test_drop_returns_dropped_and_logs(
    app: Celery, guard: Guard, caplog: pytest.LogCaptureFixture
) -> None:
    @capped_task(app, SMS, guard=guard, shared=False, on_denied="drop")
    def send(recipient: str) -> str:
        return "sent"

    assert [send.delay(recipient="+1").get() for _ in range(2)] == ["sent", "sent"]
    with caplog.at_level(logging.INFO, "freqguard.celery"):
        dropped = send.delay(recipient="+1").get()
    assert dropped == {
        "dropped": True,
        "policy": "sms",
        "denied_by": ["rcpt-1m"],
        "retry_after": 60.0,
    }
    assert "dropped: policy 'sms' denied by rcpt-1m" in caplog.text


def test_raise_raises_cap_exceeded(app: Celery, guard: Guard) -> None:
    @capped_task(app, SMS, guard=guard, shared=False, on_denied="raise")
    def send(recipient: str) -> str:
        return "sent"

    send.delay(recipient="+1").get()
    send.delay(recipient="+1").get()
    with pytest.raises(CapExceeded, match="denied by rcpt-1m") as caught:
        send.delay(recipient="+1").get()
    assert caught.value.decision.retry_after == 60.0


def test_a_failing_body_refunds_its_hit(app: Celery, guard: Guard) -> None:
    calls: list[str] = []

    @capped_task(app, SMS, guard=guard, shared=False, on_denied="raise")
    def send(recipient: str, fail: bool = False) -> str:
        calls.append(recipient)
        if fail:
            raise VendorDown("vendor timed out")
        return "sent"

    for _ in range(3):
        with pytest.raises(VendorDown):
            send.delay(recipient="+1", fail=True).get()
    assert [send.delay(recipient="+1").get() for _ in range(2)] == ["sent", "sent"]
    assert len(calls) == 5
    assert guard.peek("sms", recipient="+1").remaining == 0


def test_celery_retry_after_the_body_ran_counts_once(app: Celery, guard: Guard) -> None:
    attempts: list[int] = []

    @capped_task(app, SMS, guard=guard, shared=False, bind=True, max_retries=3)
    def send(task: Task, recipient: str) -> str:
        attempts.append(task.request.retries)
        if len(attempts) < 3:
            raise task.retry(countdown=0)
        return "sent"

    # two retries run eagerly, at once; each run refunded before it retried
    assert send.delay(recipient="+1").get() == "sent"
    assert attempts == [0, 1, 2]
    assert guard.peek("sms", recipient="+1").remaining == 1


def test_quiet_hours_defer_to_the_morning(app: Celery, clock: ManualClock) -> None:
    clock.set(1_781_206_200)  # 2026-06-11 21:30 in Berlin
    guard = Guard(MemoryBackend(), [], clock=clock)
    push = Policy(
        "push",
        Rule("3/day", by="recipient"),
        quiet=QuietHours("21:00", "08:00", tz_from="tz"),
    )

    @capped_task(app, push, guard=guard, shared=False)
    def notify(recipient: str, tz: str) -> str:
        return "sent"

    late = notify.delay(recipient="dana", tz="Europe/Berlin").get()
    assert late["denied_by"] == ["quiet-hours"]
    assert late["retry_after"] == 37800.0  # 08:00


def test_a_registered_policy_name_and_positional_arguments(app: Celery, guard: Guard) -> None:
    guard.add_policy(SMS)

    @capped_task(app, "sms", guard=guard, shared=False, on_denied="drop")
    def send(recipient: str, content: str) -> str:
        return content

    assert send.delay("+1", "a").get() == "a"
    assert send.delay("+1", content="b").get() == "b"
    assert send.delay(recipient="+1", content="c").get()["dropped"] is True


def test_a_default_gives_the_context(app: Celery, clock: ManualClock) -> None:
    guard = Guard(MemoryBackend(), [], clock=clock)
    push = Policy("push", Rule("1/day", by="recipient", calendar=True, tz_from="tz"))

    @capped_task(app, push, guard=guard, shared=False, on_denied="drop")
    def notify(recipient: str = "ops", tz: str = "Asia/Tokyo") -> str:
        return tz

    assert notify.delay().get() == "Asia/Tokyo"
    assert notify.delay(tz="Europe/Berlin").get()["dropped"] is True


def test_a_missing_dimension_is_an_error_naming_it(app: Celery, guard: Guard) -> None:
    @capped_task(app, SMS, guard=guard, shared=False)
    def send(**message: Any) -> None:
        raise AssertionError("never runs")

    with pytest.raises(ContextError, match=r"dimension\(s\) recipient; send them as keywords"):
        send.delay(to="+1").get()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"on_denied": "skip"}, "on_denied must be one of 'defer', 'drop', 'raise', got 'skip'"),
        ({"on_denied": None}, "on_denied must be one of .* got None"),
        ({"policy": "nope"}, r"registered on the guard \(registered: .*\), got 'nope'"),
        ({"policy": 3}, "got 3"),
        ({"guard": object()}, "guard must be a freqguard Guard"),
    ],
)
def test_bad_options_fail_at_decoration(
    app: Celery, guard: Guard, options: dict[str, Any], match: str
) -> None:
    arguments: dict[str, Any] = {"policy": SMS, "guard": guard, **options}
    with pytest.raises(ConfigError, match=match):
        capped_task(app, **arguments)


def test_the_public_names_are_pinned() -> None:
    from freqguard.integrations import celery

    assert set(celery.__all__) == {
        "ON_DENIED",
        "TASK_ONCE",
        "Deferred",
        "Dropped",
        "OnDenied",
        "TaskDenied",
        "capped_task",
    }
    assert ON_DENIED == ("defer", "drop", "raise")


def test_a_function_without_the_dimension_fails_at_decoration(app: Celery, guard: Guard) -> None:
    with pytest.raises(ConfigError, match="takes no keyword argument for the dimension"):

        @capped_task(app, SMS, guard=guard, shared=False)
        def send(to: str) -> None: ...


def test_an_async_function_fails_at_decoration(app: Celery, guard: Guard) -> None:
    """Celery runs a task's function sync: an ``async def`` answered a coroutine never
    awaited, its hit spent (a new user's first hour)."""
    with pytest.raises(ConfigError, match=r"async def send.*asyncio.run"):

        @capped_task(app, SMS, guard=guard, shared=False)
        async def send(recipient: str) -> None: ...


# The worker's paths, without a worker: the task run as a worker runs it (a request that is
# not eager), re-sending onto the in-memory broker.


@pytest.fixture
def worker_app(app: Celery) -> Celery:
    app.conf.task_always_eager = False
    return app


def test_defer_resends_the_same_task_without_spending_retries(
    worker_app: Celery, guard: Guard
) -> None:
    @capped_task(worker_app, SMS, guard=guard, shared=False, max_retries=0)
    def send(recipient: str) -> str:
        return "sent"

    run_as_worker(send, "a", recipient="+1")
    run_as_worker(send, "b", recipient="+1")
    with pytest.raises(Retry) as deferred:
        run_as_worker(send, "c", retries=0, recipient="+1")
    assert deferred.value.when == 60.0
    with worker_app.connection() as connection, connection.SimpleQueue("celery") as queue:
        message = queue.get(timeout=1)
        headers = message.headers
        message.ack()
    assert (headers["id"], headers["retries"], headers["task"]) == ("c", 0, send.name)
    assert headers["eta"] is not None
    assert message.payload[1] == {"recipient": "+1"}


def test_a_redelivered_acks_late_task_takes_one_hit(worker_app: Celery, guard: Guard) -> None:
    runs: list[str] = []

    @capped_task(worker_app, SMS, guard=guard, shared=False, acks_late=True)
    def send(recipient: str) -> str:
        runs.append(recipient)
        return "sent"

    run_as_worker(send, "same", recipient="+1")
    run_as_worker(send, "same", recipient="+1")  # the broker delivered it again
    assert runs == ["+1", "+1"]
    assert guard.peek("sms", recipient="+1").remaining == 1
    assert TASK_ONCE.name in guard.policies
    run_as_worker(send, "other", recipient="+1")
    assert guard.peek("sms", recipient="+1").remaining == 0


def test_an_acks_late_task_that_fails_gives_back_its_mark(worker_app: Celery, guard: Guard) -> None:
    @capped_task(worker_app, SMS, guard=guard, shared=False, acks_late=True)
    def send(recipient: str, fail: bool) -> str:
        if fail:
            raise VendorDown("vendor timed out")
        return "sent"

    with pytest.raises(VendorDown):
        run_as_worker(send, "t", recipient="+1", fail=True)
    assert run_as_worker(send, "t", recipient="+1", fail=False) == "sent"  # its retry
    assert guard.peek("sms", recipient="+1").remaining == 1
    assert guard.peek(TASK_ONCE.name, task_id="t").remaining == 0


def test_a_direct_call_is_capped_and_not_tied_or_sent(worker_app: Celery, guard: Guard) -> None:
    @capped_task(worker_app, SMS, guard=guard, shared=False, acks_late=True)
    def send(recipient: str) -> str:
        return "sent"

    assert [send(recipient="+1"), send(recipient="+1")] == ["sent", "sent"]
    third = send(recipient="+1")  # no task id to tie to, no worker to re-send to
    assert (third["deferred"], third["denied_by"]) == (True, ["rcpt-1m"])
    assert guard.peek(TASK_ONCE.name, task_id="None").remaining == 1


# The adversaries: runs, failures and redeliveries in any order against a model of what the
# store must hold; and hostile options and arguments.

Run = tuple[int, bool]  # (task id, whether its body succeeds)


@settings(max_examples=examples(40))
@given(runs=st.lists(st.tuples(st.integers(0, 4), st.booleans()), max_size=14))
def test_runs_failures_and_redeliveries_hold_one_hit_per_task(
    worker_app: Celery, runs: list[Run]
) -> None:
    """A task id holds one unit once a run of it succeeded, and never more; a failed run
    holds none; a run over the cap is deferred and changes nothing (the strict side: even a
    redelivery of a task that holds its unit)."""
    cap = 3
    guard = Guard(MemoryBackend(), [], clock=ManualClock(START))
    policy = Policy("sms", Rule(f"{cap}/minute", by="recipient"))

    @capped_task(
        worker_app, policy, guard=guard, shared=False, acks_late=True, name=uuid.uuid4().hex
    )
    def send(recipient: str, ok: bool) -> str:
        if not ok:
            raise VendorDown("vendor timed out")
        return "sent"

    holders: set[int] = set()
    for task, ok in runs:
        expected_deferred = len(holders) >= cap
        try:
            run_as_worker(send, f"task-{task}", recipient="+1", ok=ok)
        except Retry:
            assert expected_deferred
        except VendorDown:
            assert not expected_deferred
        else:
            assert not expected_deferred
            assert ok
            holders.add(task)
        assert guard.peek("sms", recipient="+1").remaining == cap - len(holders)


@settings(max_examples=examples(40))
@given(on_denied=st.one_of(st.text(max_size=8), st.none(), st.integers(), st.booleans()))
def test_any_other_on_denied_is_refused_naming_it(on_denied: object) -> None:
    app = Celery("hostile", set_as_current=False)
    guard = Guard(MemoryBackend(), [])
    if on_denied in ON_DENIED:
        capped_task(app, SMS, guard=guard, on_denied=on_denied)
        return
    with pytest.raises(ConfigError) as refused:
        capped_task(app, SMS, guard=guard, on_denied=on_denied)  # type: ignore[arg-type]
    assert repr(on_denied) in str(refused.value)
    assert "'defer', 'drop', 'raise'" in str(refused.value)


@settings(max_examples=examples(40))
@given(
    recipient=st.one_of(
        st.text(max_size=40), st.integers(), st.none(), st.binary(max_size=8), st.floats()
    )
)
def test_hostile_arguments_are_counted_or_refused_never_uncapped(recipient: object) -> None:
    app = Celery("hostile", set_as_current=False)
    app.conf.task_always_eager = True
    guard = Guard(MemoryBackend(), [], clock=ManualClock(START))
    ran: list[object] = []

    @capped_task(app, SMS, guard=guard, shared=False, on_denied="drop")
    def send(recipient: object) -> None:
        ran.append(recipient)

    outcomes = []
    for _ in range(3):
        try:
            outcomes.append(send.apply(kwargs={"recipient": recipient}).get())
        except ConfigError:
            outcomes.append("refused")
    assert outcomes in (["refused"] * 3, [None, None, outcomes[2]])
    if outcomes[0] is None:
        assert outcomes[2]["dropped"] is True
        assert len(ran) == 2
    else:
        assert ran == []
