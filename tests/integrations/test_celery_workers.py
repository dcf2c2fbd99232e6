"""capped_task under a real Celery worker (prefork, two processes) on real brokers: RabbitMQ
at 127.0.0.1:5672 (skipped when it is not reachable) and a Redis broker this suite starts;
the caps on a real Redis store, decided on its time.

This module is also the worker's app (``celery -A tests.integrations.test_celery_workers
worker``): the worker reads its broker, result backend, store and queue from the environment
the fixture gives it. The test side sends by task name from an app of its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

pytest.importorskip("celery", reason="the celery extra is not installed")

from celery import Celery
from celery.result import AsyncResult
from redis import Redis

from freqguard import (
    BackendUnavailable,
    CapExceeded,
    Decision,
    Guard,
    MemoryBackend,
    Policy,
    Rule,
    backend_from_url,
)
from freqguard.integrations.celery import TaskDenied, capped_task
from tests.servers import RedisServer

pytestmark = [
    pytest.mark.slow,  # real Celery worker processes on RabbitMQ and Redis
    pytest.mark.xdist_group("rabbitmq"),  # one broker for the machine: one worker's tests at a time
]

ROOT = Path(__file__).resolve().parent.parent.parent
RABBITMQ = "amqp://guest:guest@127.0.0.1:5672//"
STORE = os.environ.get("FREQGUARD_TEST_STORE")  # set in the worker only

app = Celery("freqguard-workers", set_as_current=False)
app.conf.update(
    broker_url=os.environ.get("FREQGUARD_TEST_BROKER", "memory://"),
    result_backend=os.environ.get("FREQGUARD_TEST_RESULTS", "cache+memory://"),
    task_default_queue=os.environ.get("FREQGUARD_TEST_QUEUE", "celery"),
    broker_connection_retry_on_startup=True,
)


class _Admissions:
    """An observer in the worker: each admitted hit of the window's policy, at the µs the
    store judged it (its receipt's time), so the test reads when the cap admitted, not when
    a loaded worker got round to recording a run."""

    def decided(self, decision: Decision, context: Mapping[str, str], seconds: float) -> None:
        if decision.policy == "celery-window" and decision.allowed and STORE is not None:
            assert decision.receipt is not None
            with Redis.from_url(STORE) as client:
                at = decision.receipt.times_us[0]
                client.rpush(f"admitted:{context['recipient']}", str(at))

    def failed(self, error: BackendUnavailable, policy: str, backend: str) -> None:
        pass


guard = Guard(backend_from_url(STORE) if STORE else MemoryBackend(), [], observers=[_Admissions()])

WINDOW = Policy("celery-window", Rule("2 per 2 seconds", by="recipient", name="two-in-2s"))
DROPPING = Policy("celery-drop", Rule("2/minute", by="recipient"))
RAISING = Policy("celery-raise", Rule("1/minute", by="recipient"))
HOLDING = Policy("celery-hold", Rule("2/minute", by="recipient"))


def _store_time() -> float:
    assert STORE is not None
    with Redis.from_url(STORE) as client:
        seconds, micros = client.time()
    return float(seconds + micros / 1e6)


@capped_task(app, WINDOW, guard=guard, name="fg.window", max_retries=0)
def window_send(recipient: str, content: str) -> None:
    """Records when it ran, on the store's clock, the clock the cap is decided on."""
    assert STORE is not None
    with Redis.from_url(STORE) as client:
        client.rpush(f"runs:{recipient}", f"{_store_time()} {content}")


@capped_task(app, DROPPING, guard=guard, name="fg.drop", on_denied="drop")
def drop_send(recipient: str, fail: bool) -> str:
    if fail:
        raise RuntimeError("vendor timed out")
    return "sent"


@capped_task(app, HOLDING, guard=guard, name="fg.hold", acks_late=True, on_denied="drop")
def hold_send(recipient: str) -> str:
    """Counts its starts, then waits (bounded) for the test's go-ahead."""
    assert STORE is not None
    with Redis.from_url(STORE) as client:
        client.incr(f"started:{recipient}")
        deadline = time.monotonic() + 30
        while not client.exists(f"go:{recipient}") and time.monotonic() < deadline:
            time.sleep(0.05)  # the test kills this worker here, or lets it finish
    return "sent"


@capped_task(app, RAISING, guard=guard, name="fg.raise", on_denied="raise")
def raise_send(recipient: str) -> str:
    return "sent"


def _rabbitmq_up() -> bool:
    probe = Celery("freqguard-probe", broker=RABBITMQ, set_as_current=False)
    try:
        with probe.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=2)
    except Exception:
        return False
    finally:
        probe.close()
    return True


def _redis_broker_refused(url: str) -> str | None:
    """Why kombu's Redis transport refuses this redis-py, if it does (kombu 5.7 needs 6.1;
    freqguard's floor is 5.2.1, as the lowest-3.10 job installs it)."""
    from kombu.exceptions import VersionMismatch

    probe = Celery("freqguard-probe", broker=url, set_as_current=False)
    try:
        with probe.connection_for_write() as connection:
            connection.default_channel  # noqa: B018 (opening it is the check)
    except VersionMismatch as exc:
        return str(exc)
    finally:
        probe.close()
    return None


class Worker:
    """A ``celery worker`` process (prefork, two children) and an app to send to it."""

    def __init__(self, broker: str, store: str, results: str, logs: Path) -> None:
        self.queue = f"freqguard-test-{uuid.uuid4().hex[:12]}"  # RabbitMQ is shared
        self.env = {
            **os.environ,
            "FREQGUARD_TEST_BROKER": broker,
            "FREQGUARD_TEST_RESULTS": results,
            "FREQGUARD_TEST_STORE": store,
            "FREQGUARD_TEST_QUEUE": self.queue,
            "PYTHONPATH": str(ROOT),
        }
        self.log = logs / f"{self.queue}.log"
        self.client = Celery("freqguard-client", broker=broker, backend=results)
        self.client.conf.task_default_queue = self.queue
        self.store = Redis.from_url(store)
        self.start()

    def start(self) -> None:
        """Start the worker process (again) and wait until it consumes."""
        argv = [sys.executable, "-m", "celery", "-A", "tests.integrations.test_celery_workers"]
        argv += ["worker", "--pool", "prefork", "-c", "2", "-l", "INFO", "-n", f"{self.queue}@%h"]
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat", "-Q", self.queue]
        self.log.write_text("")
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                argv, env=self.env, cwd=ROOT, stdout=out, stderr=out, start_new_session=True
            )
        deadline = time.monotonic() + 60
        while "ready." not in self.log.read_text():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start:\n{self.log.read_text()}")
            time.sleep(0.1)  # polling a real process coming up, not test time

    def crash(self) -> None:
        """SIGKILL the worker and its children (its own process group): no ack, no refund."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def send(self, name: str, **kwargs: object) -> AsyncResult:
        return self.client.send_task(name, kwargs=kwargs)

    def runs(self, recipient: str) -> list[float]:
        return sorted(float(r.split()[0]) for r in self.store.lrange(f"runs:{recipient}", 0, -1))

    def admitted(self, recipient: str) -> list[int]:
        """When the cap admitted each run, µs on the store's clock (the worker's observer)."""
        return sorted(int(r) for r in self.store.lrange(f"admitted:{recipient}", 0, -1))

    def stop(self) -> None:
        self.process.terminate()  # warm shutdown: the worker ends its children
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.client.conf.broker_url.startswith("amqp"):
            with self.client.connection_for_write() as connection:
                connection.default_channel.queue_delete(self.queue)
        self.client.close()  # the broker's connections; not the result backend's
        results = self.client.backend
        consumer = getattr(results, "result_consumer", None)
        if consumer is not None:
            consumer.stop()  # its pub/sub connection
        if isinstance(getattr(results, "client", None), Redis):
            results.client.connection_pool.disconnect()  # its own
        self.store.close()


@pytest.fixture(scope="module", params=["rabbitmq", "redis"])
def worker(
    request: pytest.FixtureRequest,
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Worker]:
    if request.param == "rabbitmq":
        if not _rabbitmq_up():
            pytest.skip(f"RabbitMQ is not reachable at {RABBITMQ}")
        broker = RABBITMQ
    else:
        broker = f"{redis_server.url}/1"
        refused = _redis_broker_refused(broker)
        if refused:
            pytest.skip(f"Celery's Redis broker: {refused}")
    store, results = f"{redis_server.url}/0", f"{redis_server.url}/2"
    started = Worker(broker, store, results, tmp_path_factory.mktemp("celery"))
    yield started
    started.stop()


@pytest.mark.slow  # 6 s a broker: three windows of 2 s, in real time
def test_k_run_per_window_and_the_rest_when_it_frees(worker: Worker) -> None:
    recipient, sent = uuid.uuid4().hex, 7
    results = [worker.send("fg.window", recipient=recipient, content=str(i)) for i in range(sent)]
    deadline = time.monotonic() + 30
    while len(worker.runs(recipient)) < sent and time.monotonic() < deadline:
        time.sleep(0.2)  # real workers, real time: polled with a deadline
    assert len(worker.runs(recipient)) == sent, worker.log.read_text()
    admitted = worker.admitted(recipient)  # when the store judged each admitted hit
    assert len(admitted) == sent
    # at most 2 in any 2 s, on the clock the cap decides on
    assert sum(t < admitted[0] + 2_000_000 for t in admitted) == 2
    assert all(b - a >= 2_000_000 for a, b in zip(admitted, admitted[2:], strict=False))
    # deferred to when the window freed, not later: each pair's first within a bound of
    # its window's end (a deferral's countdown is the decision's retry_after; the bound is
    # the broker's and the worker's delivery, loose on a loaded machine)
    assert admitted[-1] - admitted[0] < (6 + 3) * 1_000_000
    # deferrals are retries that never spent max_retries=0
    assert all(r.get(timeout=10) is None for r in results)


def test_a_failing_body_refunds_and_drop_returns_dropped(worker: Worker) -> None:
    recipient = uuid.uuid4().hex
    for _ in range(3):
        with pytest.raises(RuntimeError, match="vendor timed out"):
            worker.send("fg.drop", recipient=recipient, fail=True).get(timeout=20)
    outcomes = [
        worker.send("fg.drop", recipient=recipient, fail=False).get(timeout=20) for _ in range(3)
    ]
    assert outcomes[:2] == ["sent", "sent"]  # the failed runs gave their hits back
    assert outcomes[2]["dropped"] is True


def test_raise_mode_fails_the_task_with_cap_exceeded(worker: Worker) -> None:
    recipient = uuid.uuid4().hex
    assert worker.send("fg.raise", recipient=recipient).get(timeout=20) == "sent"
    denied = worker.send("fg.raise", recipient=recipient)
    # JSON results carry an exception as its type's name and its message: TaskDenied is
    # rebuilt from its message, a CapExceeded with its numbers (a bare Exception before)
    with pytest.raises(TaskDenied, match=r"policy 'celery-raise' denied by") as raised:
        denied.get(timeout=20)
    assert isinstance(raised.value, CapExceeded)
    assert (raised.value.policy, raised.value.denied_by) == ("celery-raise", ["sl.1.60s"])
    assert 0 < raised.value.retry_after <= 60
    assert denied.state == "FAILURE"


def _wait_for(check: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {seconds} s")
        time.sleep(0.1)  # real workers, real time: polled with a deadline


@pytest.mark.slow  # two worker starts and a crash: ~12 s
def test_a_task_redelivered_after_its_worker_died_counts_once(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """acks_late: the worker dies mid-body, RabbitMQ delivers the task again to the next
    worker, which runs it on the first delivery's hit (the once-hit tied to the task id)."""
    if not _rabbitmq_up():
        pytest.skip(f"RabbitMQ is not reachable at {RABBITMQ}")
    store = f"{redis_server.url}/0"
    worker = Worker(RABBITMQ, store, f"{redis_server.url}/2", tmp_path)
    try:
        recipient = uuid.uuid4().hex
        result = worker.send("fg.hold", recipient=recipient)
        _wait_for(lambda: worker.store.get(f"started:{recipient}") == b"1", "the first start")
        worker.crash()
        worker.store.set(f"go:{recipient}", 1)
        worker.start()
        assert result.get(timeout=30) == "sent"
        assert worker.store.get(f"started:{recipient}") == b"2"  # delivered and run twice
        with Guard(backend_from_url(store), [HOLDING]) as check:
            assert check.peek("celery-hold", recipient=recipient).remaining == 1  # one hit
    finally:
        worker.stop()
