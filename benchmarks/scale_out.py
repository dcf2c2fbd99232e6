"""Scale-out: the SMS policy on a local 3- and 6-master Redis Cluster, several client processes.

    python -m benchmarks.scale_out [--messages 200000] [--processes 2] [--batch 100]

For each cluster size, starts the masters on free loopback ports (``tests.servers.cluster``),
splits the seeded SMS stream (Zipf over 1,000,000 ids; ``benchmarks.workload``) among client
processes, and has each decide its share with ``Guard.hit_many`` in batches (freqguard sends
a batch's calls to every owning node before reading any reply). Reported:

* aggregate decisions per second (all processes, wall time);
* per shard: its share of the calls, the function's execution µs per call (``INFO
  commandstats``) and the server's CPU µs per call (``used_cpu_user + used_cpu_sys``
  growth over the run: everything the shard spent, reading sockets included);
* the same CPU per call for a trivial function (``return 1`` on one key) sent the same way,
  pipelined per node: the floor of any one-key function call;
* the projection: how many Redis cores the seed's 100,000 decisions a second of this policy
  need, from the measured CPU per decision, at the seed's 50 % CPU ceiling.

On this 2-core machine the client processes and every shard share the cores, so aggregate
decisions per second is bounded by the machine, not by the cluster; the CPU per decision per
shard is the figure that carries over to real hardware.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from pathlib import Path
from typing import Any

from redis import Redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from benchmarks.redis_sms import sms_policy
from benchmarks.workload import sms_stream
from freqguard import Guard, Strategy
from freqguard.backends.redis import RedisBackend
from tests.servers import RedisServer, cluster

SEED_RATE = 100_000  # decisions a second: 3 billion messages a day at peak
CEILING = 0.5  # the seed's cluster ran above 50 % CPU; plan to stay below it
TRIVIAL = "#!lua name=fgtrivial\nredis.register_function('fgtrivial', function() return 1 end)"


def _client_share(port: int, share: list[tuple[str, str]], batch: int) -> int:
    guard = Guard(
        RedisBackend(RedisCluster(host="127.0.0.1", port=port)), [sms_policy(Strategy.SLIDING_LOG)]
    )
    admitted = 0
    for start in range(0, len(share), batch):
        contexts = [{"recipient": r, "content": c} for r, c in share[start : start + batch]]
        admitted += sum(d.allowed for d in guard.hit_many("sms", contexts))
    guard.close()
    return admitted


def _counters(node: RedisServer) -> dict[str, float]:
    cpu = node.client.info("cpu")
    stats = node.client.info("commandstats").get("cmdstat_fcall", {"calls": 0, "usec": 0})
    return {
        "cpu_us": (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6,
        "calls": float(stats["calls"]),
        "usec": float(stats["usec"]),
    }


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after}


def _owner(nodes: list[RedisServer]) -> list[int]:
    """For each slot, the index of the node that serves it."""
    owner = [0] * 16384
    by_port = {node.port: i for i, node in enumerate(nodes)}
    slots = nodes[0].client.execute_command("CLUSTER SLOTS")  # type: ignore[no-untyped-call]
    for start, end, primary, *_ in slots:
        for slot in range(start, end + 1):
            owner[slot] = by_port[int(primary[1])]
    return owner


def trivial_cpu(nodes: list[RedisServer], stream: list[tuple[str, str]], batch: int) -> float:
    """Server CPU µs per call of a function that only returns, one key each (the recipient's
    record), pipelined per node in batches as hit_many sends: the floor of a one-key call."""
    owner = _owner(nodes)
    clients = [Redis(port=node.port) for node in nodes]
    for client in clients:
        client.function_load(TRIVIAL, replace=True)
    before = [_counters(node) for node in nodes]
    for start in range(0, len(stream), batch):
        pipes = [client.pipeline(transaction=False) for client in clients]
        for recipient, _ in stream[start : start + batch]:
            key = f"fg:{{{recipient}}}:sms"
            pipe = pipes[owner[key_slot(key.encode())]]
            pipe.execute_command("FCALL", "fgtrivial", 1, key)  # type: ignore[no-untyped-call]
        for pipe in pipes:
            pipe.execute()
    spent = [_delta(_counters(node), b) for node, b in zip(nodes, before, strict=True)]
    return sum(s["cpu_us"] for s in spent) / len(stream)


def one_size(
    masters: int, stream: list[tuple[str, str]], processes: int, batch: int
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, cluster(Path(tmp), masters=masters) as nodes:
        # warm: the function loaded on every node, the slots learned
        _client_share(nodes[0].port, stream[:200], batch)
        for node in nodes:
            node.client.flushall()
            node.client.config_resetstat()
        before = [_counters(node) for node in nodes]
        shares = [stream[i::processes] for i in range(processes)]
        began = time.perf_counter()
        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            admitted = sum(pool.starmap(_client_share, [(nodes[0].port, s, batch) for s in shares]))
        wall = time.perf_counter() - began
        spent = [_delta(_counters(node), b) for node, b in zip(nodes, before, strict=True)]
        floor = trivial_cpu(nodes, stream, batch)
    calls = sum(s["calls"] for s in spent)
    return {
        "masters": masters,
        "rate": len(stream) / wall,
        "admitted": admitted,
        "shards": [
            {
                "share": s["calls"] / calls,
                "exec_us": s["usec"] / max(s["calls"], 1),
                "cpu_us": s["cpu_us"] / max(s["calls"], 1),
            }
            for s in spent
        ],
        "cpu_us": sum(s["cpu_us"] for s in spent) / len(stream),
        "exec_us": sum(s["usec"] for s in spent) / len(stream),
        "floor_cpu_us": floor,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--masters", default="3,6")
    args = parser.parse_args()
    stream = sms_stream(args.messages)
    print(
        f"{args.messages:,} messages, {len({r for r, _ in stream}):,} recipients, "
        f"{args.processes} client processes, hit_many batches of {args.batch}\n"
    )
    for masters in (int(m) for m in args.masters.split(",")):
        row = one_size(masters, stream, args.processes, args.batch)
        print(f"## {masters} masters: {row['rate']:,.0f} decisions/s in all")
        print("| shard | calls | exec µs/call | CPU µs/call |")
        print("|---|---:|---:|---:|")
        for i, shard in enumerate(row["shards"]):
            print(
                f"| {i} | {shard['share']:.1%} | {shard['exec_us']:.1f} | {shard['cpu_us']:.1f} |"
            )
        cores = SEED_RATE * row["cpu_us"] / 1e6
        print(
            f"\nserver CPU {row['cpu_us']:.1f} µs a decision (exec {row['exec_us']:.1f}); "
            f"a trivial one-key function sent alike: {row['floor_cpu_us']:.1f} µs "
            f"({row['cpu_us'] / row['floor_cpu_us']:.2f}x)"
        )
        print(
            f"projection: {SEED_RATE:,}/s x {row['cpu_us']:.1f} µs = {cores:.2f} cores busy; "
            f"at a {CEILING:.0%} ceiling {cores / CEILING:.1f} Redis cores "
            f"(masters), each shard taking 1/{masters}\n"
        )


if __name__ == "__main__":
    main()
