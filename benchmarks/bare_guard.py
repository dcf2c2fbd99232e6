"""The floor of any HTTP service that makes one guard decision a request: a bare ASGI app,
no framework, no checks, a fixed answer, on the same uvicorn, loop and parser as
``freqguard serve``. ``GET /healthz`` answers ``{"status":"ok"}``; ``POST`` to any other
path reads the body's ``context`` and awaits ``AsyncGuard.hit`` on policy ``sms``, then
answers ``{"allowed":...}``. ``benchmarks.service_wrk`` runs it beside the service: its
hit / healthz is the most a service can reach here with a decision a request.

    FREQGUARD_SERVE_CONFIG=svc.toml uvicorn benchmarks.bare_guard:app --loop uvloop ...
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from freqguard.config import load
from freqguard.guard import AsyncGuard

_decode = msgspec.json.Decoder().decode
_guard: list[AsyncGuard] = []
_HEADERS = [(b"content-type", b"application/json")]


async def _answer(send: Any, body: bytes) -> None:
    headers = [*_HEADERS, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            _guard.append(load(os.environ["FREQGUARD_SERVE_CONFIG"]).async_guard())
            await send({"type": "lifespan.startup.complete"})
        await _guard.pop().aclose()  # the next lifespan (service_cpu's rounds) makes its own
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["path"] == "/healthz":
        await _answer(send, b'{"status":"ok"}')
        return
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    decision = await _guard[-1].hit("sms", 1, **_decode(body)["context"])
    await _answer(send, b'{"allowed":true}' if decision.allowed else b'{"allowed":false}')
