"""The decision service under hostile requests (hypothesis): any method on any route, any
body (random JSON of any shape and depth, huge numbers, NaN and Infinity, unknown fields,
names that collide with the API's, bytes that are not UTF-8, alone or inside a string), any
content type, Origin and
Authorization. The answer is a 200 or a 4xx problem+json (a 422 naming its field), never a
500 or a traceback, and a refused request changes nothing in the store. The OpenAPI
document held to the service's checks is in ``test_service_openapi_checks.py``; the
strategies they share are in ``hostile_rig.py``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from freqguard import AsyncGuard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.service import create_app
from tests.conftest import examples
from tests.integrations.hostile_rig import (
    CONTENTS,
    RECIPIENTS,
    USERS,
    _contexts,
    _json_values,
    _scalars,
)

SMS = Policy(
    "sms",
    Rule("3/minute", by="recipient", name="rcpt-1m"),
    Rule("2 per 59 seconds", by=("recipient", "content"), name="content-59s"),
)
DAILY = Policy("daily", Rule("2/day", by="user", calendar=True, tz_from="tz", name="day"))
TOKEN = "t0ken"
PROBLEM = "application/problem+json"


def _bodies() -> st.SearchStrategy[bytes]:
    optional = {
        "cost": st.one_of(st.integers(-2, 4), _scalars()),
        "rate": st.one_of(st.sampled_from(["5/minute", "1/day", None]), _scalars()),
        "ttl": st.one_of(
            st.sampled_from([60, 0.5, None, 1e20, 1e303]), _scalars()
        ),  # 1e303: µs overflow
    }
    one = st.fixed_dictionaries({"context": _contexts()}, optional=optional)
    many = st.fixed_dictionaries(
        {"contexts": st.one_of(st.lists(_contexts(), max_size=3), _json_values())},
        optional=optional,
    )
    as_json = st.one_of(one, one, many, _json_values()).map(lambda v: json.dumps(v).encode())
    deep = st.integers(1, 5000).map(lambda n: b'{"context": ' + b"[" * n + b"]" * n + b"}")
    # bytes that are not UTF-8 inside a string of a body that is JSON otherwise
    latin = st.binary(min_size=1, max_size=6).map(
        lambda junk: b'{"context": {"recipient": "' + junk.replace(b'"', b"") + b'x\xe9"}}'
    )
    return st.one_of(as_json, as_json, as_json, deep, latin, st.binary(max_size=40))


def _often(value: Any, *others: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``value`` about seven times in eight, else one of ``others``."""
    rare = st.one_of(*others)
    return st.sampled_from(range(8)).flatmap(lambda n: rare if n == 7 else st.just(value))


#: The service's calls, which most requests make (the rest: any method on any path).
CALLS = [
    ("POST", f"/v1/policies/{policy}/{action}")
    for policy in ("sms", "daily")
    for action in ("hit", "hit-many", "peek", "refund", "reset", "limits")
]
CALLS += [
    (method, f"/v1/policies/{policy}/limits/{rule}")
    for method in ("PUT", "DELETE")
    for policy, rule in (("sms", "rcpt-1m"), ("sms", "content-59s"), ("daily", "day"))
]
#: A query's value: names and numbers, valid or not, huge, nested-looking, percent-escapes
#: that decode to bytes that are not UTF-8, and names of the API's own parameters.
QUERY_VALUES = st.one_of(
    st.sampled_from(["sms", "daily", "nope", "1", "15", "16", "0", "-1", "1.5", "1e9", ""]),
    st.sampled_from(["%FF", "%C3", "%00", "a%ZZ", "[1]", "{}", "9" * 400, "policy", "minutes"]),
    # past int()'s 4,300 digits; digits int() reads that are not ASCII ones
    st.sampled_from(["9" * 5000, "%C2%B2", "%D9%A3", "%EF%BC%91"]),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.text(
        st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="&#"), max_size=12
    ),
)
#: The stats routes' queries: the known parameters, repeated, and ones nobody reads.
STATS_PATHS = st.builds(
    lambda route, pairs: route + "?" + "&".join(f"{k}={v}" for k, v in pairs),
    st.sampled_from(["/v1/stats/history", "/v1/stats/top", "/v1/stats"]),
    st.lists(
        st.tuples(st.sampled_from(["policy", "minutes", "nope", "cost", "policy"]), QUERY_VALUES),
        max_size=3,
    ),
)
ANY_PATH = st.one_of(
    STATS_PATHS,
    st.builds(
        "/v1/policies/{}/{}".format,
        st.sampled_from(["sms", "daily", "nope", "%00", "s%2Fms"]),
        st.sampled_from(["hit", "hit-many", "peek", "refund", "reset", "limits", "nope"]),
    ),
    st.builds(
        "/v1/policies/{}/limits/{}".format,
        st.sampled_from(["sms", "daily"]),
        st.sampled_from(["rcpt-1m", "day", "nope"]),
    ),
    st.sampled_from(["/", "/healthz", "/openapi.json", "/metrics", "/v1/policies", "/v1/stats"]),
    st.text(
        st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="?#"), max_size=12
    ).map(lambda text: "/" + text.lstrip("/")),  # "//host...": httpx reads a host there
)
ANY_CALL = st.tuples(
    st.sampled_from(["POST", "PUT", "DELETE", "GET", "HEAD", "PATCH", "OPTIONS"]), ANY_PATH
)
TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20)
HEADERS = st.fixed_dictionaries(
    {
        "content-type": _often(
            "application/json",
            st.sampled_from(["application/json; charset=utf-8", "text/plain", "", ";", None]),
            TEXT,
        ),
        "authorization": _often(
            f"Bearer {TOKEN}", st.sampled_from(["Bearer", "Bearer x", f"Basic {TOKEN}", None]), TEXT
        ),
        "origin": _often(
            None, st.sampled_from(["http://t", "https://evil.example", "null", "http://t:81", "x"])
        ),
        "sec-fetch-site": _often(
            None, st.sampled_from(["same-origin", "cross-site", "same-site", "none", "?"])
        ),
    }
).map(lambda headers: {name: value for name, value in headers.items() if value is not None})
CALL = st.sampled_from(range(4)).flatmap(lambda n: ANY_CALL if n == 3 else st.sampled_from(CALLS))
REQUESTS = st.lists(
    st.builds(lambda call, body, headers: (*call, body, headers), CALL, _bodies(), HEADERS),
    min_size=1,
    max_size=4,
)


async def _state(guard: AsyncGuard) -> list[Any]:
    """All the store could hold for the few values a request may name."""
    seen: list[Any] = []
    for recipient in RECIPIENTS:
        for content in CONTENTS:
            decision = await guard.peek("sms", recipient=recipient, content=content)
            seen.append([(r.rule.id, r.remaining, r.reset_after) for r in decision.rules])
        seen.append(await guard.limits_for("sms", recipient=recipient))
    for user in USERS:
        for zone in ("UTC", "Europe/Berlin"):
            decision = await guard.peek("daily", user=user, tz=zone)
            seen.append([(r.rule.id, r.remaining) for r in decision.rules])
        seen.append(await guard.limits_for("daily", user=user))
    return seen


def _check(method: str, answer: httpx.Response) -> None:
    status = answer.status_code
    field = answer.json().get("field", "") if status == 422 and method != "HEAD" else ""
    event(f"{status} {field}".strip())  # a HEAD answer has no body to read
    assert status == 200 or 400 <= status < 500, (status, answer.text)
    assert "Traceback" not in answer.text
    if status == 200 or method == "HEAD":
        return
    assert answer.headers["content-type"] == PROBLEM, answer.headers
    problem = answer.json()
    assert problem["status"] == status
    assert problem["title"]
    assert problem["detail"]
    if status == 422:
        assert problem["field"], problem
    assert len(answer.text) < 4000  # no echo of a huge body


@settings(max_examples=examples(50))
@given(requests=REQUESTS)
def test_hostile_requests_get_a_problem_and_change_nothing(
    requests: list[tuple[str, str, bytes, dict[str, str]]],
) -> None:
    guard = AsyncGuard(MemoryBackend(), [SMS, DAILY], clock=ManualClock(1_700_000_000))
    app = create_app(guard, [TOKEN])

    async def run() -> None:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            for method, path, body, headers in requests:
                before = await _state(guard)
                answer = await http.request(method, path, content=body, headers=headers)
                _check(method, answer)
                if answer.status_code != 200:
                    assert await _state(guard) == before, (method, path, body, answer.text)

    asyncio.run(run())


def test_the_stats_queries_that_once_answered_500_are_422() -> None:
    """``minutes`` past int()'s digit limit, or a digit int() cannot read (a superscript),
    was an uncaught ValueError: a 500."""
    app = create_app(AsyncGuard(MemoryBackend(), [SMS], clock=ManualClock(1_700_000_000)))

    async def run() -> list[int]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            paths = ["9" * 5000, "%C2%B2", "%D9%A3"]
            return [(await http.get(f"/v1/stats/top?minutes={m}")).status_code for m in paths]

    assert asyncio.run(run()) == [422, 422, 422]


def test_a_content_length_past_int_s_digits_is_a_413_not_a_500() -> None:
    app = create_app(AsyncGuard(MemoryBackend(), [SMS], clock=ManualClock(1_700_000_000)))
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    for length in (b"9" * 5000, "\u00b2".encode("latin-1")):
        sent.clear()
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/policies/sms/hit",
            "root_path": "",
            "query_string": b"",
            "scheme": "http",
            "server": ("t", 80),
            "http_version": "1.1",
            "headers": [
                (b"host", b"t"),
                (b"content-type", b"application/json"),
                (b"content-length", length),
            ],
        }
        asyncio.run(app(scope, receive, send))
        assert sent[0]["status"] in (413, 422), sent[0]


@pytest.mark.parametrize("bad", [b"caf\xe9", b"\xff", b"\xed\xa0\x80"])
@pytest.mark.parametrize("call", ["hit", "hit-many"])
def test_bytes_that_are_not_utf8_inside_a_string_are_a_422_naming_the_body(
    bad: bytes, call: str
) -> None:
    """A Latin-1 "café" (or a lone byte, or an encoded surrogate) inside a JSON string was
    a UnicodeDecodeError: a 500 a client retries (found by an operator's first hour)."""
    app = create_app(AsyncGuard(MemoryBackend(), [SMS], clock=ManualClock(1_700_000_000)))
    context = b'{"recipient": "+1", "content": "' + bad + b'"}'
    body = (
        b'{"context": ' + context + b"}" if call == "hit" else b'{"contexts": [' + context + b"]}"
    )

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return await http.post(
                f"/v1/policies/sms/{call}",
                content=body,
                headers={"content-type": "application/json"},
            )

    answer = asyncio.run(run())
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == "body"
    assert "UTF-8" in answer.json()["detail"]


def test_bytes_not_utf8_in_a_body_of_the_wrong_shape_are_a_422() -> None:
    """A batch call given a single call's body, its text not UTF-8: the typed decoder
    refused the shape first, and reading the body again to name the field met the bytes,
    a 500 (found by the property test above once it drew such bytes inside strings)."""
    app = create_app(AsyncGuard(MemoryBackend(), [SMS], clock=ManualClock(1_700_000_000)))

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return await http.post(
                "/v1/policies/sms/hit-many",
                content=b'{"context": {"recipient": " x\xe9"}}',
                headers={"content-type": "application/json"},
            )

    assert asyncio.run(run()).status_code == 422
