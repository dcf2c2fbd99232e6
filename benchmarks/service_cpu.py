"""The service's own CPU a hit, in process: the ASGI app called directly (no sockets, no
HTTP parser, no load generator sharing the cores), the four-rule SMS policy on a local
redis-server, beside the floor (:mod:`benchmarks.bare_guard`: only ``AsyncGuard.hit``).

    python -m benchmarks.service_cpu [--requests 20000] [--tasks 32] [--rounds 3]

Each case is ``freqguard.service.from_env``'s app as ``serve`` makes it (the Prometheus
observer, the Host check, the history on or off), driven by ``--tasks`` asyncio tasks on
uvloop; the figure is this process's CPU time a request (``time.process_time``; Redis's is
its own), the median of ``--rounds``. The difference between a case and the floor is
what the service adds to a decision. Last, the server's own time a decision (``INFO
commandstats``), for what a larger host would give.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.service import CONFIG
from tests.servers import standalone

PATH = "/v1/policies/sms/hit"
HEADERS = [(b"host", b"127.0.0.1:8080"), (b"content-type", b"application/json")]


def _bodies(count: int, seed: int) -> Iterator[bytes]:
    rng = random.Random(seed)
    for _ in range(count):
        recipient, content = rng.randrange(10**7), rng.randrange(5)
        yield b'{"context":{"recipient":"+49176%d","content":"c%d"}}' % (recipient, content)


async def _request(app: Any, body: bytes) -> None:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": PATH,
        "raw_path": PATH.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [*HEADERS, (b"content-length", b"%d" % len(body))],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    status: list[int] = []

    async def receive() -> Any:
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    if status != [200]:
        raise AssertionError(f"the app answered {status}")


async def _drive(app: Any, bodies: Iterator[bytes], tasks: int) -> None:
    async def worker() -> None:
        for body in bodies:
            await _request(app, body)

    await asyncio.gather(*(worker() for _ in range(tasks)))


async def _case(make: Any, args: argparse.Namespace, seed: int) -> float:
    """CPU µs a request of the app ``make()`` returns, its lifespan run around it."""
    app = make()
    inbox: asyncio.Queue[Any] = asyncio.Queue()
    started = asyncio.Event()

    async def send(message: Any) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()

    await inbox.put({"type": "lifespan.startup"})
    life = asyncio.create_task(app({"type": "lifespan", "state": {}}, inbox.get, send))
    await started.wait()
    await _drive(app, _bodies(2000, seed + 1), args.tasks)  # warm: connections, scripts
    began = time.process_time()
    await _drive(app, _bodies(args.requests, seed), args.tasks)
    took = time.process_time() - began
    await inbox.put({"type": "lifespan.shutdown"})
    await life
    return float(took / args.requests * 1e6)


def _floor() -> Any:
    from benchmarks.bare_guard import app

    return app


def _service(history: str) -> Any:
    def make() -> Any:
        from freqguard.service import HISTORY_ENV, HOSTS_ENV, from_env

        os.environ[HISTORY_ENV], os.environ[HOSTS_ENV] = history, "127.0.0.1"
        return from_env()

    return make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import uvloop

    cases = {
        "floor: AsyncGuard.hit only": _floor,
        "service, history on (default)": _service("on"),
        "service, --history off": _service("off"),
    }
    found: dict[str, list[float]] = {name: [] for name in cases}
    with tempfile.TemporaryDirectory() as tmp, standalone(Path(tmp)) as server:
        config = Path(tmp) / "svc.toml"
        config.write_text(CONFIG.format(port=server.port))
        os.environ["FREQGUARD_SERVE_CONFIG"] = str(config)
        for round_ in range(args.rounds):
            for name, make in cases.items():
                server.client.flushall()
                found[name].append(uvloop.run(_case(make, args, round_)))
        fcall = server.client.info("commandstats").get("cmdstat_fcall", {})
    floor = statistics.median(found["floor: AsyncGuard.hit only"])
    print(f"CPU µs a hit in process, median of {args.rounds} ({args.requests} requests each)")
    for name, each in found.items():
        median = statistics.median(each)
        print(f"{name:32} {median:6.1f}   service's own: {median - floor:5.1f}")
    if fcall:  # what the store's one thread spends running the policy's function
        print(f"Redis: {fcall['usec_per_call']} µs a decision (INFO commandstats, cmdstat_fcall)")


if __name__ == "__main__":
    main()
