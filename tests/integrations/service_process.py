"""A real ``freqguard serve`` for the service's tests: started on a free port, polled until it
answers (bounded), its stderr kept in a file, stopped by its PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.servers import free_port

SCRIPT = Path(sys.executable).parent / "freqguard"
SMS = (
    '\n[[policy]]\nname = "sms"\n'
    'rules = [{ rate = "3/minute", by = "recipient", name = "rcpt-1m" },\n'
    '  { rate = "9 per 59 seconds", by = ["recipient", "content"], name = "content-59s" }]\n'
)


def sms_config(directory: Path, port: int) -> Path:
    """A configuration of the SMS policy on the Redis at ``port``, under a prefix of its
    own: the records (and the buckets setting each client records, for a day) stay apart
    from those of the session's other tests on the same server."""
    config = directory / "svc.toml"
    config.write_text(f'backend = "redis://127.0.0.1:{port}"\nprefix = "svc"\n{SMS}')
    return config


@dataclass
class Served:
    """A running service: its URL, its process, and the file its stderr goes to."""

    url: str
    process: subprocess.Popen[bytes]
    stderr: Path

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")


@contextmanager
def serving(config: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """``freqguard serve config args``, up (``/healthz`` answers) within 30 s; ``env``: its
    environment's additions to this process's, whose tokens it never inherits."""
    port = free_port()
    stderr = config.parent / f"serve-{port}.log"
    with stderr.open("wb") as sink:
        process = subprocess.Popen(
            [str(SCRIPT), "serve", str(config), "--port", str(port), *args],
            stdout=subprocess.DEVNULL,
            stderr=sink,
            start_new_session=True,
            env={**_untokened(), **(env or {})},
        )
    served = Served(f"http://127.0.0.1:{port}", process, stderr)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # bounded polling for the server to start
            try:
                if httpx.get(f"{served.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
            if process.poll() is not None:
                raise AssertionError(f"the service exited: {served.log()}")
        else:
            raise AssertionError("the service did not start in 30 s")
        yield served
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


def refused(directory: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """What ``freqguard serve`` (a memory store) says as it refuses to start with ``args``:
    it must exit 2, a usage error, before serving anything."""
    config = directory / "svc.toml"
    config.write_text(f'backend = "memory://"\n{SMS}')
    ran = subprocess.run(
        [str(SCRIPT), "serve", str(config), "--port", str(free_port()), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert ran.returncode == 2, ran.stderr
    return ran.stderr


def _untokened() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("FREQGUARD_TOKENS")}
