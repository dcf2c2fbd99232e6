"""The decision service: its API in process (httpx on the ASGI app), then as a real
``freqguard serve`` with two uvicorn workers on a shared Redis, called over loopback HTTP
and stopped by its PID."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from freqguard import AsyncGuard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.service import MAX_BODY, create_app
from tests.conftest import flush
from tests.integrations.service_process import serving, sms_config
from tests.servers import RedisServer

SCRIPT = Path(sys.executable).parent / "freqguard"
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


def _hit(context: dict[str, Any], **extra: Any) -> tuple[str, str, Any, dict[str, str]]:
    return ("POST", "/v1/policies/sms/hit", {"context": context, **extra}, {})


def test_a_hit_is_allowed_then_denied_with_the_rule_that_said_no() -> None:
    ctx = {"recipient": "+1555", "content": "hi"}
    first, second = _call([_hit(ctx), _hit(ctx)])
    assert first.status_code == 200
    assert first.json()["allowed"] is True
    assert first.json()["remaining"] == 0
    assert second.status_code == 200  # a denial is an answer, not an error
    body = second.json()
    assert body["allowed"] is False
    assert body["denied_by"] == ["content-59s"]
    assert body["retry_after"] == 59.0
    assert [r["rule"] for r in body["rules"]] == ["rcpt-1m", "content-59s"]


def test_a_refund_of_a_policy_with_leases_is_a_422_pointing_to_release() -> None:
    """A refund by context would give back another caller's lease: refused, nothing given
    back (issue: a third lease was admitted under "2 concurrent")."""
    llm = Policy("llm", Rule("2 concurrent", by="user", lease=60))
    guard = AsyncGuard(MemoryBackend(), [llm], clock=ManualClock(1_700_000_000))

    async def run() -> tuple[httpx.Response, int]:
        transport = httpx.ASGITransport(app=create_app(guard))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            for _ in range(2):
                assert (await guard.take_lease("llm", user="u")).allowed
            body = {"context": {"user": "u"}}
            answer = await http.post("/v1/policies/llm/refund", json=body)
            return answer, (await guard.peek("llm", user="u")).remaining

    answer, remaining = asyncio.run(run())
    assert answer.status_code == 422
    assert "guard.release(decision)" in answer.json()["detail"]
    assert remaining == 0  # both leases still held


def test_a_batch_peek_refund_reset_and_limits() -> None:
    ctx = {"recipient": "+1555", "content": "hi"}
    batch = {"contexts": [ctx, ctx, {"recipient": "+1555", "content": "yo"}]}
    responses = _call(
        [
            ("POST", "/v1/policies/sms/hit-many", batch, {}),
            ("POST", "/v1/policies/sms/peek", {"context": ctx}, {}),
            ("POST", "/v1/policies/sms/refund", {"context": ctx, "cost": 1}, {}),
            ("POST", "/v1/policies/sms/reset", {"context": ctx}, {}),
            ("POST", "/v1/policies/sms/peek", {"context": ctx}, {}),
            (
                "PUT",
                "/v1/policies/sms/limits/rcpt-1m",
                {"context": {"recipient": "+1555"}, "rate": "5/minute", "ttl": 60},
                {},
            ),
            (
                "PUT",
                "/v1/policies/sms/limits/content-59s",
                {"context": {"recipient": "+1555"}, "rate": None},
                {},
            ),
            ("DELETE", "/v1/policies/sms/limits/rcpt-1m", {"context": {"recipient": "+1555"}}, {}),
            ("POST", "/v1/policies/sms/limits", {"context": {"recipient": "+1555"}}, {}),
        ]
    )
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    decisions = responses[0].json()["decisions"]
    assert [d["allowed"] for d in decisions] == [True, False, True]
    assert responses[1].json()["allowed"] is False
    assert responses[3].json() == {"reset": True, "rules": ["content-59s"]}
    assert responses[4].json()["remaining"] == 1
    assert responses[5].json()["limits"]["rcpt-1m"] == "5/minute"
    assert responses[6].json()["limits"]["content-59s"] is None  # exempt
    assert responses[8].json()["limits"] == {"rcpt-1m": "2/minute", "content-59s": None}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", "body"),
        ([1, 2], "body"),
        ({"context": "x"}, "context"),
        ({"context": {"recipient": 1.5, "content": "x"}}, "context.recipient"),
        ({"context": {"recipient": True, "content": "x"}}, "context.recipient"),
        ({"context": {"recipient": "a", "content": "x"}, "cost": -1}, "cost"),
        ({"context": {"recipient": "a"}}, "context.content"),  # a missing dimension
        ({"context": {"recipient": "a", "content": "x", "plan": "pro"}}, "context.plan"),
    ],
)
def test_a_bad_body_is_a_422_naming_the_field(body: Any, field: str) -> None:
    (response,) = _call([("POST", "/v1/policies/sms/hit", body, {})])
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["field"] == field


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ([1, 2], "body: an object, got an array"),
        ({"context": {"recipient": True, "content": "x"}}, "a string or an integer, got true"),
        ({"context": {"recipient": None, "content": "x"}}, "a string or an integer, got null"),
        (
            {"context": {"recipient": "a", "content": "x"}, "cost": True},
            "cost: an integer, got a boolean",
        ),
        (
            {"context": {"recipient": "a", "content": "x"}, "cost": "2"},
            "cost: an integer, got a string",
        ),
        (
            {"context": {"recipient": "a", "content": "x"}, "cost": None},
            "cost: an integer, got null",
        ),
        ({"context": {"recipient": "a", "content": "x"}, "cost": -1}, "cost: an integer >= 0"),
        ({"context": {"recipient": "a", "content": "x"}, "cost": 1.0}, "cost: an integer, got 1.0"),
        (
            b'{"context": {"recipient": "a", "content": "x"}, "cost": 1e400}',
            "cost: got a number out of range",
        ),
    ],
)
def test_a_422_speaks_json_not_python(body: Any, detail: str) -> None:
    # a client wrote true and null, numbers and strings: "got True", "Expected `int`" are
    # Python's words (and msgspec's) for what it sent
    (response,) = _call([("POST", "/v1/policies/sms/hit", body, {})])
    assert response.status_code == 422
    assert detail in response.json()["detail"]


@pytest.mark.parametrize(
    ("raw", "field", "detail"),
    [
        (
            b'{"context": {"recipient": 1e400, "content": "x"}}',
            "context.recipient",
            "got a number out of range",
        ),
        (
            b'{"contexts": [{"recipient": "a", "content": -1e999}]}',
            "contexts[0].content",
            "got a number out of range",
        ),
        (
            b'{"context": {"recipient": "a", "content": "x"}, "cost": 2.5}',
            "cost",
            "an integer, got 2.5",
        ),
    ],
)
def test_a_number_json_cannot_hold_is_named_by_its_field(
    raw: bytes, field: str, detail: str
) -> None:
    # msgspec said "Number out of range" at the context, not the name holding it
    path = "/v1/policies/sms/hit-many" if b"contexts" in raw else "/v1/policies/sms/hit"
    (response,) = _call([("POST", path, raw, {})])
    assert response.status_code == 422
    assert response.json()["field"] == field
    assert detail in response.json()["detail"]


LONG = "cost" + "t" * 100_000  # a field name of 100 kB


@pytest.mark.parametrize(
    ("raw", "field", "detail"),
    [
        (
            b'{"context": {"recipient": "a", "content": "x"}, "costt": 1}',
            "costt",
            "costt: not a field of this call (did you mean cost? it takes: context, cost)",
        ),
        (
            b'{"contexts": [{"recipient": "a", "content": "x"}], "priority": 1}',
            "priority",
            "priority: not a field of this call (it takes: contexts, cost)",
        ),
        (  # a long name: matched by its first 64 characters, shown cut
            b'{"context": {"recipient": "a", "content": "x"}, "' + LONG.encode() + b'": 1}',
            f"[{json.dumps(LONG[:64])}]",
            f"[{json.dumps(LONG[:64])}]: not a field of this call (it takes: context, cost)",
        ),
    ],
)
def test_a_field_the_call_does_not_take_names_the_fields_it_does(
    raw: bytes, field: str, detail: str
) -> None:
    """A misspelt field ("costt") was "not a field of this call", with no word of the ones
    there are (a new user's run)."""
    path = "/v1/policies/sms/hit-many" if b"contexts" in raw else "/v1/policies/sms/hit"
    (response,) = _call([("POST", path, raw, {})])
    assert (response.status_code, response.json()["field"]) == (422, field)
    assert response.json()["detail"] == detail


@pytest.mark.parametrize(
    ("raw", "detail"),
    [  # msgspec refuses the first; Python's reader keeps the last (or refuses NaN)
        (b'{"cost": 1.5, "cost": 1, "context": {}}', "cost: an integer, got a number"),
        (b'{"cost": 1.5, "cost": NaN, "context": {}}', "cost: an integer, got a number"),
    ],
)
def test_a_field_given_twice_is_refused_by_the_value_msgspec_refused(
    raw: bytes, detail: str
) -> None:
    (response,) = _call([("POST", "/v1/policies/sms/hit", raw, {})])
    assert response.status_code == 422
    assert response.json()["detail"] == detail


def test_a_body_that_opens_more_than_it_closes_is_a_422_not_a_500() -> None:
    # msgspec refused cost first; the reader that names the field went down every bracket
    raw = b'{"cost": 1.5, "context": {"recipient": "a"}, "x": ' + b"[" * 5000 + b"]"
    (response,) = _call([("POST", "/v1/policies/sms/hit", raw, {})])
    assert response.status_code == 422
    assert response.json()["field"] == "body"


def test_unknown_names_oversize_bodies_and_batches() -> None:
    ctx = {"recipient": "a", "content": "x"}
    responses = _call(
        [
            ("POST", "/v1/policies/nope/hit", {"context": ctx}, {}),
            (
                "PUT",
                "/v1/policies/sms/limits/nope",
                {"context": {"recipient": "a"}, "rate": "1/minute"},
                {},
            ),
            ("POST", "/v1/policies/sms/hit", b"{" + b" " * MAX_BODY + b"}", {}),
            ("POST", "/v1/policies/sms/hit-many", {"contexts": [ctx] * 1001}, {}),
            ("POST", "/v1/policies/sms/hit-many", {"contexts": []}, {}),
        ]
    )
    assert [r.status_code for r in responses] == [404, 404, 413, 422, 422]
    assert "no policy 'nope'" in responses[0].json()["detail"]


def test_tokens_guard_every_call_but_health_and_the_document() -> None:
    ctx = {"recipient": "a", "content": "x"}
    hit = ("POST", "/v1/policies/sms/hit", {"context": ctx})
    responses = _call(
        [
            (*hit, {}),
            (*hit, {"authorization": "Bearer wrong"}),
            (*hit, {"authorization": "Basic s3cret"}),
            (*hit, {"authorization": "Bearer s3cret"}),
            ("GET", "/healthz", b"", {}),
            ("GET", "/openapi.json", b"", {}),
        ],
        tokens=("s3cret", "other"),
    )
    assert [r.status_code for r in responses] == [401, 401, 401, 200, 200, 200]
    assert responses[0].headers["www-authenticate"] == "Bearer"
    assert "s3cret" not in responses[1].text
    document = responses[5].json()
    assert document["openapi"] == "3.1.0"
    assert "/v1/policies/{policy}/hit-many" in document["paths"]


# -- a real service -------------------------------------------------------------------------


@pytest.fixture
def service(tmp_path: Path, redis_server: RedisServer) -> Iterator[str]:
    """``freqguard serve`` with two workers on a shared Redis, stopped by its PID."""
    flush([redis_server])
    tokens = tmp_path / "tokens"
    tokens.write_text("t0ken\n")
    config = sms_config(tmp_path, redis_server.port)
    with serving(config, "--workers", "2", "--token-file", str(tokens)) as served:
        yield served.url


@pytest.mark.slow  # a real freqguard serve with workers
def test_a_served_policy_counts_across_workers(service: str) -> None:
    auth = {"authorization": "Bearer t0ken"}
    with httpx.Client(base_url=service, headers=auth, timeout=10) as http:
        one = {"context": {"recipient": "a", "content": "x"}}
        hit = f"{service}/v1/policies/sms/hit"
        # each on a new connection, which either worker may accept: the count is the store's
        answers = [httpx.post(hit, json=one, headers=auth).json()["allowed"] for _ in range(5)]
        assert answers == [True, True, True, False, False]
        batch = http.post(
            "/v1/policies/sms/hit-many", json={"contexts": [{"recipient": "b", "content": "x"}] * 4}
        )
        assert [d["allowed"] for d in batch.json()["decisions"]] == [True, True, True, False]
        assert http.get("/openapi.json").status_code == 200
    # every worker's counts in every scrape, whichever worker answers it (each scrape on a
    # new connection): one worker's alone flipped between scrapes (an operator's first hour)
    scrapes = [_decided(httpx.get(f"{service}/metrics").text) for _ in range(8)]
    assert scrapes == [{"allowed": 6.0, "denied": 3.0}] * 8
    stats = [httpx.get(f"{service}/v1/stats").json()["rows"][0] for _ in range(4)]
    assert {(row["allowed"], row["denied"]) for row in stats} == {(6, 3)}
    assert (
        httpx.post(
            f"{service}/v1/policies/sms/hit", json={"context": {"recipient": "a"}}
        ).status_code
        == 401
    )


def _decided(metrics: str) -> dict[str, float]:
    """``freqguard_decisions_total`` summed by outcome, from a scrape's text."""
    found: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith("freqguard_decisions_total{"):
            outcome = line.split('outcome="')[1].split('"')[0]
            found[outcome] = found.get(outcome, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples" / "service"


def _four_times(command: list[str], service: str) -> list[subprocess.CompletedProcess[str]]:
    """An example client run four times against the service, as one recipient."""
    env = {**os.environ, "FREQGUARD_SERVICE": service, "FREQGUARD_TOKEN": "t0ken"}
    return [
        subprocess.run(command, capture_output=True, text=True, env=env, timeout=30, check=False)
        for _ in range(4)
    ]


@pytest.mark.slow  # a real freqguard serve with workers
@pytest.mark.skipif(shutil.which("curl") is None, reason="no curl on this machine")
def test_the_curl_example_speaks_the_contract(service: str) -> None:
    runs = _four_times(["sh", str(EXAMPLES / "hit.sh"), "sms", "c", "hi"], service)
    assert [run.returncode for run in runs] == [0, 0, 0, 1]
    assert json.loads(runs[3].stdout)["denied_by"] == ["rcpt-1m"]


@pytest.mark.slow  # a real freqguard serve with workers
@pytest.mark.skipif(shutil.which("node") is None, reason="no node on this machine")
def test_the_javascript_example_speaks_the_contract(service: str) -> None:
    runs = _four_times(["node", str(EXAMPLES / "client.mjs"), "sms", "d", "hi"], service)
    assert [run.returncode for run in runs] == [0, 0, 0, 1], runs[-1].stderr
    assert runs[0].stdout.strip() == "send: 2 left"
    assert runs[3].stdout.startswith("blocked by rcpt-1m; retry in ")


def test_a_reset_names_what_it_forgot_and_refuses_what_it_cannot_mean() -> None:
    """Only the states keyed by exactly the context's dimensions, or the rules named; a
    context no rule is keyed by exactly is a 422 on ``context``, a rule on ``rules``."""
    ctx = {"recipient": "+1555", "content": "hi"}
    answers = _call(
        [
            ("POST", "/v1/policies/sms/hit", {"context": ctx}, {}),
            ("POST", "/v1/policies/sms/reset", {"context": {"recipient": "+1555"}}, {}),
            ("POST", "/v1/policies/sms/reset", {"context": {"content": "hi"}}, {}),
            (
                "POST",
                "/v1/policies/sms/reset",
                {"context": {"recipient": "+1555"}, "rules": ["content-59s"]},
                {},
            ),
            ("POST", "/v1/policies/sms/reset", {"context": ctx, "rules": ["nope"]}, {}),
            ("POST", "/v1/policies/sms/peek", {"context": ctx}, {}),
        ],
    )
    assert answers[1].json() == {"reset": True, "rules": ["rcpt-1m"]}
    assert (answers[2].status_code, answers[2].json()["field"]) == (422, "context")
    assert (answers[3].status_code, answers[3].json()["field"]) == (422, "rules")
    assert (answers[4].status_code, answers[4].json()["field"]) == (422, "rules[0]")
    assert [r["remaining"] for r in answers[5].json()["rules"]] == [2, 0]
