"""A Celery user's review: a messaging app's tasks, written with Celery's own idioms
(``rate_limit=``, ``autoretry_for``, ``retry_backoff``, ``max_retries``, ``self.retry``,
``acks_late``, ``Ignore``, canvas, ``expires``), ported to ``capped_task``. Each idiom either
does what docs/celery.md says, is refused naming freqguard's way, or counts exactly: a run
counts once, a deferred one when it runs, a failed one not at all.

The worker's paths run without a worker (``run_as_worker``: a request that is not eager,
re-sending onto Celery's in-memory broker) on a ManualClock; one slow test runs a canvas
through Celery's own in-thread test worker."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("celery", reason="the celery extra is not installed")

from celery import Celery, Task, chain, chord, group
from celery.exceptions import Ignore, Retry
from celery.result import AsyncResult

from freqguard import CapExceeded, ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.integrations.celery import TASK_ONCE, TaskDenied, capped_task
from tests.conftest import START
from tests.integrations.celery_rig import app as app
from tests.integrations.celery_rig import run_as_worker

ROOT = Path(__file__).resolve().parent.parent.parent
# the README's recipient caps and the vendor's throttle, one policy, one decision a message
SMS = Policy(
    "sms",
    Rule("15/minute", by="recipient", name="rcpt-1m"),
    Rule("50/day", by="recipient", name="rcpt-1d"),
    Rule("200/second", name="vendor"),
)
ONE = Policy("one", Rule("1/hour", by="recipient", name="rcpt-1h"))


@pytest.fixture
def guard() -> Guard:
    return Guard(MemoryBackend(), [], clock=ManualClock(START))


@pytest.fixture
def worker_app(app: Celery) -> Iterator[Celery]:
    app.conf.task_always_eager = False
    _queued(app)  # the in-memory broker's queues are the process's: start empty
    yield app
    _queued(app)


def _queued(app: Celery, queue: str = "celery") -> list[Any]:
    """The messages on the in-memory broker's queue (taken off it)."""
    found: list[Any] = []
    with app.connection() as connection, connection.SimpleQueue(queue) as simple:
        while True:
            try:
                message = simple.get(block=False)
            except simple.Empty:
                return found
            message.ack()
            found.append(message)


def _deny(task: Task, task_id: str, raises: Any, **request: Any) -> None:
    """``task`` run as a worker runs a request with more fields than ``run_as_worker``
    gives (``expires``, a canvas), to one recipient already at its cap: ``raises``."""
    task.push_request(
        id=task_id, retries=0, is_eager=False, called_directly=False, args=(),
        kwargs={"recipient": "+1"}, **request,
    )  # fmt: skip
    try:
        with pytest.raises(raises):
            task.run(recipient="+1")
    finally:
        task.pop_request()


# -- Celery's rate_limit beside a cap --------------------------------------------------------


def test_celery_rate_limit_beside_a_cap_is_refused(app: Celery, guard: Guard) -> None:
    """A user ports ``@app.task(rate_limit="10/m")`` and keeps the option. Celery's
    rate_limit is per worker (its docs, ``Task.rate_limit``: "this is a per worker instance
    rate limit, and not a global rate limit"), so N workers send N x 10 a minute, and its
    bucket takes a token for each deferred redelivery too (the worker's ETA path,
    ``limit_post_eta``): a second, per-worker count of runs that capped_task may defer.
    Expected: refused at decoration, naming freqguard's way (a rule of the policy, one count
    for the cluster). Instead: accepted silently and kept on the task."""
    with pytest.raises(ConfigError, match=r"rate_limit.*per worker.*Rule\("):

        @capped_task(app, SMS, guard=guard, shared=False, rate_limit="10/m", name="sms.rl")
        def send(recipient: str) -> str:
            return "sent"


def test_docs_say_celerys_rate_limit_against_a_cap() -> None:
    """A Celery user looks in docs/celery.md for their ``rate_limit`` and
    ``app.control.rate_limit``: per worker, against freqguard's cluster-wide rules.
    Expected: a section that names them. Instead: the page never mentions rate_limit."""
    text = (ROOT / "docs" / "celery.md").read_text()
    assert re.search(r"^#+ .*rate_limit", text, re.M), "no section on Celery's rate_limit"
    assert "app.control.rate_limit" in text


# -- autoretry_for meeting a denial ----------------------------------------------------------


def test_raise_with_autoretry_for_exception_fails_with_task_denied(
    worker_app: Celery, guard: Guard
) -> None:
    """The app's tasks carry ``autoretry_for=(Exception,), retry_backoff=True,
    max_retries=3`` for vendor errors. With ``on_denied="raise"`` docs/celery.md says a
    denied task "fails with TaskDenied" (state FAILURE). Instead Celery's autoretry catches
    the TaskDenied (an Exception) and retries it on its guessed back-off, spending the
    retries the task keeps for vendor failures: the denial is a RETRY, not a FAILURE."""

    @capped_task(
        worker_app,
        ONE,
        guard=guard,
        shared=False,
        on_denied="raise",
        autoretry_for=(Exception,),
        retry_backoff=True,
        max_retries=3,
        name="sms.raise-autoretry",
    )
    def send(recipient: str) -> str:
        return "sent"

    assert run_as_worker(send, "first", recipient="+1") == "sent"
    with pytest.raises(TaskDenied, match="denied by rcpt-1h"):
        run_as_worker(send, "second", recipient="+1")
    assert _queued(worker_app) == []  # no retry sent


def test_autoretry_for_the_denial_is_refused_naming_defer(app: Celery, guard: Guard) -> None:
    """A user writes ``on_denied="raise", autoretry_for=(CapExceeded,)`` to have a denied
    task retried: Celery retries it on its back-off (not at ``retry_after``) and counts each
    toward ``max_retries``, what ``on_denied="defer"`` exists to avoid (docs/celery.md,
    "Deferral is exact and free"). Expected: refused, naming ``on_denied="defer"``.
    Instead: accepted."""
    with pytest.raises(ConfigError, match=r"autoretry_for.*on_denied=\"defer\""):

        @capped_task(
            app,
            ONE,
            guard=guard,
            shared=False,
            on_denied="raise",
            autoretry_for=(CapExceeded,),
            name="x",
        )
        def send(recipient: str) -> str:
            return "sent"


def test_autoretry_with_defer_spends_no_retry(worker_app: Celery, guard: Guard) -> None:
    """Found right: with ``on_denied="defer"`` Celery's autoretry lets the deferral's Retry
    through, and the copy keeps ``retries`` (max_retries=0 still deferred)."""

    @capped_task(
        worker_app,
        ONE,
        guard=guard,
        shared=False,
        autoretry_for=(Exception,),
        max_retries=0,
        name="sms.d",
    )
    def send(recipient: str) -> str:
        return "sent"

    run_as_worker(send, "a", recipient="+1")
    with pytest.raises(Retry):
        run_as_worker(send, "b", retries=0, recipient="+1")
    [message] = _queued(worker_app)
    assert (message.headers["id"], message.headers["retries"]) == ("b", 0)


# -- expires passing while deferred ----------------------------------------------------------


def test_a_deferral_past_its_expiry_is_not_sent(worker_app: Celery, guard: Guard) -> None:
    """A web request sends an OTP with ``apply_async(expires=300)``: useless after five
    minutes. Denied for an hour, capped_task re-sends it with an ETA an hour away and the
    same ``expires``: a worker holds it unacknowledged for the hour (past RabbitMQ's
    30-minute consumer_timeout, docs/celery.md "Long deferrals") only for Celery to revoke
    it as expired then. Expected: not sent; the task ends as Celery ends an expired one,
    REVOKED. Instead: the copy is sent with its eta after its expires."""

    @capped_task(worker_app, ONE, guard=guard, shared=False, name="sms.otp")
    def send(recipient: str) -> str:
        return "sent"

    run_as_worker(send, "first", recipient="+1")
    expires = (datetime.now(timezone.utc) + timedelta(seconds=300)).isoformat()
    _deny(send, "otp", (Ignore, Retry), expires=expires)
    assert [m.headers["eta"] for m in _queued(worker_app)] == []
    assert AsyncResult("otp", app=worker_app).state == "REVOKED"


def test_a_deferral_before_its_expiry_is_sent(worker_app: Celery, guard: Guard) -> None:
    """Found right (and kept by the fix): a turn that comes before the expiry is deferred,
    the copy keeping ``expires``."""
    guard.add_policy(Policy("short", Rule("1/minute", by="recipient")))

    @capped_task(worker_app, "short", guard=guard, shared=False, name="sms.short")
    def send(recipient: str) -> str:
        return "sent"

    run_as_worker(send, "first", recipient="+1")
    expires = (datetime.now(timezone.utc) + timedelta(seconds=300)).isoformat()
    _deny(send, "otp", Retry, expires=expires)
    [message] = _queued(worker_app)
    assert message.headers["expires"] == expires


# -- Celery's Ignore after the call ----------------------------------------------------------


def test_ignore_after_the_call_keeps_its_hit(worker_app: Celery, guard: Guard) -> None:
    """Celery's docs (Tasks, "Semipredicates: Ignore") store a result by hand: the task
    makes its call, ``update_state(state=SUCCESS, ...)``, then ``raise Ignore()``; the
    message is acknowledged, nothing retries it. docs/celery.md refunds a body that raises
    because its call failed or will be retried; this one did neither. Expected: the run
    counts once (a second message to the recipient is denied). Instead: refunded, so every
    such send is uncapped."""
    sent: list[str] = []

    @capped_task(
        worker_app, ONE, guard=guard, shared=False, bind=True, acks_late=True, name="sms.ignore"
    )
    def send(task: Task, recipient: str) -> None:
        sent.append(recipient)  # the vendor call
        task.update_state(state="SUCCESS", meta={"vendor_id": "m-1"})
        raise Ignore()

    with pytest.raises(Ignore):
        run_as_worker(send, "t1", recipient="+1")
    assert guard.peek("one", recipient="+1").remaining == 0
    with pytest.raises(Retry):  # the next one waits its turn
        run_as_worker(send, "t2", recipient="+1")
    assert sent == ["+1"]
    assert guard.peek(TASK_ONCE.name, task_id="t1").remaining == 0  # its tie kept too


# -- self.retry under a lease; canvas --------------------------------------------------------


def test_retry_under_a_lease_gives_back_the_lease_and_its_units(
    worker_app: Celery, guard: Guard
) -> None:
    """Found right: ``raise self.retry(countdown=5)`` in a body holding a lease refunds it
    whole (the lease and its rate units); the retried run takes its own."""
    vendor = Policy(
        "vendor", Rule("1 concurrent", lease=60, name="flight"), Rule("5/minute", name="rate")
    )

    @capped_task(
        worker_app, vendor, guard=guard, shared=False, bind=True, max_retries=3, name="v.call"
    )
    def call(task: Task, n: int) -> str:
        raise task.retry(countdown=5)

    with pytest.raises(Retry):
        run_as_worker(call, "v1", n=1)
    assert {s.rule.id: s.remaining for s in guard.peek("vendor").rules} == {
        "flight": 1,
        "rate": 5,
    }
    [message] = _queued(worker_app)
    assert message.headers["retries"] == 1


def test_a_deferred_copy_keeps_its_canvas(worker_app: Celery, guard: Guard) -> None:
    """Found right: a deferred chord header or chain link is re-sent with its chord, group,
    chain and callbacks, so the canvas goes on when the copy runs."""

    @capped_task(worker_app, ONE, guard=guard, shared=False, name="sms.canvas")
    def send(recipient: str) -> str:
        return "sent"

    run_as_worker(send, "first", recipient="+1")
    body = worker_app.signature("collect")
    canvas = {"chord": dict(body), "callbacks": [dict(body)], "chain": [dict(body)]}
    _deny(send, "h2", Retry, group="g1", group_index=1, **canvas)
    [message] = _queued(worker_app)
    assert (message.headers["group"], message.headers["group_index"]) == ("g1", 1)
    embed = message.payload[2]
    assert embed["chord"]["task"] == embed["callbacks"][0]["task"] == "collect"
    assert embed["chain"][0]["task"] == "collect"


@pytest.fixture
def threaded_worker() -> Iterator[tuple[Celery, list[tuple[str, int]]]]:
    from celery.contrib.testing.worker import start_worker

    app = Celery("review", broker="memory://", backend="cache+memory://", set_as_current=False)
    app.conf.broker_connection_retry_on_startup = True
    app.conf.broker_transport_options = {"polling_interval": 0.05}  # the memory broker's
    guard = Guard(MemoryBackend(), [])  # on real time: the worker's ETAs are
    runs: list[tuple[str, int]] = []

    @capped_task(app, Policy("pair", Rule("2 per 1 second", by="recipient")), guard=guard,
                 name="review.send", shared=False)  # fmt: skip
    def send(recipient: str, n: int) -> int:
        runs.append((recipient, n))
        return n

    @app.task(name="review.collect", shared=False)  # type: ignore[untyped-decorator]
    def collect(results: list[int]) -> list[int]:
        return sorted(results)

    @app.task(name="review.then", shared=False)  # type: ignore[untyped-decorator]
    def then(n: int) -> str:
        return f"then {n}"

    with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False):
        yield app, runs
    app.close()


@pytest.mark.slow  # an in-thread Celery worker on real time: ~4 s
def test_a_chord_chain_and_group_with_deferred_members_complete(
    threaded_worker: tuple[Celery, list[tuple[str, int]]],
) -> None:
    """Found right: a chord of four to one recipient at 2 a second defers two header tasks;
    the body runs once all four ran, each counted once; a chain's and a group's deferred
    members finish too."""
    app, runs = threaded_worker
    send, collect, then = (app.tasks[f"review.{name}"] for name in ("send", "collect", "then"))
    result = chord([send.s(recipient="+1", n=i) for i in range(4)])(collect.s())
    assert result.get(timeout=30) == [0, 1, 2, 3]
    chained = [chain(send.s(recipient="+2", n=i), then.s()).apply_async() for i in range(3)]
    assert [c.get(timeout=30) for c in chained] == ["then 0", "then 1", "then 2"]
    grouped = group(send.s(recipient="+3", n=i) for i in range(3)).apply_async()
    assert sorted(grouped.get(timeout=30)) == [0, 1, 2]
    assert sorted(runs) == sorted({*runs})  # each body ran once: a deferral is no run
    assert len(runs) == 10
