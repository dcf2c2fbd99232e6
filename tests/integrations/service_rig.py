"""What the decision service's in-process tests share (``test_service.py``,
``test_service_bad_bodies.py``): a policy of two rules, and requests sent in turn to an app
of it on a MemoryBackend and a ManualClock through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from freqguard import AsyncGuard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.service import create_app

SMS = Policy(
    "sms",
    Rule("2/minute", by="recipient", name="rcpt-1m"),
    Rule("1 per 59 seconds", by=("recipient", "content"), name="content-59s"),
)


def _call(
    requests: list[tuple[str, str, Any, dict[str, str]]], tokens: tuple[str, ...] = ()
) -> list[httpx.Response]:
    guard = AsyncGuard(MemoryBackend(), [SMS], clock=ManualClock(1_700_000_000))
    app = create_app(guard, tokens)

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            out = []
            for method, path, body, headers in requests:
                content = body if isinstance(body, bytes) else json.dumps(body).encode()
                sent = {"content-type": "application/json", **headers}
                out.append(await http.request(method, path, content=content, headers=sent))
            return out

    return asyncio.run(run())
