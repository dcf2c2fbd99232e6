"""The example project (examples/django_project/) runs: ``manage.py check`` passes, and
under a real ASGI server (uvicorn, in a subprocess on a free loopback port) N concurrent
requests admit exactly the cap: on memory with one worker, on Redis across two workers."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.conftest import flush
from tests.servers import RedisServer, free_port

pytestmark = pytest.mark.slow  # Django under real uvicorn processes

pytest.importorskip("django", reason="the django extra is not installed")

ROOT = Path(__file__).resolve().parent.parent.parent
CONCURRENT = 40
CAP = 5  # @capped("5/minute") on examples/django_project/views.py's send_sms


@contextmanager
def _served(backend: str, workers: int) -> Iterator[str]:
    """uvicorn serving the example project, stopped by its PID (its process group)."""
    port = free_port()
    env = {**os.environ, "FREQGUARD_BACKEND": backend, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "uvicorn", "examples.django_project.asgi:application"]
    options = ["--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    proc = subprocess.Popen(
        [*command, *options, "--log-level", "warning"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # bounded polling for the server to answer
            try:
                if httpx.get(f"{url}/", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise AssertionError("uvicorn did not answer in 30 s")
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()


def _concurrent(url: str, path: str, headers: dict[str, str] | None = None) -> list[int]:
    async def run() -> list[int]:
        limits = httpx.Limits(max_connections=CONCURRENT)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
            found = await asyncio.gather(
                *(client.get(path, headers=headers) for _ in range(CONCURRENT))
            )
        return [response.status_code for response in found]

    return asyncio.run(run())


def test_on_memory_under_uvicorn_exactly_the_cap_is_admitted() -> None:
    with _served("memory://", 1) as url:
        codes = _concurrent(url, "/sms")
        denied = httpx.get(f"{url}/sms")
        quote = _concurrent(url, "/quote", {"x-api-key": "k1"})
    assert codes.count(200) == CAP
    assert codes.count(429) == CONCURRENT - CAP
    assert denied.status_code == 429
    # a real server on real time: the window's first hit a moment ago (up to 60 s: a loaded
    # machine takes a second between them, and it said 59)
    assert 0 < int(denied.headers["retry-after"]) <= 60
    assert denied.headers["content-type"] == "application/problem+json"
    assert quote.count(200) == 3


def test_on_redis_across_two_workers_exactly_the_cap_is_admitted(
    redis_server: RedisServer,
) -> None:
    flush([redis_server])
    with _served(f"redis://127.0.0.1:{redis_server.port}", 2) as url:
        codes = _concurrent(url, "/sms")
    assert codes.count(200) == CAP
    assert codes.count(429) == CONCURRENT - CAP


def test_manage_py_check_passes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.django_project.manage", "check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "no issues" in done.stdout
