"""The HTTP middleware's own cost, in process: no server, no sockets, no load generator.

    python -m benchmarks.http_inproc [--requests 2000] [--repeat 40] [--profile]

The apps of :mod:`benchmarks.http_apps` are called directly as ASGI apps, one request
after another on one event loop, with a prebuilt scope, a ``receive`` that hands over an
empty body and a ``send`` that drops what it is given. Bare and wrapped apps alternate,
``--repeat`` times, and each keeps its best run; the difference is what the middleware adds
to a request. Time is this process's CPU time (``time.process_time_ns``), so the time
slices other processes take on a shared machine are not counted; their effect on the
caches still is, which short runs and the best of many keep small.

This is the working instrument for the middleware's speed: wrk on a shared 2-core machine
(``benchmarks.http_starlette``) drifts by tens of percent between runs, while this repeats
within a few tenths of a µs.

With ``--profile`` the freqguard app's requests run under cProfile and the top functions
(by own time) are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import time
from collections.abc import Callable, Coroutine
from typing import Any

from benchmarks import http_apps

App = Callable[[dict[str, Any], Any, Any], Coroutine[Any, Any, None]]


def scope() -> dict[str, Any]:
    """What uvicorn passes for ``GET /hello`` (h11, one client, a keep-alive connection)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 51234),
        "scheme": "http",
        "method": "GET",
        "root_path": "",
        "path": "/hello",
        "raw_path": b"/hello",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"wrk")],
        "state": {},
    }


async def drive(app: App, requests: int) -> float:
    """µs per request of ``requests`` sequential requests through ``app``."""
    request = {"type": "http.request", "body": b"", "more_body": False}
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return request

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    base = scope()
    start = time.process_time_ns()
    for _ in range(requests):
        # a fresh scope per request, as a server builds one (apps and routers write to it)
        await app(dict(base, state={}), receive, send)
    elapsed = time.process_time_ns() - start
    if set(statuses) != {200}:
        raise RuntimeError(f"unexpected statuses: {sorted(set(statuses))}")
    return elapsed / requests / 1000


async def measure(names: list[str], requests: int, repeat: int) -> dict[str, float]:
    apps: dict[str, App] = {name: getattr(http_apps, name)() for name in names}
    for app in apps.values():
        await drive(app, 2000)  # warm up: the first request registers, caches fill
    best = {name: float("inf") for name in names}
    for _ in range(repeat):
        for name, app in apps.items():
            gc.collect()
            best[name] = min(best[name], await drive(app, requests))
    return best


async def profile(requests: int) -> None:
    app: App = http_apps.freqguard()
    await drive(app, 2000)
    profiler = cProfile.Profile()
    profiler.enable()
    await drive(app, requests)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--apps", default="bare,freqguard,slowapi", help="comma-separated, from http_apps"
    )
    args = parser.parse_args()
    if args.profile:
        asyncio.run(profile(args.requests * 10))
        return
    names = args.apps.split(",")
    best = asyncio.run(measure(names, args.requests, args.repeat))
    bare = best.get("bare")
    print(f"{args.requests} sequential GET /hello in process, best of {args.repeat}\n")
    for name, us in best.items():
        extra = f"  +{us - bare:5.1f} µs vs bare" if bare is not None and name != "bare" else ""
        print(f"{name:<12}{us:8.1f} µs/request{extra}")


if __name__ == "__main__":
    main()
