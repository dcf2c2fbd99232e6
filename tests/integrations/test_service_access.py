"""The service's JSON access log (``--access-log json``): a line per request, context values
digested with a key, never written as they came."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from freqguard import AsyncGuard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.service import create_app
from freqguard.service.access import LOGGER, AccessLog, digested
from tests.conftest import examples, flush
from tests.integrations.service_process import refused, serving, sms_config
from tests.servers import RedisServer

SMS = Policy("sms", Rule("1/minute", by="recipient", name="rcpt-1m"))
KEY = b"k" * 16


def _send(requests: list[tuple[str, str, Any]], key: bytes = KEY) -> None:
    app = AccessLog(create_app(AsyncGuard(MemoryBackend(), [SMS], clock=ManualClock(1e9))), key)

    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            for method, path, body in requests:
                await http.request(method, path, json=body)

    asyncio.run(run())


def _lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == LOGGER]


def test_a_line_per_request_with_the_recipient_digested(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    hit = ("POST", "/v1/policies/sms/hit", {"context": {"recipient": "+4917612345678"}})
    many = {"contexts": [{"recipient": "+4917612345678"}, {"recipient": "+1555"}]}
    _send([hit, hit, ("POST", "/v1/policies/sms/hit-many", many), ("GET", "/nowhere", None)])
    first, second, batch, lost = _lines(caplog)
    assert "+4917612345678" not in caplog.text
    assert "4917612345678" not in caplog.text
    assert first["context"] == second["context"] == digested({"recipient": "+4917612345678"}, KEY)
    assert len(first["context"]["recipient"]) == 16
    assert (first["allowed"], second["allowed"]) == (True, False)
    assert (first["status"], first["method"], first["path"]) == (
        200,
        "POST",
        "/v1/policies/sms/hit",
    )
    assert first["policy"] == "sms"
    assert first["bytes"] > 0
    assert first["ms"] >= 0
    assert batch["contexts"] == 2
    assert "context" not in batch
    assert (lost["status"], lost["path"]) == (404, "/nowhere")


def test_a_refused_call_s_line_names_its_policy_and_field_and_a_denial_its_rules(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An operator's first hour: a 422's line held neither the policy nor the field at
    fault, and a denial's no word of which rule denied; the log is where an operator
    reads a client's mistakes and a limit's bite."""
    caplog.set_level(logging.INFO, LOGGER)
    hit = ("POST", "/v1/policies/sms/hit", {"context": {"recipient": "+4917612345678"}})
    bad = ("POST", "/v1/policies/sms/hit", {"context": {"recipient": "r"}, "cost": -1})
    _send([hit, hit, bad])
    _, denied, refused_line = _lines(caplog)
    assert denied["denied_by"] == ["rcpt-1m"]
    assert (refused_line["status"], refused_line["policy"]) == (422, "sms")
    assert refused_line["field"] == "cost"
    assert "context" not in refused_line  # never a value the call was refused for


def test_digests_depend_on_the_key() -> None:
    context = {"recipient": "+1555"}
    assert digested(context, b"one") != digested(context, b"two")
    with pytest.raises(ValueError, match="1 to 64 bytes, got 0"):
        AccessLog(None, b"")


@settings(max_examples=examples(30))
@given(value=st.one_of(st.text(min_size=4), st.integers(min_value=1000)))
def test_no_context_value_is_ever_written(value: str | int) -> None:
    """Whatever the value (valid or refused), the line holds its digest at most."""
    # the client's own address, the method and the path are in every line (Hypothesis draws
    # the literals it finds in the code under test, these among them: CI drew "POST"): a
    # value equal to one proves nothing
    assume(str(value) not in {"127.0.0.1", "POST", "/v1/policies/sms/hit"})
    handler = _Collect()
    logging.getLogger(LOGGER).addHandler(handler)
    logging.getLogger(LOGGER).setLevel(logging.INFO)
    try:
        _send([("POST", "/v1/policies/sms/hit", {"context": {"recipient": value}})])
    finally:
        logging.getLogger(LOGGER).removeHandler(handler)
    [line] = [json.loads(text) for text in handler.lines]
    assert line["context"] == digested({"recipient": value}, KEY)
    leaves = [*line.values(), *line["context"].values()]
    assert value not in leaves
    assert str(value) not in leaves


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.slow  # a real freqguard serve with two workers
def test_serve_writes_json_lines_from_every_worker(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    flush([redis_server])
    config = sms_config(tmp_path, redis_server.port)
    key = {"FREQGUARD_SERVE_ACCESS_LOG_KEY": "operator-key"}
    with serving(config, "--workers", "2", "--access-log", "json", env=key) as service:
        for _ in range(6):  # each on a new connection: either worker may take it
            body = {"context": {"recipient": "+4917612345678", "content": "secret text"}}
            httpx.post(f"{service.url}/v1/policies/sms/hit", json=body, timeout=10)
    lines = [json.loads(line) for line in service.log().splitlines() if line.startswith("{")]
    hits = [line for line in lines if line["path"] == "/v1/policies/sms/hit"]
    assert len(hits) == 6
    assert [h["allowed"] for h in hits].count(True) == 3  # 3 a minute, across both workers
    expected = digested({"recipient": "+4917612345678", "content": "secret text"}, b"operator-key")
    assert all(h["context"] == expected for h in hits)
    assert "4917612345678" not in service.log()
    assert "secret text" not in service.log()


def test_serve_refuses_a_key_blake2b_cannot_take(tmp_path: Path) -> None:
    key = {"FREQGUARD_SERVE_ACCESS_LOG_KEY": "k" * 65}
    said = refused(tmp_path, "--access-log", "json", env=key)
    assert "FREQGUARD_SERVE_ACCESS_LOG_KEY is at most 64 bytes, got 65" in said
