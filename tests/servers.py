"""Real redis-server processes for the tests: started on free loopback ports in a temporary
directory, stopped afterwards. Never the shared Redis on 6379.

The only waits here are for a real server process to come up (bounded polls); no test sleeps.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

STARTUP_SECONDS = 20.0


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A free loopback port whose cluster bus port (port + 10000) is free too."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(20_000, 55_000)
        if _bindable(port) and _bindable(port + 10_000):
            return port
    raise RuntimeError("no free port pair found on 127.0.0.1")


def _wait(check: object, what: str) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        try:
            if check():  # type: ignore[operator]
                return
        except (redis.ConnectionError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up within {STARTUP_SECONDS}s")
        time.sleep(0.05)  # waiting for a real server process, not for test time


class RedisServer:
    """One redis-server process."""

    def __init__(self, workdir: Path, *extra: str) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.port = free_port()
        self.dir = workdir / str(self.port)
        self.dir.mkdir(parents=True)
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
                "--logfile",
                str(self.dir / "redis.log"),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.client = redis.Redis(port=self.port, socket_timeout=5)
        _wait(self.client.ping, f"redis-server on port {self.port}")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.client.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def standalone(workdir: Path) -> Iterator[RedisServer]:
    server = RedisServer(workdir)
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def cluster(workdir: Path, masters: int = 3) -> Iterator[list[RedisServer]]:
    """A real Redis Cluster of ``masters`` primaries, made with ``redis-cli --cluster create``."""
    servers: list[RedisServer] = []
    try:
        for _ in range(masters):
            servers.append(
                RedisServer(workdir, "--cluster-enabled", "yes", "--cluster-node-timeout", "5000")
            )
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{s.port}" for s in servers),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )

        def ready() -> bool:
            infos = [s.client.execute_command("CLUSTER INFO") for s in servers]  # type: ignore[no-untyped-call]
            return all(info.get("cluster_state") == "ok" for info in infos)

        _wait(ready, "the cluster")
        yield servers
    finally:
        for server in servers:
            server.stop()
