"""Requests/s of a Starlette app bare, with FreqGuardMiddleware, and with slowapi.

    apt-get install wrk   # the load generator
    python -m benchmarks.http_starlette [--seconds 10] [--connections 32] [--rounds 1]

Each app runs in its own uvicorn process (one worker) on a free loopback port; wrk loads
``GET /hello`` with one thread. With ``--rounds N`` the three apps are loaded in turn N
times and each keeps its best rate: on a busy machine, drifting load then biases no app.
Every request is allowed (the limit is far above the load), so the difference is the cost
of the decision and the headers.

Beside the rate, each app's server CPU time per request is printed (the server process's
user + system time over the run, from ``/proc``, divided by the requests wrk completed; the
round with the best rate). A saturated one-worker server serves ``1 / cpu`` requests a
second, so ``bare cpu / app cpu`` is what the rate ratio would be on an idle machine; it
is far less disturbed by other processes than the rate is, which on a shared machine loses
whatever time slices they take.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

import httpx

from tests.servers import free_port


def uvicorn_command(factory: str, port: int) -> list[str]:
    """uvicorn serving ``benchmarks.http_apps:<factory>`` on ``port``, one worker, quiet."""
    app = f"benchmarks.http_apps:{factory}"
    quiet = ("--log-level", "warning", "--no-access-log")
    return [sys.executable, "-m", "uvicorn", "--factory", app, "--port", str(port), *quiet]


def serve(factory: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(uvicorn_command(factory, port))
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(f"{url}/hello").status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{factory} did not start")


def cpu_seconds(pid: int) -> float:
    """The user + system CPU time of process ``pid`` so far (Linux: /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(url: str, seconds: int, connections: int, pid: int) -> tuple[float, float]:
    """wrk's requests/s, and the server's CPU µs per request over the run."""
    before = cpu_seconds(pid)
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", f"{url}/hello"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    used = cpu_seconds(pid) - before
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    count = re.search(r"(\d+) requests in", out)
    if not rate or not count:
        raise RuntimeError(out)
    return float(rate.group(1)), used / int(count.group(1)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1, help="best of N interleaved runs")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    servers = {factory: serve(factory) for factory in ("bare", "freqguard", "slowapi")}
    results: dict[str, tuple[float, float]] = {}
    try:
        for _ in range(args.rounds):
            for factory, (process, url) in servers.items():
                load(url, 2, args.connections, process.pid)  # warm up
                run = load(url, args.seconds, args.connections, process.pid)
                results[factory] = max(results.get(factory, run), run)
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(10)
    bare, bare_cpu = results["bare"]
    print(
        f"wrk -t1 -c{args.connections} -d{args.seconds}s GET /hello, uvicorn, one worker, "
        f"best of {args.rounds}\n"
    )
    print(f"{'':<10}{'req/s':>10}{'of bare':>9}{'server cpu':>16}{'bare/cpu':>10}")
    for name, (rate, cpu) in results.items():
        print(
            f"{name:<10}{rate:>10,.0f}{rate / bare:>9.0%}{cpu:>10.1f} µs/req{bare_cpu / cpu:>10.0%}"
        )
    ratio = results["freqguard"][0] / results["slowapi"][0]
    print(f"\nfreqguard vs slowapi: {ratio:.2f}x")


if __name__ == "__main__":
    main()
