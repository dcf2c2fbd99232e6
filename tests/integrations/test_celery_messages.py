"""What a Celery user reads of a capped task: the worker's deferral line names the rule and
the delay; ``on_denied="raise"`` is an expected error (the task's ``throws``: INFO, no
traceback), and its type survives a JSON result backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("celery", reason="the celery extra is not installed")

from celery import Celery
from celery.exceptions import Retry

from freqguard import CapExceeded, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.integrations.celery import TaskDenied, capped_task
from tests.conftest import examples
from tests.integrations.celery_rig import run_as_worker

SMS = Policy("sms", Rule("1/minute", by="recipient", name="rcpt-1m"))


@pytest.fixture
def app() -> Iterator[Celery]:
    app = Celery("capped", broker="memory://", backend="cache+memory://", set_as_current=False)
    app.conf.result_serializer = "json"
    yield app
    app.close()


@pytest.fixture
def guard(clock: ManualClock) -> Guard:
    return Guard(MemoryBackend(), [], clock=clock)


def test_the_deferral_names_the_rule_and_the_delay(app: Celery, guard: Guard) -> None:
    @capped_task(app, SMS, guard=guard, shared=False)
    def send(recipient: str) -> str:
        return "sent"

    run_as_worker(send, "a", recipient="+1")
    with pytest.raises(Retry) as deferred:
        run_as_worker(send, "b", recipient="+1")
    assert str(deferred.value) == "deferred 60.000s by policy 'sms': denied by rcpt-1m"
    with app.connection() as connection, connection.SimpleQueue("celery") as queue:
        queue.get(timeout=1).ack()  # the re-sent task: the broker is the process's


def test_a_raised_denial_is_an_expected_error_of_the_task(app: Celery, guard: Guard) -> None:
    @capped_task(app, SMS, guard=guard, shared=False, on_denied="raise", throws=(KeyError,))
    def send(recipient: str) -> str:
        return "sent"

    assert send.throws == (KeyError, TaskDenied)  # the worker logs these at INFO, bare
    run_as_worker(send, "a", recipient="+1")
    with pytest.raises(TaskDenied) as denied:
        run_as_worker(send, "b", recipient="+1")
    assert isinstance(denied.value, CapExceeded)
    assert denied.value.decision is not None


def test_its_type_and_numbers_survive_a_json_result(app: Celery, guard: Guard) -> None:
    @capped_task(app, SMS, guard=guard, shared=False, on_denied="raise")
    def send(recipient: str) -> str:
        return "sent"

    run_as_worker(send, "a", recipient="+1")
    with pytest.raises(TaskDenied) as denied:
        run_as_worker(send, "b", recipient="+1")
    backend = app.backend
    sent = backend.prepare_exception(denied.value, "json")
    back = backend.exception_to_python(sent)
    assert type(back) is TaskDenied
    assert (back.policy, back.denied_by, back.retry_after) == ("sms", ["rcpt-1m"], 60.0)
    assert back.decision is None
    assert str(back) == str(denied.value)


@settings(max_examples=examples(40))
@given(st.text(max_size=80))
def test_any_message_rebuilds_without_an_error(message: str) -> None:
    rebuilt = TaskDenied(message)
    assert str(rebuilt) == message
    assert isinstance(rebuilt.retry_after, float)
