"""The decision service and a policy with a concurrency rule (adversarial pass over the
places leases are taken for a user). The service has no call that takes or gives back a
lease, so such a policy cannot be hit through it; today that is found only per request, as
a 422 that blames the body's ``context`` (which is fine) and tells an HTTP client to call a
Python method (``guard.lease(...)``, ``guard.release(decision)``) it cannot reach, while
the service starts and lists the policy as one it serves."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from freqguard import AsyncGuard, ConfigError, ManualClock, MemoryBackend, Policy, Rule
from freqguard.service import create_app
from tests.conftest import START

VENDOR = Policy(
    "vendor",
    Rule("2 concurrent", lease=60, by="account", name="flight"),
    Rule("10/minute", by="account", name="rate"),
)


def _guard() -> AsyncGuard:
    return AsyncGuard(MemoryBackend(), [VENDOR], clock=ManualClock(START))


def _post(path: str, body: dict[str, Any]) -> httpx.Response:
    app = create_app(_guard())

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return await http.post(path, json=body)

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("action", "body"),
    [
        ("hit", {"context": {"account": "a"}}),
        ("hit-many", {"contexts": [{"account": "a"}]}),
        ("refund", {"context": {"account": "a"}}),
    ],
)
def test_a_concurrency_policys_refusal_names_the_policy_not_the_bodys_context_or_python(
    action: str, body: dict[str, Any]
) -> None:
    """``POST /v1/policies/vendor/hit`` answers 422 ``field: "context"``, detail "take its
    leases with guard.lease('vendor', ...) (a with block gives each back), not with hit,
    hit_many or acquire" (refund: "give a lease back with guard.release(decision)"): the
    guard's ``ConfigError`` for a Python caller, passed through ``invalid(field, ...)``.
    The body is valid, and no field of it can be changed to make the call work; the HTTP
    client is pointed at methods the service does not expose. The refusal should be about
    the policy (the service cannot hold a lease for a call in flight), naming no field of
    the body and no Python method."""
    response = _post(f"/v1/policies/vendor/{action}", body)
    problem = response.json()
    assert response.status_code != 500
    assert problem.get("field") not in ("context", "contexts"), problem
    assert "guard." not in problem["detail"], problem["detail"]
    assert "concurren" in problem["detail"], problem["detail"]


def test_serving_a_policy_no_call_of_the_service_can_hit_is_told_as_the_app_is_made(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``create_app`` (and so ``freqguard serve`` of a configuration declaring a
    concurrency rule) starts without a word, lists the policy in ``/v1/policies`` and the
    page, and refuses every hit of it, one request at a time, in production. A policy the
    service can never hit is known as the app is made: refuse it there (a ConfigError
    naming the policy and its concurrency rule), or at least warn once."""
    caplog.set_level(logging.WARNING)
    refused: list[str] = []
    try:
        create_app(_guard())
    except ConfigError as exc:
        refused.append(str(exc))
    told = [r.message for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("vendor" in said for said in [*refused, *told]), (
        "a policy with a concurrency rule was served without a word"
    )
