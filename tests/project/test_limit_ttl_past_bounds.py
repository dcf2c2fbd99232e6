"""A per-key limit's ``ttl`` too large to count in microseconds (finite, past 1.8e302
seconds: ``ttl * 1e6`` is infinite) is refused as any ttl past the bound is, a
``ConfigError`` naming ``ttl``: by the guard, by the service (a 422 naming the field, not a
500) and by ``freqguard limit set --ttl`` (exit 2, not a traceback); nothing is written."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from freqguard import AsyncGuard, ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.service import create_app
from tests.project.cli_refusal_rig import _no_url as _no_url
from tests.project.cli_refusal_rig import cli as cli
from tests.project.cli_refusal_rig import redis_config as redis_config
from tests.servers import RedisServer

HUGE = (1e303, 1.7e308)
SMS = Policy("sms", Rule("3/minute", by="recipient", name="rcpt-1m"))


@pytest.mark.parametrize("ttl", HUGE)
def test_the_guard_refuses_it_naming_the_bound(ttl: float) -> None:
    store = MemoryBackend()
    guard = Guard(store, [SMS], clock=ManualClock(1_700_000_000))
    with pytest.raises(ConfigError, match="ttl must be at most 316224000 seconds"):
        guard.set_limit("sms", "rcpt-1m", "5/minute", ttl=ttl, recipient="+1")
    assert store.limits_held == 0


@pytest.mark.parametrize("ttl", HUGE)
def test_the_service_answers_a_422_naming_ttl(ttl: float) -> None:
    guard = AsyncGuard(MemoryBackend(), [SMS], clock=ManualClock(1_700_000_000))
    body = json.dumps({"context": {"recipient": "+1"}, "rate": "5/minute", "ttl": ttl})

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app(guard))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            headers = {"content-type": "application/json"}
            return await http.put("/v1/policies/sms/limits/rcpt-1m", content=body, headers=headers)

    answer = asyncio.run(run())
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == "ttl"


@pytest.mark.parametrize("ttl", ["1e303", "1.7e308"])
def test_limit_set_exits_2_naming_the_bound(
    cli: Any, redis_config: Path, redis_server: RedisServer, ttl: str
) -> None:
    before = redis_server.client.dbsize()
    done = cli(
        "limit", "set", str(redis_config), "sms", "rcpt-1m", "5/minute", "recipient=a", "--ttl", ttl
    )
    assert done.code == 2, done.err
    assert "Traceback" not in done.err
    assert "ttl must be at most 316224000 seconds" in done.err
    assert redis_server.client.dbsize() == before
