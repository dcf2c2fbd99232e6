"""The long concurrency audit (the short one is tests/conformance/test_audit.py).

    python -m benchmarks.audit --seconds 600 --backend redis|cluster|memory
        [--processes N] [--threads N] [--tasks N] [--seed N] [--switch-interval S]
        [--bins N]

Starts its own redis-server (or a 3-master cluster) on free loopback ports, runs the workload
of ``tests/audit/`` on it for ``--seconds`` of the backend's own time, and prints
admissions, denials, compensations and refunds per policy and the violations per rule. Exits
1 on any violation or worker error, 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.audit import AuditConfig, AuditReport, Target, run_audit
from tests.servers import cluster, standalone

#: per backend: processes, threads, tasks (memory: one process; the issue's 16 + 32)
DEFAULTS = {"memory": (1, 16, 32), "redis": (8, 3, 8), "cluster": (6, 3, 8)}


def _config(args: argparse.Namespace, port: int) -> AuditConfig:
    processes, threads, tasks = DEFAULTS[args.backend]
    return AuditConfig(
        Target(args.backend, port, args.bins),
        seconds=args.seconds,
        processes=args.processes or processes,
        threads=args.threads or threads,
        tasks=tasks if args.tasks is None else args.tasks,
        seed=args.seed,
        switch_interval=args.switch_interval,
    )


def audit(args: argparse.Namespace) -> AuditReport:
    if args.backend == "memory":
        return run_audit(_config(args, 0))
    with tempfile.TemporaryDirectory(prefix="freqguard-audit-") as tmp:
        if args.backend == "redis":
            with standalone(Path(tmp)) as server:
                return run_audit(_config(args, server.port))
        with cluster(Path(tmp)) as nodes:
            return run_audit(_config(args, nodes[0].port))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--backend", choices=sorted(DEFAULTS), default="redis")
    parser.add_argument("--processes", type=int, default=0, help="default: per backend")
    parser.add_argument("--threads", type=int, default=0, help="per process; default: per backend")
    parser.add_argument("--tasks", type=int, default=None, help="asyncio tasks in process 0")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--switch-interval", type=float, default=None)
    parser.add_argument("--bins", type=int, default=0, help="Redis: records in N bins")
    report = audit(parser.parse_args(argv))
    print(report.format())
    return 1 if report.violations or report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
