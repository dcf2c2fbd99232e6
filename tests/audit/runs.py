"""An audit run: spawned worker processes, each with threads and tasks driving the workload on
one guard, their logs gathered, checked and reported (:func:`run_audit`)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
import queue
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from freqguard import (
    AsyncGuard,
    Guard,
)
from tests.audit.checker import RuleCheck, check_rules, check_times
from tests.audit.drivers import Driver, adrive, drive, memory_backend
from tests.audit.workload import (
    POLICIES,
    WorkerLog,
)


class Target(NamedTuple):
    kind: str  # "memory", "redis" or "cluster"
    port: int = 0  # Redis: the port on 127.0.0.1 of the server, or of one cluster node
    bins: int = 0  # Redis: records shared in this many bins (RedisBackend(bins=))


@dataclass(frozen=True)
class AuditConfig:
    """One audit run. ``processes`` is forced to 1 on memory."""

    target: Target
    seconds: float = 10.0
    processes: int = 4
    threads: int = 3
    tasks: int = 8  # asyncio tasks in each of the first ``async_processes`` processes
    async_processes: int = 1
    seed: int = 0
    refund_share: float = 0.25  # of admissions, each refunded a few steps later
    many_share: float = 0.1
    max_ops: int = 10_000_000  # per thread or task, a bound besides time
    switch_interval: float | None = None  # sys.setswitchinterval in the workers
    prefix: str = ""  # the guards' key prefix; unique per run when empty


STARTUP_SECONDS = 60.0


def _sync_backend(target: Target) -> Any:
    from redis import Redis
    from redis.cluster import RedisCluster

    from freqguard import RedisBackend

    if target.kind == "redis":
        client: Any = Redis(host="127.0.0.1", port=target.port, socket_timeout=10)
    else:
        client = RedisCluster(host="127.0.0.1", port=target.port, socket_timeout=10)
    return RedisBackend(client, bins=target.bins)


def _async_backend(target: Target) -> Any:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

    from freqguard import AsyncRedisBackend

    if target.kind == "redis":
        client: Any = Redis(host="127.0.0.1", port=target.port, socket_timeout=10)
    else:
        client = RedisCluster(host="127.0.0.1", port=target.port, socket_timeout=10)
    return AsyncRedisBackend(client, bins=target.bins)


async def _tasks(config: AuditConfig, drivers: list[Driver], deadline: float, memory: Any) -> None:
    backend = memory if memory is not None else _async_backend(config.target)
    guard = AsyncGuard(backend, POLICIES, prefix=config.prefix)
    try:
        await asyncio.gather(*(adrive(guard, d, deadline, config.max_ops) for d in drivers))
    finally:
        await guard.aclose()


def worker(config: AuditConfig, index: int, ready: Any, go: Any, out: str) -> None:
    """A worker process: threads (and tasks) until the deadline, then its logs to ``out``."""
    logs: list[WorkerLog] = []
    try:
        if config.switch_interval is not None:
            sys.setswitchinterval(config.switch_interval)
        memory = memory_backend() if config.target.kind == "memory" else None
        backend = memory if memory is not None else _sync_backend(config.target)
        guard = Guard(backend, POLICIES, prefix=config.prefix)
        seed = config.seed * 1_000_003 + index * 1009

        def driver(n: int) -> Driver:
            made = Driver(index * 1000 + n, seed + n, config.refund_share, config.many_share)
            logs.append(made.log)
            return made

        sync_drivers = [driver(n) for n in range(config.threads)]
        async_drivers = [
            driver(500 + n) for n in range(config.tasks if index < config.async_processes else 0)
        ]
        ready.put(index)
        if not go.wait(STARTUP_SECONDS):
            raise RuntimeError("no start signal")
        deadline = time.monotonic() + config.seconds
        threads = [
            threading.Thread(target=drive, args=(guard, d, deadline, config.max_ops))
            for d in sync_drivers
        ]
        if async_drivers:
            main = _tasks(config, async_drivers, deadline, memory)
            threads.append(threading.Thread(target=asyncio.run, args=(main,)))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        guard.close()
    except Exception:
        logs.append(WorkerLog(index * 1000 + 999, errors=[traceback.format_exc()]))
    with open(out, "wb") as file:
        pickle.dump(logs, file)


def run_audit(config: AuditConfig) -> AuditReport:
    """Run the workload, gather every worker's log, check it. Bounded: workers stop at the
    deadline; one still alive ``STARTUP_SECONDS`` after it is terminated."""
    if config.target.kind == "memory" and config.processes != 1:
        config = AuditConfig(**{**config.__dict__, "processes": 1})
    if not config.prefix:
        config = AuditConfig(
            **{**config.__dict__, "prefix": f"audit{os.getpid()}-{time.time_ns()}"}
        )
    spawn = multiprocessing.get_context("spawn")
    ready, go = spawn.Queue(), spawn.Event()
    began = time.monotonic()
    logs: list[WorkerLog] = []
    with tempfile.TemporaryDirectory(prefix="freqguard-audit-") as tmp:
        outs = [str(Path(tmp) / f"worker{i}.pickle") for i in range(config.processes)]
        procs = [
            spawn.Process(target=worker, args=(config, i, ready, go, out), daemon=True)
            for i, out in enumerate(outs)
        ]
        for proc in procs:
            proc.start()
        _start_together(procs, ready, go)
        for proc in procs:
            proc.join(config.seconds + STARTUP_SECONDS)
            if proc.is_alive():
                proc.terminate()
                proc.join()
        for i, out in enumerate(outs):
            if not Path(out).exists():
                logs.append(WorkerLog(i * 1000 + 999, errors=[f"worker {i} left no log"]))
                continue
            with open(out, "rb") as file:
                logs.extend(pickle.load(file))
    elapsed = time.monotonic() - began
    return make_report(config, logs, elapsed)


def _start_together(procs: list[Any], ready: Any, go: Any) -> None:
    """Give the start signal once every worker is ready; not at all if one died first (the
    others then end by themselves, and the logs say why)."""
    waiting, until = len(procs), time.monotonic() + STARTUP_SECONDS
    while waiting and time.monotonic() < until:
        if any(proc.exitcode is not None for proc in procs):
            return
        try:
            ready.get(timeout=0.1)
        except queue.Empty:
            continue
        waiting -= 1
    if not waiting:
        go.set()


# -- the report ----------------------------------------------------------------------------


@dataclass
class AuditReport:
    config: AuditConfig
    counts: dict[str, Counter[str]]  # per policy: hits, admitted, denied, compensated, ...
    rules: list[RuleCheck]
    time_violations: list[str]
    errors: list[str]
    seconds: float  # wall time of the whole run, start-up and check included

    @property
    def violations(self) -> int:
        return sum(r.violations for r in self.rules) + len(self.time_violations)

    def total(self, what: str) -> int:
        return sum(c[what] for c in self.counts.values())

    def format(self) -> str:
        c = self.config
        lines = [
            f"audit on {c.target.kind}: {c.processes} process(es) x {c.threads} threads, "
            f"{c.tasks} tasks in {c.async_processes}, {c.seconds:g} s of load, "
            f"{self.seconds:.1f} s in all",
            f"{'policy':<12} {'hits':>8} {'admitted':>8} {'denied':>8} {'compens.':>8} "
            f"{'refunds':>8} {'batches':>8} {'limits':>8}",
        ]
        for name, n in self.counts.items():
            lines.append(
                f"{name:<12} {n['hits']:>8} {n['admitted']:>8} {n['denied']:>8} "
                f"{n['compensated']:>8} {n['refunds']:>8} {n['batches']:>8} {n['limits']:>8}"
            )
        lines.append(
            f"{'policy/rule':<24} {'strategy':<13} {'keys':>4} {'units':>7} {'refunded':>8} "
            f"{'violations':>10} {'hard':>5}"
        )
        for r in self.rules:
            label = f"{r.policy}/{r.rule.id}"
            lines.append(
                f"{label:<24} {r.rule.strategy.value:<13} {r.keys:>4} {r.units:>7} "
                f"{r.refunded:>8} {r.violations:>10} {r.hard:>5}"
            )
            lines += [f"    {example}" for example in r.examples]
        lines.append(f"time per state went back: {len(self.time_violations)}")
        lines += [f"    {v}" for v in self.time_violations[:5]]
        lines += [f"ERROR: {e}" for e in self.errors[:5]]
        lines.append(f"violations: {self.violations}")
        return "\n".join(lines)


def make_report(config: AuditConfig, logs: list[WorkerLog], seconds: float) -> AuditReport:
    admissions = [a for log in logs for a in log.admissions]
    refunds = [r for log in logs for r in log.refunds]
    counts: dict[str, Counter[str]] = {p.name: Counter() for p in POLICIES}
    for log in logs:
        for (policy, what), n in log.counts.items():
            counts[policy][what] += n
    return AuditReport(
        config,
        counts,
        check_rules(admissions, refunds, POLICIES),
        check_times(admissions, refunds, POLICIES),
        [e for log in logs for e in log.errors],
        seconds,
    )
