"""Outage latency: hits on a hung Redis, with the circuit breaker (the default) and without.

    python -m benchmarks.outage [--hits 1000] [--timeout 0.1] [--cluster]

Starts its own redis-server. For each case, a guard with ``on_error="allow"`` on
``backend_from_url(...?socket_timeout=T&socket_connect_timeout=T)`` makes one hit (connected,
the server inspected), then the server is stopped (SIGSTOP: it hangs, as a server swapping or
a network partition does) and ``--hits`` hits are timed. Then it runs again (SIGCONT), and the
first hit after the return is timed, with who decided it; then one hit every 10 ms until the
store decides one: with the breaker, that is when its cool-down (5 s) ends.

Without the breaker every hit waits out the socket timeout: the run takes ``hits * T``
(100 s at the defaults).

With ``--cluster``: its own 3-master Redis Cluster, one master hung, ``--hits`` hits spread
over recipients on every node: with one circuit per node the hung node's hits are answered
at once after its first failures, and the other nodes' hits are decided by the store
throughout; without a breaker each hit on the hung node waits out the timeout.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from freqguard import Guard, Policy, Rule, backend_from_url
from freqguard.failure import Breaker
from tests.faults import Tally, owner, pause, resume
from tests.servers import RedisServer, cluster, standalone

POLICY = Policy("sms", Rule("10000/day", by="recipient"))


def run(server: RedisServer, breaker: Breaker | None, hits: int, timeout: float) -> list[str]:
    """One case: its row of figures."""
    url = f"{server.url}/0?socket_timeout={timeout}&socket_connect_timeout={timeout}"
    tally = Tally()
    guard = Guard(
        backend_from_url(url), [POLICY], on_error="allow", breaker=breaker, observers=[tally]
    )
    assert guard.hit("sms", recipient="r0").source == "backend"
    pause(server)
    try:
        start = time.perf_counter()
        for n in range(hits):
            guard.hit("sms", recipient=f"r{n % 100}")
        took = time.perf_counter() - start
    finally:
        resume(server)
    back = time.perf_counter()
    first = guard.hit("sms", recipient="r0")
    first_ms = (time.perf_counter() - back) * 1000
    while guard.hit("sms", recipient="r0").source != "backend":
        time.sleep(0.01)  # a benchmark may wait: the breaker's real cool-down
    decided = time.perf_counter() - back
    guard.close()
    return [
        f"{took:.2f}",
        f"{took / hits * 1000:.3f}",
        str(tally.store_failures),
        f"{first_ms:.2f} ({first.source})",
        f"{decided:.2f}",
    ]


def run_cluster(
    nodes: list[RedisServer], breaker: Breaker | None, hits: int, timeout: float
) -> list[str]:
    """One cluster case: its row of figures."""
    query = f"socket_timeout={timeout}&socket_connect_timeout={timeout}"
    tally = Tally()
    guard = Guard(
        backend_from_url(f"redis+cluster://127.0.0.1:{nodes[0].port}/0?{query}"),
        [POLICY],
        on_error="allow",
        breaker=breaker,
        observers=[tally],
    )
    names = [f"r{n}" for n in range(30)]
    for name in names:  # every node connected
        guard.hit("sms", recipient=name)
    victim = owner(nodes, POLICY, recipient=names[0])
    on_victim = sum(owner(nodes, POLICY, recipient=n) is victim for n in names)
    before = tally.count("backend")
    pause(victim)
    try:
        start = time.perf_counter()
        for n in range(hits):
            guard.hit("sms", recipient=names[n % len(names)])
        took = time.perf_counter() - start
    finally:
        resume(victim)
    guard.close()
    return [
        f"{took:.2f}",
        f"{took / hits * 1000:.3f}",
        str(tally.store_failures),
        f"{tally.count('backend') - before} of {hits}"
        f" ({on_victim} of {len(names)} recipients on the hung node)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hits", type=int, default=1000, help="hits while the server hangs")
    parser.add_argument("--timeout", type=float, default=0.1, help="socket timeouts, seconds")
    parser.add_argument("--cluster", action="store_true", help="a 3-master cluster, one hung")
    args = parser.parse_args()
    if args.cluster:
        head = ["case", "total s", "ms per hit", "store calls failed", "decided by the store"]
        rows = []
        with cluster(Path(tempfile.mkdtemp(prefix="fg-outage-"))) as nodes:
            for node in nodes:  # the others must not fail the hung node over meanwhile
                node.client.config_set("cluster-node-timeout", 600_000)
            for name, breaker in (("breaker (default)", Breaker()), ("breaker=None", None)):
                rows.append([name, *run_cluster(nodes, breaker, args.hits, args.timeout)])
        print(f"{args.hits} hits on a 3-master cluster, one master stopped, {args.timeout} s")
        _table(head, rows)
        return
    head = ["case", "total s", "ms per hit", "store calls", "first after return, ms", "store, s"]
    rows = []
    with standalone(Path(tempfile.mkdtemp(prefix="fg-outage-"))) as server:
        for name, breaker in (("breaker (default)", Breaker()), ("breaker=None", None)):
            rows.append([name, *run(server, breaker, args.hits, args.timeout)])
    print(f"{args.hits} hits on a stopped Redis, socket timeouts {args.timeout} s, allow")
    _table(head, rows)


def _table(head: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
