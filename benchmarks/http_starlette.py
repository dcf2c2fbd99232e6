"""Requests/s of a Starlette app bare, with FreqGuardMiddleware, and with slowapi.

    apt-get install wrk   # the load generator
    python -m benchmarks.http_starlette [--seconds 10] [--connections 32] [--rounds 1]

Each app runs in its own uvicorn process (one worker) on a free loopback port; wrk loads
``GET /hello`` with one thread. With ``--rounds N`` the three apps are loaded in turn N
times and each keeps its best rate: on a busy machine, drifting load then biases no app.
Every request is allowed (the limit is far above the load), so the difference is the cost
of the decision and the headers.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time

import httpx

from tests.servers import free_port


def serve(factory: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            f"benchmarks.http_apps:{factory}",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(f"{url}/hello").status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{factory} did not start")


def load(url: str, seconds: int, connections: int) -> float:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", f"{url}/hello"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not found:
        raise RuntimeError(out)
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1, help="best of N interleaved runs")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    servers = {factory: serve(factory) for factory in ("bare", "freqguard", "slowapi")}
    results: dict[str, float] = {}
    try:
        for _ in range(args.rounds):
            for factory, (_, url) in servers.items():
                load(url, 2, args.connections)  # warm up
                rate = load(url, args.seconds, args.connections)
                results[factory] = max(results.get(factory, 0.0), rate)
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(10)
    bare = results["bare"]
    print(
        f"wrk -t1 -c{args.connections} -d{args.seconds}s GET /hello, uvicorn, one worker, "
        f"best of {args.rounds}\n"
    )
    for name, rate in results.items():
        print(f"{name:<10}{rate:>10,.0f} req/s  {rate / bare:>6.0%} of bare")
    print(f"\nfreqguard vs slowapi: {results['freqguard'] / results['slowapi']:.2f}x")


if __name__ == "__main__":
    main()
