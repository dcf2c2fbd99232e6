"""The HTTP benchmark's apps under callgrind: work per request, the same on a busy machine.

    apt-get install valgrind
    python -m benchmarks.http_cycles [--requests 1000] [--apps bare,freqguard,slowapi]

Each app of :mod:`benchmarks.http_apps` runs in uvicorn (one worker, as in
:mod:`benchmarks.http_starlette`) under ``valgrind --tool=callgrind --cache-sim=yes``,
instrumented only once it serves. A built-in client sends ``GET /hello`` on 4 keep-alive
connections: a warm-up, then exactly ``--requests`` requests between zeroing and dumping the
counters. Per request it prints the instructions the server ran, its simulated L1 cache
misses, and an estimate of its cycles (instructions + 10 per L1 miss + 100 per last-level
miss, callgrind's own weighting), which repeats within about 0.3 % from run to run however
loaded the machine is.

What it leaves out: the kernel's share (the socket reads and writes, ~15 % of the bare
app's CPU time here, and the same for every app), so its ratios read a few points lower
than a rate measured by wrk on an idle machine would; and other processes' effect on the
caches. It attributes nothing to Python functions (callgrind sees the interpreter); use
:mod:`benchmarks.http_inproc` for that.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.http_starlette import uvicorn_command
from tests.servers import free_port

_WEIGHTS = {"Ir": 1, "I1mr": 10, "D1mr": 10, "D1mw": 10, "ILmr": 100, "DLmr": 100, "DLmw": 100}


def requests(port: int, count: int, connections: int = 4) -> None:
    """``count`` requests on ``connections`` keep-alive connections, each answered 200."""
    request = f"GET /hello HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
    buffers = [b""] * connections
    try:
        done = 0
        while done < count:
            batch = min(connections, count - done)
            for sock in socks[:batch]:
                sock.sendall(request)
            for i in range(batch):
                buffers[i] = _read_response(socks[i], buffers[i])
            done += batch
    finally:
        for sock in socks:
            sock.close()


def _read_response(sock: socket.socket, buffer: bytes) -> bytes:
    """Read one response (status 200, with a Content-Length); returns what follows it."""
    while True:
        end = buffer.find(b"\r\n\r\n")
        if end >= 0:
            head = buffer[:end].lower()
            if not head.startswith(b"http/1.1 200"):
                raise RuntimeError(f"unexpected response: {head[:40]!r}")
            length = int(head.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            if len(buffer) >= end + 4 + length:
                return buffer[end + 4 + length :]
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("the server closed the connection")
        buffer += chunk


def _wait_until_serving(port: int, process: subprocess.Popen[bytes]) -> None:
    for _ in range(1200):  # valgrind starts Python slowly
        if process.poll() is not None:
            raise RuntimeError("the server exited")
        try:
            requests(port, 1, 1)
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the server did not start")


def _totals(dump: Path) -> dict[str, int]:
    events: list[str] = []
    totals: list[int] = []
    for line in dump.read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith(("summary:", "totals:")):
            totals = [int(v) for v in line.split()[1:]]
    return dict(zip(events, totals, strict=True))


def measure(factory: str, count: int, workdir: Path) -> dict[str, float]:
    """Per-request callgrind counts of one app, over ``count`` requests after a warm-up."""
    port = free_port()
    out = workdir / f"{factory}.out"
    valgrind = ["valgrind", "--tool=callgrind", "--cache-sim=yes", "--instr-atstart=no"]
    process = subprocess.Popen(
        [*valgrind, f"--callgrind-out-file={out}", *uvicorn_command(factory, port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    control = ["callgrind_control"]
    try:
        _wait_until_serving(port, process)
        subprocess.run([*control, "-i", "on", str(process.pid)], check=True, capture_output=True)
        requests(port, 300)  # warm up, instrumented: the simulated caches fill
        subprocess.run([*control, "-z", str(process.pid)], check=True, capture_output=True)
        requests(port, count)
        subprocess.run([*control, "-d", str(process.pid)], check=True, capture_output=True)
    finally:
        process.terminate()
        process.wait(60)
    dumps = sorted(workdir.glob(f"{factory}.out.*"), key=os.path.getmtime)
    if not dumps:
        raise RuntimeError(f"callgrind wrote no dump for {factory}")
    totals = _totals(dumps[-1])
    misses = sum(totals.get(e, 0) for e in ("I1mr", "D1mr", "D1mw"))
    cycles = sum(weight * totals.get(event, 0) for event, weight in _WEIGHTS.items())
    return {"ir": totals["Ir"] / count, "l1": misses / count, "cycles": cycles / count}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--apps", default="bare,freqguard,slowapi")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed: apt-get install valgrind")
    names = args.apps.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        results = {name: measure(name, args.requests, Path(tmp)) for name in names}
    base = results.get("bare")
    print(f"{args.requests} requests, GET /hello, uvicorn, one worker, under callgrind\n")
    print(f"{'':<10}{'instr/req':>11}{'L1 miss/req':>13}{'est. cycles/req':>17}{'bare/app':>10}")
    for name, r in results.items():
        ratio = f"{base['cycles'] / r['cycles']:>10.1%}" if base else ""
        print(f"{name:<10}{r['ir']:>11,.0f}{r['l1']:>13,.0f}{r['cycles']:>17,.0f}{ratio}")


if __name__ == "__main__":
    main()
