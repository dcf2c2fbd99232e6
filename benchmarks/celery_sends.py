"""A Celery worker's sends per second, with and without capped_task's cap.

    python -m benchmarks.celery_sends [--tasks 1000] [--rounds 2] [--mode worker|eager]

Starts its own redis-server on a free loopback port: the broker (db 1) and the cap's store
(db 0). Two tasks with the same body (an INCR on the store, standing for the vendor call):
``plain`` is a Celery task, ``capped`` the same under ``capped_task`` with the four-rule SMS
policy (sliding logs; 15/minute and 50/day per recipient, 2/59 s and 5/59 min per recipient
and content) on Redis. Each task goes to a distinct recipient, so none is denied: what is
measured is what the decision adds to a send.

* ``worker``: a ``celery worker --pool prefork -c 2`` in a subprocess; the tasks are sent
  first (``--tasks`` of one kind), then the worker started and timed from its first run to
  its last (the store's clock, from the bodies' INCR and TIME). Cases alternate each round.
* ``eager``: ``task.apply()`` in this process, no broker: a task's own cost, cap included.

Reported: the median of the rounds, tasks per second per case, and the capped/plain ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from celery import Celery
from redis import Redis

from benchmarks.redis_sms import sms_policy
from freqguard import Guard, MemoryBackend, Strategy, backend_from_url
from freqguard.integrations.celery import capped_task

ROOT = Path(__file__).resolve().parent.parent
STORE = os.environ.get("FREQGUARD_BENCH_STORE")  # the worker's, from the environment

app = Celery("celery-sends", set_as_current=False)
app.conf.update(
    broker_url=os.environ.get("FREQGUARD_BENCH_BROKER", "memory://"),
    task_ignore_result=True,
    worker_prefetch_multiplier=16,
)
guard = Guard(backend_from_url(STORE) if STORE else MemoryBackend(), [])
_store = Redis.from_url(STORE) if STORE else None
SMS = sms_policy(Strategy.SLIDING_LOG)


def _record() -> None:
    """The body's work: in a worker, count the send and keep the store's time of the first
    and the last; run eagerly, nothing (the figure is then the task's own cost)."""
    if _store is None:
        return
    seconds, micros = _store.time()
    now = seconds + micros / 1e6
    pipe = _store.pipeline(transaction=False)
    pipe.incr("bench:sent")
    pipe.set("bench:first", now, nx=True)
    pipe.set("bench:last", now)
    pipe.execute()


@app.task(name="bench.plain")  # type: ignore[untyped-decorator]
def plain(recipient: str, content: str) -> None:
    _record()


@capped_task(app, SMS, guard=guard, name="bench.capped")
def capped(recipient: str, content: str) -> None:
    _record()


def worker_round(url: str, kind: str, tasks: int) -> float:
    """Tasks per second of a prefork worker (two processes) draining ``tasks`` sends."""
    store = Redis.from_url(f"{url}/0")
    store.flushall()
    client = Celery("bench-client", broker=f"{url}/1", set_as_current=False)
    for n in range(tasks):
        client.send_task(f"bench.{kind}", kwargs={"recipient": f"+1555{n:07d}", "content": "hi"})
    client.close()
    env = {**os.environ, "FREQGUARD_BENCH_STORE": f"{url}/0", "FREQGUARD_BENCH_BROKER": f"{url}/1"}
    argv = [sys.executable, "-m", "celery", "-A", "benchmarks.celery_sends", "worker"]
    argv += ["--pool", "prefork", "-c", "2", "-l", "WARNING", "--without-gossip"]
    argv += ["--without-mingle", "--without-heartbeat"]
    worker = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while int(store.get("bench:sent") or 0) < tasks:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError(f"{kind}: {store.get('bench:sent')!r} of {tasks} ran")
            time.sleep(0.1)  # polling a real worker
    finally:
        worker.terminate()
        worker.wait(60)
    first, last = float(store.get("bench:first") or 0), float(store.get("bench:last") or 0)
    store.close()
    return (tasks - 1) / (last - first)


_EAGER: dict[str, object] = {}  # url -> the capped task on a Redis guard, made once


def eager_round(url: str, kind: str, tasks: int) -> float:
    """Tasks per second of ``task.apply()`` in this process, the cap on Redis."""
    task = plain
    if kind == "capped":
        if url not in _EAGER:
            local = Guard(backend_from_url(f"{url}/0"), [])
            _EAGER[url] = capped_task(app, SMS, guard=local, name="bench.eager")(plain.run)
        task = _EAGER[url]
        with Redis.from_url(f"{url}/0") as store:
            store.flushall()
    began = time.perf_counter()
    for n in range(tasks):
        task.apply(kwargs={"recipient": f"+1555{n:07d}", "content": "hi"})
    return tasks / (time.perf_counter() - began)


def main() -> None:
    from tests.servers import standalone

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--mode", choices=("worker", "eager"), default="worker")
    args = parser.parse_args()
    one_round = worker_round if args.mode == "worker" else eager_round
    rates: dict[str, list[float]] = {"plain": [], "capped": []}
    with tempfile.TemporaryDirectory() as tmp, standalone(Path(tmp)) as server:
        for n in range(args.rounds):
            for kind in ("plain", "capped") if n % 2 == 0 else ("capped", "plain"):
                rates[kind].append(one_round(server.url, kind, args.tasks))
                print(f"round {n + 1} {kind}: {rates[kind][-1]:,.0f} tasks/s")
    median = {kind: statistics.median(found) for kind, found in rates.items()}
    print(f"{args.mode}, {args.tasks} tasks, median of {args.rounds}:")
    for kind, rate in median.items():
        print(f"  {kind:<7} {rate:>8,.0f} tasks/s")
    print(f"  capped/plain {median['capped'] / median['plain']:.3f}")


if __name__ == "__main__":
    main()
