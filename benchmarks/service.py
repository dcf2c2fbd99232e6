"""The decision service's decisions/s, next to the in-process guard and a bare Starlette
JSON endpoint, in one run.

    python -m benchmarks.service [--seconds 5] [--clients 16]

Starts its own redis-server, then, one at a time on free loopback ports: ``freqguard serve``
with 1 and with 2 workers (the SMS policy on that Redis), and a bare Starlette app that
answers a fixed JSON body (one worker: what HTTP and JSON cost without freqguard). Each is
driven for ``--seconds`` by ``--clients`` asyncio tasks of one httpx client (keep-alive),
single hits and batches of 20 (``hit-many``), over the seeded SMS stream. The in-process
``AsyncGuard`` on the same Redis is measured the same way, without HTTP. The load generator
shares the machine's two cores with the servers: figures are for comparison within the run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from benchmarks.workload import sms_stream
from freqguard.config import loads
from tests.servers import free_port, standalone

SCRIPT = Path(sys.executable).parent / "freqguard"
BATCH = 20
CONFIG = """\
backend = "redis://127.0.0.1:{port}"

[[policy]]
name = "sms"
rules = [
  {{ rate = "15/minute", by = "recipient", name = "r0" }},
  {{ rate = "50/day", by = "recipient", name = "r1" }},
  {{ rate = "2 per 59 seconds", by = ["recipient", "content"], name = "r2" }},
  {{ rate = "5 per 59 minutes", by = ["recipient", "content"], name = "r3" }},
]
"""
BARE = """
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

async def hit(request):
    await request.body()
    return JSONResponse({"allowed": True, "retry_after": 0.0, "remaining": 1})

app = Starlette(routes=[Route("/v1/policies/sms/hit", hit, methods=["POST"])])
"""


@contextmanager
def running(args: list[str], url: str, env: dict[str, str] | None = None) -> Iterator[None]:
    """A server ``args`` starts, once ``url`` answers (at most 30 s); stopped by its group."""
    proc = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


async def _drive(call: Callable[[int], Awaitable[int]], seconds: float, clients: int) -> float:
    """Decisions per second of ``clients`` tasks calling ``call(n)`` (it returns how many
    decisions it made) for ``seconds``."""
    done = [0]
    deadline = time.monotonic() + seconds

    async def client(k: int) -> None:
        n = k
        while time.monotonic() < deadline:
            made = await call(n)  # not `done[0] += await ...`: that reads done[0] before
            done[0] += made  # the await, and other tasks' counts in between would be lost
            n += clients

    began = time.monotonic()
    await asyncio.gather(*(client(k) for k in range(clients)))
    return done[0] / (time.monotonic() - began)


def _over_http(url: str, batch: bool, args: argparse.Namespace) -> float:
    stream = sms_stream(200_000)

    async def run() -> float:
        limits = httpx.Limits(max_connections=args.clients)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as http:

            async def call(n: int) -> int:
                if batch:
                    at = (n * BATCH) % (len(stream) - BATCH)
                    contexts = [{"recipient": r, "content": c} for r, c in stream[at : at + BATCH]]
                    await http.post("/v1/policies/sms/hit-many", json={"contexts": contexts})
                    return len(contexts)
                r, c = stream[n % len(stream)]
                await http.post(
                    "/v1/policies/sms/hit", json={"context": {"recipient": r, "content": c}}
                )
                return 1

            return await _drive(call, args.seconds, args.clients)

    return asyncio.run(run())


def _in_process(config_text: str, batch: bool, args: argparse.Namespace) -> float:
    stream = sms_stream(200_000)

    async def run() -> float:
        guard = loads(config_text).async_guard()

        async def call(n: int) -> int:
            if batch:
                at = (n * BATCH) % (len(stream) - BATCH)
                contexts = [{"recipient": r, "content": c} for r, c in stream[at : at + BATCH]]
                await guard.hit_many("sms", contexts)
                return len(contexts)
            r, c = stream[n % len(stream)]
            await guard.hit("sms", recipient=r, content=c)
            return 1

        try:
            return await _drive(call, args.seconds, args.clients)
        finally:
            await guard.aclose()

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp, standalone(Path(tmp)) as server:
        text = CONFIG.format(port=server.port)
        config = Path(tmp) / "svc.toml"
        config.write_text(text)
        server.client.flushall()
        single, batch = _in_process(text, False, args), _in_process(text, True, args)
        rows.append(("in-process AsyncGuard", single, batch))
        for workers in (1, 2):
            server.client.flushall()
            port = free_port()
            command = [str(SCRIPT), "serve", str(config), "--port", str(port)]
            with running([*command, "--workers", str(workers)], f"http://127.0.0.1:{port}/healthz"):
                url = f"http://127.0.0.1:{port}"
                rows.append(
                    (
                        f"freqguard serve, {workers} worker(s)",
                        _over_http(url, False, args),
                        _over_http(url, True, args),
                    )
                )
        bare = Path(tmp) / "bare.py"
        bare.write_text(BARE)
        port = free_port()
        env = {**os.environ, "PYTHONPATH": tmp}
        uvicorn = [
            sys.executable,
            "-m",
            "uvicorn",
            "bare:app",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ]
        with running(uvicorn, f"http://127.0.0.1:{port}/", env):
            rows.append(
                (
                    "bare Starlette JSON, 1 worker",
                    _over_http(f"http://127.0.0.1:{port}", False, args),
                    0.0,
                )
            )
    print(f"\n{args.clients} clients, {args.seconds:g} s each; decisions/s")
    print(f"{'case':34} {'single':>10} {'batch of 20':>12}")
    for name, one, many in rows:
        print(f"{name:34} {one:10.0f} {many:12.0f}" if many else f"{name:34} {one:10.0f} {'-':>12}")


if __name__ == "__main__":
    main()
