"""The pure ASGI middleware needs no framework: with Starlette (and FastAPI) absent,
``freqguard.integrations.asgi`` imports and limits a bare ASGI application, route
parameters included."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import asyncio, sys
for name in ("starlette", "fastapi"):
    sys.modules[name] = None  # as if not installed
from freqguard import AsyncGuard, ManualClock
from freqguard.integrations.asgi import FreqGuardMiddleware, Limit

async def app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})

limited = FreqGuardMiddleware(
    app, guard=AsyncGuard(clock=ManualClock()), limits=[Limit("/users/{id:int}", "2/minute")]
)

async def call(path):
    sent = []
    async def receive():
        return {"type": "http.request"}
    async def send(message):
        sent.append(message)
    scope = {"type": "http", "method": "GET", "path": path, "headers": [],
             "client": ("10.0.0.1", 1), "root_path": ""}
    await limited(scope, receive, send)
    return sent[0]["status"]

async def main():
    print([await call("/users/7") for _ in range(3)], await call("/users/x"))
    loaded = [m for m in sys.modules if m.startswith(("starlette", "fastapi"))]
    print(sorted(m for m in loaded if sys.modules[m]))

asyncio.run(main())
"""


def test_the_asgi_middleware_runs_without_starlette() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[200, 200, 429] 200", "[]"]
