"""The decision service at wire speed: ``wrk`` against ``freqguard serve`` with 1 and 2
workers, beside the in-process AsyncGuard, in one table with the ratios that matter.

    python -m benchmarks.service_wrk [--seconds 5] [--connections 32] [--rounds 3] [--before]

Starts its own redis-server (a free port) and, one at a time, ``freqguard serve`` with 1
and 2 workers (the four-rule SMS policy on that Redis). Each is driven by ``wrk`` for
``--seconds`` over ``--connections`` keep-alive connections: ``GET /healthz``, a single
``hit`` and a 20-item ``hit-many`` (then hits on one connection: latency alone), the POST
bodies made by a Lua script with random recipients (``apt-get install wrk``). ``--before``
adds uvicorn's own protocol on asyncio's loop with 2 workers: the Nagle stall ``serve``
removes. The in-process ``AsyncGuard`` is driven by as many asyncio tasks. The load
generator shares the machine with the servers: compare within one run; ``--rounds 3`` runs
1 and 2 workers in turn three times and takes each case's median.

Targets: a hit at 0.6x or more of ``/healthz``; 2 workers at 0.8x or more of 1. The
floor (:mod:`benchmarks.bare_guard`: a bare ASGI app that only awaits ``AsyncGuard.hit``,
same uvicorn, loop and parser, one worker) shows how near 0.6x any service making one
decision a request can come on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.service import CONFIG, running
from freqguard.config import loads
from tests.servers import free_port, standalone

SCRIPT = Path(sys.executable).parent / "freqguard"
BATCH = 20
#: wrk's request generator: a random recipient (and one of five contents) per body
LUA = """
local batch = %d
local threads = 0
setup = function(thread)
  threads = threads + 1
  thread:set("id", threads)
end
init = function(args)
  math.randomseed(os.time() * 1000 + id)  -- each thread its own recipients
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local function context()
  return '{"recipient":"+49176' .. math.random(0, 9999999) .. '","content":"c'
    .. math.random(1, 5) .. '"}'
end
request = function()
  if batch == 0 then
    return wrk.format(nil, "/v1/policies/sms/hit", nil, '{"context":' .. context() .. '}')
  end
  local items = {}
  for i = 1, batch do items[i] = context() end
  local body = '{"contexts":[' .. table.concat(items, ",") .. ']}'
  return wrk.format(nil, "/v1/policies/sms/hit-many", nil, body)
end
"""
#: uvicorn's own protocol and asyncio's loop, 2 workers: how serve ran before
BEFORE = (
    "import uvicorn; uvicorn.run('freqguard.service:from_env', factory=True, port={port}, "
    "workers=2, loop='asyncio', http='h11', log_level='warning')"
)


def _health(port: int) -> str:
    return f"http://127.0.0.1:{port}/healthz"


def _wrk(
    url: str, script: Path | None, args: argparse.Namespace, connections: int = 0
) -> tuple[float, float]:
    """Requests/s and mean latency (ms) of one wrk run (``connections``: 0 for
    ``--connections``; 1 runs one thread on one connection)."""
    connections = connections or args.connections
    threads = 1 if connections == 1 else 2
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{args.seconds:g}s", "--latency"]
    if script is not None:
        command += ["-s", str(script)]
    out = subprocess.run(
        [*command, url], capture_output=True, text=True, check=True, timeout=args.seconds + 60
    ).stdout
    rate = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))  # type: ignore[union-attr]
    value, unit = re.search(r"Latency\s+([0-9.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
    return rate, float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


Row = tuple[str, float, float, int]  # case, requests/s, mean latency ms, decisions a request


def _drive(url: str, scripts: dict[str, Path], args: argparse.Namespace) -> dict[str, Row]:
    healthz = _wrk(f"{url}/healthz", None, args)
    hit = _wrk(url, scripts["hit"], args)
    many = _wrk(url, scripts["many"], args)
    alone = _wrk(url, scripts["hit"], args, connections=1)
    return {
        "healthz": ("GET /healthz", *healthz, 0),
        "hit": ("POST hit", *hit, 1),
        "alone": ("POST hit, 1 connection", *alone, 1),
        "many": (f"POST hit-many ({BATCH})", *many, BATCH),
    }


#: the floor: a bare ASGI app that only decides (benchmarks.bare_guard), as serve runs
FLOOR = [
    sys.executable, "-m", "uvicorn", "benchmarks.bare_guard:app", "--loop", "uvloop",
    "--http", "httptools", "--log-level", "warning", "--no-access-log", "--port",
]  # fmt: skip


def _floor(config: Path, scripts: dict[str, Path]) -> dict[str, Row]:
    """/healthz and hits of :data:`FLOOR`, one worker: what any service can reach here."""
    port = free_port()
    env = {**os.environ, "FREQGUARD_SERVE_CONFIG": str(config)}
    with running([*FLOOR, str(port)], _health(port), env):
        url = f"http://127.0.0.1:{port}"
        healthz, hit = _wrk(f"{url}/healthz", None, ARGS), _wrk(url, scripts["hit"], ARGS)
    return {"healthz": ("GET /healthz", *healthz, 0), "hit": ("POST hit", *hit, 1)}


def _median(rounds: list[dict[str, Row]]) -> dict[str, Row]:
    """Each case's round of median rate (its latency with it)."""
    middle = len(rounds) // 2
    return {
        key: sorted((r[key] for r in rounds), key=lambda row: row[1])[middle] for key in rounds[0]
    }


def _in_process(config_text: str, batch: int, tasks: int, seconds: float) -> float:
    """Decisions/s of ``tasks`` asyncio tasks calling the AsyncGuard for ``seconds``."""

    async def run() -> float:
        guard = loads(config_text).async_guard()
        done, deadline = [0], time.monotonic() + seconds
        rng = random.Random(7)

        def context() -> dict[str, str]:
            return {"recipient": f"+49176{rng.randrange(10**7)}", "content": f"c{rng.randrange(5)}"}

        async def client() -> None:
            while time.monotonic() < deadline:
                if batch:
                    await guard.hit_many("sms", [context() for _ in range(batch)])
                else:
                    ctx = context()
                    await guard.hit("sms", 1, **ctx)
                done[0] += batch or 1

        began = time.monotonic()
        try:
            await asyncio.gather(*(client() for _ in range(tasks)))
        finally:
            await guard.aclose()
        return done[0] / (time.monotonic() - began)

    return asyncio.run(run())


def _table(runs: dict[str, dict[str, Row]], inproc: tuple[float, float]) -> None:
    one, two = runs["1 worker"], runs["2 workers"]
    print(f"\nwrk -t2 -c{ARGS.connections} -d{ARGS.seconds:g}s, median of {ARGS.rounds} round(s)")
    print("requests/s (mean latency)")
    print(f"{'case':22} {'1 worker':>19} {'2 workers':>19} {'2w/1w':>6} {'decisions/s (2w)':>17}")
    for key in ("healthz", "hit", "many", "alone"):
        name, rate1, lat1, per = one[key]
        _, rate2, lat2, _ = two[key]
        cells = f"{rate1:9.0f} ({lat1:5.1f} ms) {rate2:9.0f} ({lat2:5.1f} ms)"
        decided = f"{rate2 * per:17.0f}" if per else f"{'-':>17}"
        print(f"{name:22} {cells} {rate2 / rate1:6.2f} {decided}")
    for label, rows in (("1 worker", one), ("2 workers", two)):
        ratio = rows["hit"][1] / rows["healthz"][1]
        print(f"hit / healthz, {label}: {ratio:.2f} (target >= 0.6)")
    for key in ("healthz", "hit"):
        ratio = two[key][1] / one[key][1]
        print(f"2 workers / 1, {key}: {ratio:.2f} (target >= 0.8)")
    floor = runs["floor"]
    ratio = floor["hit"][1] / floor["healthz"][1]
    print(
        f"floor (bare ASGI + AsyncGuard.hit, 1 worker): /healthz {floor['healthz'][1]:.0f}, "
        f"hit {floor['hit'][1]:.0f}, hit / healthz {ratio:.2f}; the service's hit at "
        f"{one['hit'][1] / floor['hit'][1]:.2f}x of it"
    )
    for name, rate, lat, _ in runs.get("before", {}).values():
        print(f"before (uvicorn's h11 on asyncio, 2 workers), {name}: {rate:.0f} ({lat:.1f} ms)")
    print(f"in-process AsyncGuard, {ARGS.connections} tasks: hit {inproc[0]:.0f}/s, ", end="")
    print(f"hit-many({BATCH}) {inproc[1]:.0f} decisions/s")


ARGS = argparse.Namespace()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--before", action="store_true", help="add the stalled baseline")
    parser.add_argument("--rounds", type=int, default=1, help="each case's median of N runs")
    parser.parse_args(namespace=ARGS)
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (apt-get install wrk)")
    with tempfile.TemporaryDirectory() as tmp, standalone(Path(tmp)) as server:
        text = CONFIG.format(port=server.port)
        config = Path(tmp) / "svc.toml"
        config.write_text(text)
        scripts = {"hit": Path(tmp) / "hit.lua", "many": Path(tmp) / "many.lua"}
        scripts["hit"].write_text(LUA % 0)
        scripts["many"].write_text(LUA % BATCH)
        rounds: dict[str, list[dict[str, Row]]] = {"1 worker": [], "2 workers": []}
        for _ in range(ARGS.rounds):  # 1 and 2 workers in turn: the machine's noise shared
            for workers, label in ((1, "1 worker"), (2, "2 workers")):
                server.client.flushall()
                port = free_port()
                command = [str(SCRIPT), "serve", str(config), "--port", str(port)]
                with running([*command, "--workers", str(workers)], _health(port)):
                    rounds[label].append(_drive(f"http://127.0.0.1:{port}", scripts, ARGS))
        runs: dict[str, dict[str, Row]] = {k: _median(each) for k, each in rounds.items()}
        server.client.flushall()
        runs["floor"] = _floor(config, scripts)
        if ARGS.before:
            port = free_port()
            env = {**os.environ, "FREQGUARD_SERVE_CONFIG": str(config)}
            with running([sys.executable, "-c", BEFORE.format(port=port)], _health(port), env):
                url = f"http://127.0.0.1:{port}"
                hit, alone = _wrk(url, scripts["hit"], ARGS), _wrk(url, scripts["hit"], ARGS, 1)
                runs["before"] = {
                    "hit": ("POST hit", *hit, 1),
                    "alone": ("POST hit, 1 connection", *alone, 1),
                }
        server.client.flushall()
        inproc = (
            _in_process(text, 0, ARGS.connections, ARGS.seconds),
            _in_process(text, BATCH, ARGS.connections, ARGS.seconds),
        )
    _table(runs, inproc)


if __name__ == "__main__":
    main()
