"""A Starlette API behind FreqGuardMiddleware.

    uvicorn examples.starlette_app:app

``POST /sms/{recipient}`` is capped per client address (10/minute) and ``GET /search`` per
API key (5 per 10 seconds); ``/health`` is not capped.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from freqguard import AsyncGuard
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit, client_ip, header


async def send_sms(request: Request) -> JSONResponse:
    return JSONResponse({"sent": request.path_params["recipient"]})


async def search(request: Request) -> JSONResponse:
    return JSONResponse({"results": []})


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


async def echo(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text("hello")
    await websocket.close()


def build(
    guard: AsyncGuard | None = None, trusted_proxies: tuple[str, ...] = ("127.0.0.1",)
) -> Starlette:
    app = Starlette(
        routes=[
            Route("/sms/{recipient}", send_sms, methods=["POST"]),
            Route("/search", search),
            Route("/health", health),
            WebSocketRoute("/ws", echo),
        ]
    )
    app.add_middleware(
        FreqGuardMiddleware,
        guard=guard or AsyncGuard(),
        limits=[
            Limit(
                "/sms/{recipient}", "10/minute", key=client_ip(trusted_proxies), methods=["POST"]
            ),
            Limit("/search", "5 per 10 seconds", key=header("X-API-Key")),
            Limit("/ws", "2/minute", key=client_ip(trusted_proxies)),
        ],
    )
    return app


app = build()
