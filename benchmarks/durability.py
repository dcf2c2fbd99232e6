"""What ``wait_replicas=1`` costs: hits/s on a master with one replica, with and without
the WAIT, side by side in one run.

    python -m benchmarks.durability [--hits 4000] [--rounds 3]

Starts its own master and replica (loopback, free ports). Each round times ``--hits``
sequential ``Guard.hit`` calls and ``--hits`` hits as ``hit_many`` batches of 100, first
without and then with ``wait_replicas=1`` (best of ``--rounds``). The WAIT goes behind the
calls on their connection, so it costs no extra client round trip: what it adds is the
master-to-replica acknowledgement (the replica's own round trip, here on loopback; across
racks, the network's).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from freqguard import Guard, Policy, Rule, backend_from_url
from tests import servers
from tests.servers import RedisServer, standalone

POLICY = Policy("sms", Rule("10000/day", by="recipient", strategy="fixed-window"))


def _best(rounds: int, run: Callable[[], None]) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(master: RedisServer, wait: bool, hits: int, rounds: int) -> tuple[float, float]:
    """(sequential hits/s, batched hits/s)."""
    query = "?wait_replicas=1&wait_timeout=0.2&socket_timeout=1" if wait else ""
    guard = Guard(backend_from_url(f"{master.url}/0{query}"), [POLICY])
    names = [f"r{n % 5000}" for n in range(hits)]
    batches = [[{"recipient": r} for r in names[i : i + 100]] for i in range(0, hits, 100)]
    guard.hit("sms", recipient="warm-up")

    def sequential() -> None:
        for name in names:
            guard.hit("sms", recipient=name)

    def batched() -> None:
        for batch in batches:
            guard.hit_many("sms", batch)

    one, many = _best(rounds, sequential), _best(rounds, batched)
    guard.close()
    master.client.flushall()
    return hits / one, hits / many


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hits", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir, standalone(Path(workdir)) as master:
        replica = RedisServer(Path(workdir), "--replicaof", "127.0.0.1", str(master.port))
        try:
            servers.wait_for(
                lambda: replica.client.info("replication")["master_link_status"] == "up",
                "the replica's link",
            )
            plain = measure(master, False, args.hits, args.rounds)
            durable = measure(master, True, args.hits, args.rounds)
        finally:
            replica.stop()
    print(f"{'':>22} {'no WAIT':>10} {'wait_replicas=1':>16} {'ratio':>6}")
    for label, a, b in (
        ("sequential hits/s", plain[0], durable[0]),
        ("hit_many(100) hits/s", plain[1], durable[1]),
    ):
        print(f"{label:>22} {a:>10,.0f} {b:>16,.0f} {b / a:>6.2f}")


if __name__ == "__main__":
    main()
