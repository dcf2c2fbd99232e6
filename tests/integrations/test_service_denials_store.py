"""``POST /v1/policies/{policy}/denials`` when the store fails or refuses the history's read:
the service's other reads of the history (``/v1/stats/history``, ``/v1/stats/top``) answer
a 503 that says the store did not answer (``app._store_answers``), and a call whose store
refuses or fails is a 503 (docs/service.md, the document's 503 of every call); this call
reads the same history outside ``_store_answers``, and the redis-py error it meets is
answered as the service's own failure: a 500, "the service failed unexpectedly", with a
traceback in the log. Written failing by the final review (in process, httpx on the app).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from freqguard import AsyncGuard, Policy, Rule, async_backend_from_url
from freqguard.service import create_app
from tests.conftest import flush
from tests.servers import RedisServer, free_port

POLICY = Policy("one", Rule("2/minute", by="u", name="per-u"))
USER, PASSWORD = "fg_only_a", "pw-only-a"


@pytest.fixture(params=["refused", "down"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A store whose ACL allows the URL's user only keys of partitions that begin with
    "a" (the history's keys, ``fg:{*one}:...``, refused: NOPERM); or no store at all."""
    if request.param == "down":
        yield f"redis://127.0.0.1:{free_port()}/0"
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    flush([server])
    server.client.acl_setuser(
        USER, enabled=True, passwords=[f"+{PASSWORD}"], keys=["fg:{a*"], commands=["+@all"]
    )
    try:
        yield f"redis://{USER}:{PASSWORD}@127.0.0.1:{server.port}/0"
    finally:
        server.client.acl_deluser(USER)


def _ask(url: str) -> dict[str, httpx.Response]:
    async def run() -> dict[str, httpx.Response]:
        guard = AsyncGuard(async_backend_from_url(url), [POLICY])
        transport = httpx.ASGITransport(app=create_app(guard))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                body = {"context": {"u": "alice"}}
                return {
                    "top": await http.get("/v1/stats/top"),
                    "denials": await http.post("/v1/policies/one/denials", json=body),
                }
        finally:
            await guard.aclose()

    return asyncio.run(run())


def test_a_denials_call_the_store_fails_is_a_503_as_the_other_reads_of_the_history(
    url: str,
) -> None:
    answers = _ask(url)
    assert answers["top"].status_code == 503  # the same history, read through _store_answers
    denials = answers["denials"]
    assert denials.status_code == 503, denials.json()  # got: 500, the service's own failure
    assert "failed unexpectedly" not in denials.json()["detail"]
