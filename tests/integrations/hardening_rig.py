"""What the decision service's hardening tests share (``test_service_hardening.py``,
``test_service_hardening_errors.py``): two policies, an app of them on a MemoryBackend and a
ManualClock, requests sent in turn through httpx's ASGI transport, an answer checked as
problem+json, and every write the service takes."""

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
DAILY = Policy("daily", Rule("2/day", by="user", calendar=True, tz_from="tz", name="day"))
CTX = {"recipient": "+1555", "content": "hi"}
JSON = {"content-type": "application/json"}
PROBLEM = "application/problem+json"

Request = tuple[str, str, Any, dict[str, str]]


def _send(app: Any, requests: list[Request]) -> list[httpx.Response]:
    """Each request in turn, answered by the app (an app's exception as its 500)."""

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            out = []
            for method, path, body, headers in requests:
                content = body if isinstance(body, bytes) else json.dumps(body).encode()
                out.append(await http.request(method, path, content=content, headers=headers))
            return out

    return asyncio.run(run())


def _app(tokens: tuple[str, ...] = (), backend: Any = None) -> Any:
    store = MemoryBackend() if backend is None else backend
    guard = AsyncGuard(store, [SMS, DAILY], clock=ManualClock(1_700_000_000))
    return create_app(guard, tokens)


def _json(method: str, path: str, body: Any, **headers: str) -> Request:
    return (method, path, body, {**JSON, **headers})


def _problem(response: httpx.Response, status: int, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM, response.headers
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["title"]
    assert body["detail"]
    if field is not None:
        assert body.get("field") == field, body
    return body


def _peek(ctx: dict[str, Any] = CTX) -> Request:
    return _json("POST", "/v1/policies/sms/peek", {"context": ctx})


#: Every write the service takes: (method, path, a valid body).
WRITES: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/v1/policies/sms/hit", {"context": CTX}),
    ("POST", "/v1/policies/sms/hit-many", {"contexts": [CTX]}),
    ("POST", "/v1/policies/sms/peek", {"context": CTX}),
    ("POST", "/v1/policies/sms/refund", {"context": CTX}),
    ("POST", "/v1/policies/sms/reset", {"context": CTX}),
    ("POST", "/v1/policies/sms/limits", {"context": {"recipient": "+1555"}}),
    (
        "PUT",
        "/v1/policies/sms/limits/rcpt-1m",
        {"context": {"recipient": "+1555"}, "rate": "9/minute"},
    ),
    ("DELETE", "/v1/policies/sms/limits/rcpt-1m", {"context": {"recipient": "+1555"}}),
]
