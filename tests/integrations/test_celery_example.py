"""examples/celery_sms: its policy, deferrals and refunds, the tasks run eagerly on a pinned
clock (the worker's own paths are in test_celery_workers.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("celery", reason="the celery extra is not installed")

from examples import celery_sms
from freqguard import ManualClock

DAY = 1_781_172_000  # 2026-06-11 10:00 UTC, 12:00 in Berlin
EVENING = 1_781_208_000  # 20:00 UTC, 22:00 in Berlin


@pytest.fixture
def clock() -> Iterator[ManualClock]:
    clock = ManualClock(DAY)
    celery_sms.guard.clock = clock
    celery_sms.guard.reset("celery-sms", rules=["vendor"])  # shared by every test's messages
    celery_sms.app.conf.task_always_eager = True
    yield clock
    celery_sms.app.conf.task_always_eager = False
    celery_sms.guard.clock = None


def send(recipient: str, content: str, **options: str) -> Any:
    return celery_sms.send_sms.delay(recipient=recipient, content=content, **options).get()


def test_fifteen_a_minute_then_deferred_to_its_turn(clock: ManualClock) -> None:
    recipient = uuid.uuid4().hex
    outcomes = [send(recipient, f"news {n}", tz="Europe/Berlin") for n in range(16)]
    assert all(isinstance(o, str) and o.startswith("msg-") for o in outcomes[:15])
    assert outcomes[15]["deferred"] is True
    assert outcomes[15]["denied_by"] == ["rcpt-1m"]
    assert outcomes[15]["retry_after"] == 60.0
    clock.advance(60)
    assert send(recipient, "news 15", tz="Europe/Berlin").startswith("msg-")


def test_the_same_text_twice_in_59_seconds(clock: ManualClock) -> None:
    recipient = uuid.uuid4().hex
    send(recipient, "Your code is 1234", priority="transactional")
    send(recipient, "Your code is 1234", priority="transactional")
    third = send(recipient, "Your code is 1234", priority="transactional")
    assert (third["denied_by"], third["retry_after"]) == (["content-59s"], 59.0)


def test_marketing_waits_for_the_morning_and_codes_do_not(clock: ManualClock) -> None:
    clock.set(EVENING)
    recipient = uuid.uuid4().hex
    late = send(recipient, "50% off", tz="Europe/Berlin", priority="marketing")
    assert (late["denied_by"], late["retry_after"]) == (["quiet-hours"], 10 * 3600.0)
    code = send(recipient, "Your code is 9", tz="Europe/Berlin", priority="transactional")
    assert code.startswith("msg-")


def test_the_vendor_limit_is_shared_by_every_recipient(clock: ManualClock) -> None:
    outcomes = [send(uuid.uuid4().hex, "hello", priority="transactional") for _ in range(201)]
    assert sum(isinstance(o, str) for o in outcomes) == 200
    assert outcomes[200]["denied_by"] == ["vendor"]
    assert outcomes[200]["retry_after"] == pytest.approx(1.0)  # at most 200 in any second


def test_a_vendor_failure_is_refunded_and_retried(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures = iter([True, True])

    def flaky(recipient: str, content: str) -> str:
        if next(failures, False):
            raise celery_sms.VendorError("timed out")
        return "msg-ok"

    monkeypatch.setattr(celery_sms, "deliver", flaky)
    recipient = uuid.uuid4().hex
    assert send(recipient, "Your code is 5", priority="transactional") == "msg-ok"
    minute = celery_sms.guard.peek(
        "celery-sms", recipient=recipient, content="x", priority="transactional", tz="UTC"
    )
    assert {s.rule.id: s.remaining for s in minute.rules}["rcpt-1m"] == 14  # counted once
