"""The ASGI middleware's leases under a Starlette app's exits (docs/strategies/concurrency.md,
"Calls and requests in flight"): a streamed answer whose client goes away at any chunk, a
request cancelled at any step of the loop, an error after the answer began, background
tasks and a WebSocket. Each request's lease goes back once: a lease taken beside them (at
the same µs, time pinned) stays held, so a second release of one would show.

The app is driven by hand (its ``receive`` and ``send``), so that the disconnect and the
cancellation land where the test puts them."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from freqguard import AsyncGuard, ManualClock, Policy, Rule
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit

TWO = Policy("two", Rule("2 concurrent", lease=60), Rule("100/minute"))


class _Site:
    """A Starlette app whose every route is capped by :data:`TWO`, and what its routes saw."""

    def __init__(self) -> None:
        self.guard = AsyncGuard(policies=[TWO], clock=ManualClock(1_700_000_000))
        self.seen: list[object] = []
        routes = [
            Route("/stream", self.stream),
            Route("/fails", self.fails),
            Route("/later", self.later),
            Route("/slow", self.slow),
            WebSocketRoute("/socket", self.socket),
        ]
        limits = [Limit("/{rest:path}", rule=TWO, key=lambda request: {})]
        middleware = [Middleware(FreqGuardMiddleware, guard=self.guard, limits=limits)]
        self.app = Starlette(routes=routes, middleware=middleware)

    async def held(self) -> int:
        return 2 - (await self.guard.peek("two")).rules[0].remaining

    async def stream(self, request: Request) -> StreamingResponse:
        async def body() -> Any:
            try:
                for _ in range(1000):
                    await asyncio.sleep(0)
                    yield b"x"
            finally:
                self.seen.append("closed")

        return StreamingResponse(body())

    async def fails(self, request: Request) -> StreamingResponse:
        async def body() -> Any:
            yield b"x"
            raise ValueError("after the answer began")

        return StreamingResponse(body())

    async def later(self, request: Request) -> PlainTextResponse:
        async def task() -> None:
            self.seen.append(await self.held())

        return PlainTextResponse("ok", background=BackgroundTask(task))

    async def slow(self, request: Request) -> None:
        await asyncio.Event().wait()

    async def socket(self, websocket: WebSocket) -> None:
        await websocket.accept()
        self.seen.append(await self.held())
        with contextlib.suppress(WebSocketDisconnect):
            await websocket.receive_text()


async def _request(
    app: Any, path: str, kind: str = "http", gone_after: int | None = None
) -> list[dict[str, Any]]:
    """``path`` asked of ``app``; with ``gone_after``, the client goes away once that many
    body chunks were sent (``http.disconnect``, which Starlette listens for under ASGI
    spec 2.3). Returns the messages sent."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    sent: list[dict[str, Any]] = []
    scope = {
        "type": kind,
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http" if kind == "http" else "ws",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"t")],
        "client": ("10.0.0.1", 5000),
        "server": ("t", 80),
        "root_path": "",
    }
    inbox.put_nowait({"type": "http.request", "body": b""} if kind == "http" else {})
    if kind == "websocket":
        inbox.get_nowait()
        inbox.put_nowait({"type": "websocket.connect"})

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        chunks = sum(m["type"] == "http.response.body" for m in sent)
        if message["type"] == "http.response.body" and chunks == gone_after:
            inbox.put_nowait({"type": "http.disconnect"})
        if message["type"] == "websocket.accept":
            inbox.put_nowait({"type": "websocket.disconnect", "code": 1000})

    await app(scope, inbox.get, send)
    return sent


def test_a_streamed_answer_whose_client_goes_away_at_any_chunk_gives_its_lease_back_once() -> None:
    async def main() -> list[tuple[int, int, list[object]]]:
        wrong = []
        for gone_after in range(1, 30):
            site = _Site()
            await site.guard.take_lease("two")  # beside
            await _request(site.app, "/stream", gone_after=gone_after)
            if (held := await site.held()) != 1 or site.seen != ["closed"]:
                wrong.append((gone_after, held, site.seen))
        return wrong

    assert asyncio.run(main()) == []


def test_a_request_cancelled_at_any_step_gives_its_lease_back_once() -> None:
    async def main() -> list[tuple[str, int, int]]:
        wrong = []
        for path in ("/slow", "/stream"):
            for steps in range(40):
                site = _Site()
                await site.guard.take_lease("two")  # beside
                task = asyncio.create_task(_request(site.app, path))
                for _ in range(steps):
                    await asyncio.sleep(0)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                if (held := await site.held()) != 1:
                    wrong.append((path, steps, held))
        return wrong

    assert asyncio.run(main()) == []


def test_an_error_after_the_answer_began_gives_its_lease_back_once() -> None:
    async def main() -> int:
        site = _Site()
        await site.guard.take_lease("two")  # beside
        with pytest.raises(Exception) as raised:  # noqa: PT011 (its kind is checked below)
            await _request(site.app, "/fails")
        found: Any = raised.value  # an older Starlette's errors middleware raises it in a
        while not isinstance(found, ValueError) and getattr(found, "exceptions", None):
            found = found.exceptions[0]  # group (the floor job's Starlette)
        assert isinstance(found, ValueError), raised.value
        assert "after the answer began" in str(found)
        return await site.held()

    assert asyncio.run(main()) == 1


def test_a_request_holds_its_lease_while_its_background_tasks_run() -> None:
    """Starlette runs a response's background tasks after its last chunk, inside the app's
    call: the request is in flight until they end (docs/strategies/concurrency.md)."""

    async def main() -> tuple[list[object], int]:
        site = _Site()
        await _request(site.app, "/later")
        return site.seen, await site.held()

    assert asyncio.run(main()) == ([1], 0)


def test_a_websocket_holds_its_lease_while_it_is_open_and_one_past_the_cap_is_closed() -> None:
    async def main() -> tuple[list[object], list[dict[str, Any]], int]:
        site = _Site()
        await _request(site.app, "/socket", kind="websocket")  # held while open, then back
        beside = [await site.guard.take_lease("two") for _ in range(2)]
        refused = await _request(site.app, "/socket", kind="websocket")
        for decision in beside:
            await site.guard.release(decision)
        return site.seen, refused, await site.held()

    seen, refused, held = asyncio.run(main())
    assert seen == [1]
    assert [(m["type"], m.get("code")) for m in refused] == [("websocket.close", 1008)]
    assert held == 0
