"""An independent review of the Celery port's changes (``rate_limit=`` refused,
``on_denied="raise"`` kept from ``autoretry_for``, a deferral past ``expires`` revoked, a
body's ``Ignore`` keeping its hit), attacked with what Celery users write: base task
classes, ``self.replace`` loops under ``acks_late``, per-call ``ignore_result`` and the
worker's ``task_revoked`` signal.

The worker's paths run without a worker (a request that is not eager, as the pool runs it,
re-sending onto Celery's in-memory broker) on a ManualClock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

pytest.importorskip("celery", reason="the celery extra is not installed")

from celery import Celery, Task
from celery.exceptions import Ignore, Retry
from celery.result import AsyncResult
from celery.signals import task_revoked

from freqguard import ConfigError, Guard, Policy, Rule
from freqguard.integrations.celery import TaskDenied, capped_task
from tests.integrations.celery_rig import app as app
from tests.integrations.test_celery_user_review import _queued
from tests.integrations.test_celery_user_review import guard as guard
from tests.integrations.test_celery_user_review import worker_app as worker_app

ONE = Policy("one", Rule("1/hour", by="recipient", name="rcpt-1h"))


class VendorDown(Exception):
    """The vendor's expected failure, which a base class lists in ``throws``."""


def _run(task: Task, kwargs: dict[str, Any], **request: Any) -> Any:
    """``task`` run as a worker's pool runs a request with these fields."""
    fields = {"retries": 0, "is_eager": False, "called_directly": False, "args": ()}
    task.push_request(kwargs=kwargs, **{**fields, **request})
    try:
        return task.run(**kwargs)
    finally:
        task.pop_request()


# -- base classes ----------------------------------------------------------------------------


def test_raise_keeps_a_base_classs_throws(app: Celery, guard: Guard) -> None:
    """A project's tasks share a base class listing the vendor's expected error in
    ``throws`` (Celery's docs, ``Task.throws``: logged at INFO, without a traceback).
    ``on_denied="raise"`` adds ``TaskDenied`` to ``throws``, and docs/celery.md merges
    ``dont_autoretry_for`` with the base's. Expected: the task's ``throws`` holds both
    ``VendorDown`` and ``TaskDenied``. Instead ``(TaskDenied,)``: the option replaces the
    base's list, and every vendor outage is logged as an ERROR with a traceback."""

    class Vendor(Task):  # type: ignore[misc]
        throws = [VendorDown]  # noqa: RUF012 (a list, as Celery takes it too)

    @capped_task(app, ONE, guard=guard, on_denied="raise", base=Vendor, name="r2.base")
    def send(recipient: str) -> str:
        return "sent"

    assert set(send.throws) == {VendorDown, TaskDenied}


def test_a_base_classs_rate_limit_is_refused(app: Celery, guard: Guard) -> None:
    """The project's base class carries ``rate_limit = "10/m"`` (Celery reads it as the
    task's rate limit, per worker). docs/celery.md: Celery's per-worker bucket beside a cap
    counts each deferred run again, so ``rate_limit=`` beside a cap is a ``ConfigError``.
    Expected: refused as the option is. Instead accepted: the task keeps the per-worker
    bucket."""

    class Throttled(Task):  # type: ignore[misc]
        rate_limit = "10/m"

    with pytest.raises(ConfigError, match="rate_limit"):

        @capped_task(app, ONE, guard=guard, base=Throttled, name="r2.throttled")
        def send(recipient: str) -> str:
            return "sent"


# -- self.replace under acks_late ------------------------------------------------------------


def test_a_replacement_of_an_acks_late_task_counts(worker_app: Celery, guard: Guard) -> None:
    """A sync job walks pages by replacing itself (``return self.replace(page.s(n=n + 1))``,
    Celery's idiom: the replacement inherits the task id), capped at 2 pages an hour per
    account, with ``acks_late``. docs/celery.md: a body that replaces itself keeps its hit,
    and the retried or replaced run is a new hit, decided when it runs. Expected: page 2
    counts (none left), page 3 is deferred. Instead the first page's tie to the task id
    (kept with its hit since ``Ignore`` keeps it) takes page 2, which has the same id, for
    a redelivery: its hit is refunded, and every later page runs uncapped."""
    pages = Policy("pages", Rule("2/hour", by="account", name="acct"))
    ran: list[int] = []

    @capped_task(worker_app, pages, guard=guard, bind=True, acks_late=True, name="r2.page")
    def page(task: Task, account: str, n: int) -> Any:
        ran.append(n)
        return task.replace(page.s(account=account, n=n + 1))

    with pytest.raises(Ignore):
        _run(page, {"account": "a", "n": 1}, id="job")
    for n in (2, 3):
        [message] = _queued(worker_app)  # the replacement, as a worker receives it
        headers = message.headers
        if "replaced_task_nesting" not in headers:  # Celery 5.3.0, the floor: a named gap
            pytest.skip("this Celery sends no replaced_task_nesting (docs/celery.md)")
        assert (headers["id"], headers["replaced_task_nesting"]) == ("job", n - 1)
        request = {"id": headers["id"], "replaced_task_nesting": headers["replaced_task_nesting"]}
        with pytest.raises((Ignore, Retry)):
            _run(page, message.payload[1], **request)
    assert ran == [1, 2]  # the third page waits its turn
    assert guard.peek("pages", account="a").remaining == 0


# -- an expired deferral, revoked as a worker revokes it -------------------------------------


def _expired_deferral(worker_app: Celery, guard: Guard, name: str, **task_options: Any) -> Task:
    @capped_task(worker_app, ONE, guard=guard, name=name, **task_options)
    def send(recipient: str) -> str:
        return "sent"

    assert _run(send, {"recipient": "+1"}, id="first") == "sent"
    return send


def test_an_expired_deferral_is_stored_when_the_caller_keeps_its_result(
    worker_app: Celery, guard: Guard
) -> None:
    """An OTP task is declared ``ignore_result=True`` (most sends need no result); the
    login view sends one with ``apply_async(expires=300, ignore_result=False)`` and waits
    on it (Celery's per-call ``ignore_result``, which the worker honours:
    ``Request.store_errors``). docs/celery.md: a deferral past ``expires`` is revoked "as a
    worker revokes an expired task (state REVOKED, result.get() raises
    TaskRevokedError('expired'))". Expected: REVOKED stored. Instead nothing is stored
    (the task's ``ignore_result`` read, not the call's): PENDING, ``result.get()`` waits
    for ever."""
    send = _expired_deferral(worker_app, guard, "r2.otp-kept", ignore_result=True)
    expires = (datetime.now(timezone.utc) + timedelta(seconds=300)).isoformat()
    with pytest.raises(Ignore):
        _run(send, {"recipient": "+1"}, id="otp", expires=expires, ignore_result=False)
    assert AsyncResult("otp", app=worker_app).state == "REVOKED"


def test_an_expired_deferral_sends_task_revoked(worker_app: Celery, guard: Guard) -> None:
    """A project counts expired OTPs with Celery's ``task_revoked`` signal (its docs:
    "Dispatched when a task is revoked/terminated by the worker", ``expired=True`` for an
    expired one). docs/celery.md: the deferral past ``expires`` is revoked "as a worker
    revokes an expired task". Expected: the signal, with ``expired=True``. Instead none."""
    send = _expired_deferral(worker_app, guard, "r2.otp-told")
    told: list[dict[str, Any]] = []

    def heard(sender: Any = None, **fields: Any) -> None:
        told.append({"sender": sender, **fields})

    task_revoked.connect(heard, weak=False)
    try:
        expires = (datetime.now(timezone.utc) + timedelta(seconds=300)).isoformat()
        with pytest.raises(Ignore):
            _run(send, {"recipient": "+1"}, id="otp", expires=expires)
    finally:
        task_revoked.disconnect(heard)
    assert [(t["sender"], t["expired"], t["request"].id) for t in told] == [(send, True, "otp")]
