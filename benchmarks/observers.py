"""What observers cost a hit: none vs Prometheus vs OpenTelemetry vs logging, same run.

    python -m benchmarks.observers [--messages 10000] [--rounds 21] [--redis-messages 2000]

The four-rule SMS policy on the seeded Zipf stream, ``Guard.hit`` sequentially, through:

* no observers (the baseline);
* an observer that does nothing (what the guard's own reporting costs: timing the hit,
  calling the observers);
* ``PrometheusObserver`` on its own ``CollectorRegistry``;
* ``OpenTelemetryObserver`` on the SDK's ``MeterProvider`` with an ``InMemoryMetricReader``
  (the SDK's recording path, which every exporter shares; nothing is exported);
* ``LoggingObserver`` with the ``freqguard`` logger at INFO (denials, at DEBUG, are skipped).

Each round replays the same messages through every variant, in a rotated order, each run on a
fresh (or emptied) backend right beside a run without observers (before it or after it, in
turn), so that the machine's drift hits both sides of a pair alike. Reported per variant, in
wall time and in the benchmarking thread's CPU time (steadier on a shared machine; on Redis it
leaves out the wait for the server): the median µs per hit, and the median of the pairs'
ratios. Then each observer's ``decided`` alone, on the stream's decisions (its own cost, steady
even when the machine is not). Then the hits again on a redis-server this script starts on a
free loopback port (and stops at exit), flushed before every run.
"""

from __future__ import annotations

import argparse
import gc
import logging
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry
from redis import Redis

from benchmarks.workload import BY, RULES, sms_stream
from freqguard import Guard, MemoryBackend, Policy, Rate, Rule
from freqguard.backends.base import SyncBackend
from freqguard.backends.redis import RedisBackend
from freqguard.observe import LoggingObserver, Observer, OpenTelemetryObserver, PrometheusObserver
from tests.servers import standalone

Stream = list[tuple[str, str]]
POLICY = Policy(
    "sms",
    *(
        Rule(Rate(limit, timedelta(seconds=window)), by=by, name=f"r{i}")
        for i, ((limit, window), by) in enumerate(zip(RULES, BY, strict=True))
    ),
)


class NoOp:
    """An observer that does nothing: what the guard's own reporting costs."""

    def decided(self, decision: object, context: object, seconds: float) -> None:
        pass

    def failed(self, error: object, policy: str, backend: str) -> None:
        pass


def _noop() -> list[Observer]:
    return [NoOp()]


def _prometheus() -> list[Observer]:
    return [PrometheusObserver(CollectorRegistry())]


def _otel() -> list[Observer]:
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return [OpenTelemetryObserver(provider.get_meter("bench"))]


def _logging() -> list[Observer]:
    return [LoggingObserver()]


VARIANTS: dict[str, Callable[[], list[Observer]]] = {
    "none": list,
    "no-op observer": _noop,
    "prometheus": _prometheus,
    "opentelemetry": _otel,
    "logging (INFO)": _logging,
}


def run(backend: SyncBackend, observers: list[Observer], stream: Stream) -> tuple[float, float]:
    """Wall and CPU seconds per hit over ``stream`` on a new guard."""
    guard = Guard(backend, [POLICY], observers=observers)
    hit = guard.hit
    gc.collect()
    wall, cpu = time.perf_counter(), time.thread_time()
    for recipient, content in stream:
        hit("sms", recipient=recipient, content=content)
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    return wall / len(stream), cpu / len(stream)


def decided_cost(stream: Stream, rounds: int) -> None:
    """µs per ``decided`` call alone, on the decisions of the stream (best of the rounds):
    the observer's own share, free of the hit's noise."""
    guard = Guard(MemoryBackend(), [POLICY])
    decisions = [guard.hit("sms", recipient=r, content=c) for r, c in stream]
    denied = sum(not d.allowed for d in decisions)
    print(
        f"\nobserver.decided alone, {len(decisions)} decisions ({denied} denied), best of {rounds}:"
    )
    for name, make in VARIANTS.items():
        if name == "none":
            continue
        decided = make()[0].decided
        best = float("inf")
        for _ in range(rounds):
            start = time.thread_time()
            for decision in decisions:
                decided(decision, {}, 0.00002)
            best = min(best, time.thread_time() - start)
        print(f"{name:<16}{best / len(decisions) * 1e6:>8.3f} µs")


def compare(title: str, fresh: Callable[[], SyncBackend], stream: Stream, rounds: int) -> None:
    """Each round runs every observed variant right after (or, every other round, right
    before) a run without observers, and keeps the pair's ratio: neighbours in time share
    the machine's state of the moment."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    ratios: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    observed = [name for name in VARIANTS if name != "none"]
    run(fresh(), [], stream[: len(stream) // 10])  # warm up imports and caches
    for n in range(rounds):
        for name in observed[n % len(observed) :] + observed[: n % len(observed)]:
            if n % 2:
                with_it = run(fresh(), VARIANTS[name](), stream)
                without = run(fresh(), [], stream)
            else:
                without = run(fresh(), [], stream)
                with_it = run(fresh(), VARIANTS[name](), stream)
            times["none"].append(without)
            times[name].append(with_it)
            ratios[name].append((with_it[0] / without[0], with_it[1] / without[1]))
    ratios["none"] = [(1.0, 1.0)]
    print(f"\n{title}: {len(stream)} hits a run, {rounds} rounds, medians")
    print(f"{'observers':<16}{'wall µs/hit':>12}{'vs none':>9}{'CPU µs/hit':>12}{'vs none':>9}")
    for name, runs in times.items():
        row = f"{name:<16}"
        for i in (0, 1):  # wall, then CPU
            ratio = statistics.median(r[i] for r in ratios[name])
            row += f"{statistics.median(t[i] for t in runs) * 1e6:>12.2f}{ratio:>8.3f}x"
        print(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=10_000, help="per memory run")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--redis-messages", type=int, default=2_000, help="per Redis run")
    args = parser.parse_args()
    logging.getLogger("freqguard").setLevel(logging.INFO)
    stream = sms_stream(max(args.messages, args.redis_messages))
    compare("MemoryBackend", MemoryBackend, stream[: args.messages], args.rounds)
    decided_cost(stream[: args.messages], args.rounds)
    with standalone(Path(tempfile.mkdtemp(prefix="fg-bench-"))) as server:
        # one backend for every run (each would hold its own connection), emptied first
        backend = RedisBackend(Redis(port=server.port))

        def fresh() -> SyncBackend:
            server.client.flushall()
            return backend

        compare("RedisBackend", fresh, stream[: args.redis_messages], args.rounds)
        backend.close()


if __name__ == "__main__":
    main()
