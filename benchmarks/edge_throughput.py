"""The Redis edge's client throughput, this tree against another commit, in one run.

    python -m benchmarks.edge_throughput --before 6cccb3e [--rounds 5] [--messages 20000]
    python -m benchmarks.edge_throughput --scripts [--rounds 5] [--messages 20000]

Starts a redis-server and a 3-master cluster on free loopback ports, checks the other commit
out in a temporary git worktree, and measures, in child processes that alternate between the
two trees round after round (so the machine's drift falls on both alike): sequential sync
hits and 32 asyncio tasks sharing one backend, of the four-rule SMS policy, on the standalone
server and on the cluster. Reported: each tree's median per case, and after/before. The
figures are decisions per second of the whole client; compare the ratios, not the numbers,
across runs. With ``--scripts`` it compares this tree with itself: the calls as Redis
Functions ("before") and as EVALSHA scripts ("after", a store without Functions).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tests.servers import cluster, standalone

ROOT = Path(__file__).resolve().parent.parent
CASES = ("standalone sync", "standalone async32", "cluster sync", "cluster async32")

# Run in a child process of one tree: measures every case once and prints them as JSON.
CHILD = r"""
import asyncio, json, sys, time
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from freqguard import AsyncGuard, Guard, ManualClock, Policy, Rule
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend

port, cport, n, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
how = {} if mode == "default" else {"scripts": mode}
SMS = Policy(
    "sms",
    Rule("15/minute", by="recipient"),
    Rule("50/day", by="recipient"),
    Rule("2 per 59 seconds", by=("recipient", "content")),
    Rule("5 per 59 minutes", by=("recipient", "content")),
)
stream = [(f"r{i * 7919 % 100000}", f"c{i % 20}") for i in range(n)]


def sync_rate(client):
    guard = Guard(RedisBackend(client, **how), [SMS])
    guard.hit("sms", recipient="warm", content="up")
    began = time.perf_counter()
    for recipient, content in stream:
        guard.hit("sms", recipient=recipient, content=content)
    took = time.perf_counter() - began
    guard.close()
    return n / took


def async_rate(make):
    async def run():
        guard = AsyncGuard(AsyncRedisBackend(make(), **how), [SMS])
        await guard.hit("sms", recipient="warm", content="up")

        async def worker(part):
            for recipient, content in part:
                await guard.hit("sms", recipient=recipient, content=content)

        began = time.perf_counter()
        await asyncio.gather(*(worker(stream[i::32]) for i in range(32)))
        took = time.perf_counter() - began
        await guard.aclose()
        return n / took

    return asyncio.run(run())


out = {
    "standalone sync": sync_rate(Redis(port=port)),
    "standalone async32": async_rate(lambda: AsyncRedis(port=port)),
    "cluster sync": sync_rate(RedisCluster(host="127.0.0.1", port=cport)),
    "cluster async32": async_rate(lambda: AsyncRedisCluster(host="127.0.0.1", port=cport)),
}
print(json.dumps(out))
"""


def _measure(
    tree: Path, port: int, cport: int, messages: int, flush: Sequence[object], mode: str
) -> dict[str, float]:
    for client in flush:
        client.flushall()  # type: ignore[attr-defined]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(port), str(cport), str(messages), mode],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=1200,
    )
    found: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--before", help="the commit to compare with")
    which.add_argument("--scripts", action="store_true", help="Functions against EVALSHA")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        before = ROOT if args.scripts else Path(work) / "before"
        modes = {"before": "functions", "after": "eval"} if args.scripts else {}
        if not args.scripts:
            subprocess.run(
                ["git", "worktree", "add", "--detach", str(before), args.before],
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
        try:
            with standalone(Path(work) / "redis") as server, cluster(Path(work) / "c") as nodes:
                flush = [server.client, *[node.client for node in nodes]]
                runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
                for _ in range(args.rounds):
                    for name, tree in (("before", before), ("after", ROOT)):
                        mode = modes.get(name, "default")
                        found = _measure(
                            tree, server.port, nodes[0].port, args.messages, flush, mode
                        )
                        runs[name].append(found)
        finally:
            if not args.scripts:
                subprocess.run(
                    ["git", "worktree", "remove", "--force", str(before)],
                    cwd=ROOT,
                    check=False,
                )
    print(f"decisions/s, median of {args.rounds} rounds, {args.messages} messages each")
    print(f"{'case':<22}{'before':>12}{'after':>12}{'after/before':>14}")
    for case in CASES:
        old = statistics.median(r[case] for r in runs["before"])
        new = statistics.median(r[case] for r in runs["after"])
        print(f"{case:<22}{old:>12,.0f}{new:>12,.0f}{new / old:>14.3f}")


if __name__ == "__main__":
    main()
