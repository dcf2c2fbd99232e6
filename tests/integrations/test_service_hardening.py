"""The decision service against an attacker's review: cross-site writes, the token file's
format, what a 503 tells, and every error as problem+json naming its field (never a bare
500). In process: httpx on the ASGI app, a guard on a MemoryBackend and a ManualClock."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    ConfigError,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
    async_backend_from_url,
)
from freqguard import service as svc
from freqguard.observe.base import RepeatFilter
from freqguard.script.calls import Reply, ScriptCall
from freqguard.service import create_app, served_names
from freqguard.service.problems import store_failed
from tests.servers import free_port

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


# -- 1. cross-site writes -------------------------------------------------------------------


def test_a_text_plain_reset_from_another_page_does_not_reset_the_counts() -> None:
    """A form or a no-cors fetch can send text/plain anywhere: it must not reset counts."""
    hit = _json("POST", "/v1/policies/daily/hit", {"context": {"user": "u", "tz": "UTC"}})
    body = {"context": {"user": "u", "tz": "UTC"}}
    plain = ("POST", "/v1/policies/daily/reset", body, {"content-type": "text/plain"})
    answers = _send(_app(), [hit, hit, plain, hit])
    assert [a.status_code for a in answers] == [200, 200, 415, 200]
    body = _problem(answers[2], 415)
    assert "text/plain" in body["detail"]
    assert "application/json" in body["detail"]
    assert answers[3].json()["allowed"] is False  # still two of two: nothing was reset


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
def test_every_write_takes_json_only(
    method: str, path: str, body: dict[str, Any], content_type: str | None
) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    refused, after = _send(_app(), [(method, path, body, headers), _peek()])
    problem = _problem(refused, 415)
    assert (content_type or "none").split(";")[0] in problem["detail"]
    assert after.json()["remaining"] == 1  # nothing was counted


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_every_write_takes_json_with_a_charset(
    method: str, path: str, body: dict[str, Any]
) -> None:
    (answer,) = _send(
        _app(), [(method, path, body, {"content-type": "Application/JSON; charset=utf-8"})]
    )
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "https://evil.example"},
        {"origin": "null"},
        {"origin": "http://t.evil.example"},
        {"origin": "http://t:8080"},
        {"origin": "not a url"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
        {"origin": "http://t", "sec-fetch-site": "cross-site"},
    ],
)
def test_a_write_from_another_origin_is_refused(
    method: str, path: str, body: dict[str, Any], headers: dict[str, str]
) -> None:
    refused, after = _send(_app(), [_json(method, path, body, **headers), _peek()])
    _problem(refused, 403)
    assert after.json()["remaining"] == 1


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://t"},
        {"origin": "HTTP://T:80"},
        {"sec-fetch-site": "same-origin"},
        {"sec-fetch-site": "none"},
        {"origin": "http://t", "sec-fetch-site": "same-origin"},
    ],
)
def test_a_write_from_the_service_s_own_page_is_taken(headers: dict[str, str]) -> None:
    (answer,) = _send(_app(), [_json("POST", "/v1/policies/sms/hit", {"context": CTX}, **headers)])
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    ("host", "tokens", "loud"),
    [
        ("127.0.0.1", (), False),
        ("localhost", (), False),
        ("::1", (), False),
        ("127.0.0.2", (), False),
        ("0.0.0.0", (), True),
        ("::", (), True),
        ("192.168.1.7", (), True),
        ("svc.example.com", (), True),
        ("0.0.0.0", ("t0ken",), False),
    ],
)
def test_serving_beyond_loopback_without_tokens_warns(
    host: str, tokens: tuple[str, ...], loud: bool
) -> None:
    warnings = svc.startup_warnings(host, tokens)
    assert bool(warnings) == loud
    if loud:
        assert host in warnings[0]
        assert "token" in warnings[0]


# -- 2. the token file ----------------------------------------------------------------------


def test_a_token_file_is_one_token_a_line() -> None:
    assert svc.parse_tokens("  first \n\n\tsecond\n\n", "tokens") == ["first", "second"]


@pytest.mark.parametrize(
    ("text", "line"),
    [("k,9fQ2secret\n", 1), ("ok\nk 9fQ2secret\n", 2), ("ok\n\nk\t9fQ2secret", 3)],
)
def test_a_token_line_with_a_comma_or_inner_space_is_an_error(text: str, line: int) -> None:
    with pytest.raises(ConfigError, match=rf"tokens, line {line}:") as caught:
        svc.parse_tokens(text, "tokens")
    assert "9fQ2" not in str(caught.value)


def test_the_environment_s_tokens_and_file_follow_the_same_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "tokens"
    file.write_text("k,9fQ2secret\n")
    monkeypatch.delenv("FREQGUARD_TOKENS", raising=False)
    monkeypatch.setenv("FREQGUARD_TOKENS_FILE", str(file))
    with pytest.raises(ConfigError, match="line 1") as caught:
        svc.tokens_from_env()
    assert "9fQ2" not in str(caught.value)
    assert str(file) in str(caught.value)
    file.write_text("one\n two \n")
    monkeypatch.setenv("FREQGUARD_TOKENS", "three\nfour")
    assert sorted(svc.tokens_from_env()) == ["four", "one", "three", "two"]
    monkeypatch.setenv("FREQGUARD_TOKENS", "a,b")
    with pytest.raises(ConfigError, match="FREQGUARD_TOKENS, line 1"):
        svc.tokens_from_env()


@pytest.mark.parametrize("text", ["", "\n\n", "   \n"])
def test_a_token_file_that_holds_no_token_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """An empty token file (a secret that was not mounted) turned authentication off without
    a word (found by an operator's first hour): it is refused, naming the file; a file
    given means tokens were meant."""
    file = tmp_path / "tokens"
    file.write_text(text)
    monkeypatch.delenv("FREQGUARD_TOKENS", raising=False)
    monkeypatch.setenv("FREQGUARD_TOKENS_FILE", str(file))
    with pytest.raises(ConfigError, match="holds no token") as caught:
        svc.tokens_from_env()
    assert str(file) in str(caught.value)


def test_create_app_refuses_a_token_that_could_never_be_sent() -> None:
    guard = AsyncGuard(MemoryBackend(), [SMS])
    with pytest.raises(ConfigError, match="token 2") as caught:
        create_app(guard, ["good", "k,9fQ2secret"])
    assert "9fQ2" not in str(caught.value)


# -- 3. what a 503 tells --------------------------------------------------------------------


@pytest.mark.parametrize("url", ["redis://127.0.0.1:{port}", "redis+sentinel://127.0.0.1:{port}/m"])
def test_a_503_says_what_failed_without_hosts_ports_or_reprs(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()  # nothing listens there
    backend = async_backend_from_url(url.format(port=port))
    with caplog.at_level(logging.WARNING, logger="freqguard.service"):
        (answer,) = _send(
            _app(backend=backend), [_json("POST", "/v1/policies/sms/hit", {"context": CTX})]
        )
    body = _problem(answer, 503)
    if url.startswith("redis://"):  # a refused connection: surely not sent
        assert body["detail"] == "the store could not be reached; nothing was applied"
    assert body["detail"].startswith("the store ")
    for secret in (str(port), "127.0.0.1", "Redis", "Sentinel", "<", "Error"):
        assert secret not in answer.text
    assert str(port) in caplog.text  # the details are the operator's, in the log
    assert len(answer.text) < 400


def test_an_outage_is_logged_once_a_while_not_once_a_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every failed request logged a warning: at production rates an outage flooded the
    log (found by an operator's first hour). A failure of one policy and kind is logged
    at once, then at most once a minute, saying how many went unlogged meanwhile."""
    full = MemoryBackend(max_keys=1, when_full="reject")
    with caplog.at_level(logging.WARNING, logger="freqguard.service"):
        answers = _send(
            _app(backend=full),
            [
                _json("POST", "/v1/policies/sms/hit", {"context": {**CTX, "recipient": str(n)}})
                for n in range(20)
            ],
        )
    assert [a.status_code for a in answers] == [503] * 20
    logged = [r for r in caplog.records if "the store refused the call" in r.getMessage()]
    assert len(logged) == 1
    repeats = RepeatFilter(60.0)  # a minute later: one line, and how many it left out
    failure = BackendUnavailable("down", answered=True, sent=False)
    with caplog.at_level(logging.WARNING, logger="freqguard.service"):
        for _ in range(5):
            store_failed(failure, "sms", repeats)
        repeats.quiet = 0.0
        store_failed(failure, "sms", repeats)
    assert caplog.records[-1].getMessage().endswith("(4 more since the last line)")


def test_a_store_that_refuses_the_call_says_so() -> None:
    full = MemoryBackend(max_keys=1, when_full="reject")
    answers = _send(
        _app(backend=full),
        [_json("POST", "/v1/policies/sms/hit", {"context": CTX})] * 2,
    )
    body = _problem(answers[1], 503)
    assert body["detail"] == "the store refused the call; nothing was applied"
    assert "max_keys" not in answers[1].text


# -- 4. raw errors --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cost", "policy", "rate", "ttl", "rule", "self", "plan"])
@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_a_context_name_the_policy_does_not_take_is_a_422_naming_it(
    name: str, method: str, path: str, body: dict[str, Any]
) -> None:
    sent = json.loads(json.dumps(body))
    context = sent["contexts"][0] if "contexts" in sent else sent["context"]
    context[name] = 3
    field = f"contexts[0].{name}" if "contexts" in sent else f"context.{name}"
    answer, after = _send(_app(), [_json(method, path, sent), _peek()])
    problem = _problem(answer, 422, field)
    assert "recipient" in problem["detail"]  # what is allowed
    assert after.json()["remaining"] == 1


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("hit", {"context": CTX, "costt": 5}, "costt"),
        ("hit", {"context": CTX, "cost": 3}, "cost"),  # more than any rule could ever admit
        ("hit", {"context": CTX, "cost": 1.0}, "cost"),
        ("hit", {"context": CTX, "cost": "1"}, "cost"),
        ("hit", {"context": {"recipient": "a"}}, "context.content"),
        ("hit", {"context": {**CTX, "content": None}}, "context.content"),
        ("hit", {"context": {**CTX, "content": [1]}}, "context.content"),
        ("hit", {}, "context"),
        ("peek", {"context": CTX, "cost": 1}, "cost"),  # peek takes no cost
        ("reset", {"context": CTX, "cost": 1}, "cost"),
        (
            "hit-many",
            {"contexts": [CTX, {"recipient": "a", "content": 1.5}]},
            "contexts[1].content",
        ),
        ("hit-many", {"contexts": [CTX, CTX, {"recipient": "a"}]}, "contexts[2].content"),
        ("hit-many", {"contexts": [CTX, "x"]}, "contexts[1]"),
        ("hit-many", {"contexts": CTX}, "contexts"),
        ("hit-many", {"context": CTX}, "context"),
    ],
)
def test_a_bad_field_is_a_422_naming_it_and_nothing_is_counted(
    path: str, body: dict[str, Any], field: str
) -> None:
    answer, after = _send(_app(), [_json("POST", f"/v1/policies/sms/{path}", body), _peek()])
    _problem(answer, 422, field)
    assert after.json()["remaining"] == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"context": {"recipient": "a"}, "rate": "often"}, "rate"),
        ({"context": {"recipient": "a"}, "rate": 5}, "rate"),
        ({"context": {"recipient": "a"}}, "rate"),  # null exempts; missing is a mistake
        ({"context": {"recipient": "a"}, "rate": "5/minute", "ttl": -1}, "ttl"),
        ({"context": {"recipient": "a"}, "rate": "5/minute", "ttl": "1h"}, "ttl"),
        ({"context": {"recipient": "a"}, "rate": "5/minute", "ttl": 1e300}, "ttl"),
        ({"context": {"recipient": "a"}, "rate": "5/minute", "ttl": True}, "ttl"),
        ({"context": {"recipient": "a", "content": "x"}, "rate": "5/minute"}, "context"),
        ({"context": {"recipient": "a"}, "rate": "5/minute", "tll": 5}, "tll"),
    ],
)
def test_a_bad_limit_names_its_field(body: dict[str, Any], field: str) -> None:
    answer, after = _send(
        _app(),
        [
            _json("PUT", "/v1/policies/sms/limits/rcpt-1m", body),
            _json("POST", "/v1/policies/sms/limits", {"context": {"recipient": "a"}}),
        ],
    )
    _problem(answer, 422, field)
    assert after.json()["limits"]["rcpt-1m"] == "2/minute"  # nothing was set


def test_a_rate_a_calendar_rule_cannot_take_is_the_rate_s_fault() -> None:
    (answer,) = _send(
        _app(),
        [
            _json(
                "PUT", "/v1/policies/daily/limits/day", {"context": {"user": "u"}, "rate": "5/hour"}
            )
        ],
    )
    _problem(answer, 422, "rate")


def test_deeply_nested_json_is_a_422() -> None:
    deep = b'{"context": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    answer, after = _send(_app(), [_json("POST", "/v1/policies/sms/hit", deep), _peek()])
    _problem(answer, 422, "body")
    assert after.json()["remaining"] == 1


@pytest.mark.parametrize(
    ("request_", "status"),
    [
        (("GET", "/nowhere", b"", {}), 404),
        (("GET", "/v1/policies/sms/hit", b"", {}), 405),
        (("PATCH", "/v1/policies/sms/limits/rcpt-1m", b"", {}), 405),
        (_json("POST", "/v1/policies/nope/hit", {"context": CTX}), 404),
        (_json("PUT", "/v1/policies/sms/limits/nope", {"context": {}, "rate": None}), 404),
    ],
)
def test_routing_errors_are_problems(request_: Request, status: int) -> None:
    (answer,) = _send(_app(), [request_])
    _problem(answer, status)


@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong", "Basic dDB rZW4=", "Bearer", "bearer  "]
)
def test_a_missing_or_wrong_token_is_a_problem(authorization: str | None) -> None:
    headers = {} if authorization is None else {"authorization": authorization}
    answer, after = _send(
        _app(tokens=("t0ken",)),
        [
            _json("POST", "/v1/policies/sms/hit", {"context": CTX}, **headers),
            _json("POST", "/v1/policies/sms/peek", {"context": CTX}, authorization="Bearer t0ken"),
        ],
    )
    _problem(answer, 401)
    assert answer.headers["www-authenticate"] == "Bearer"
    assert after.json()["remaining"] == 1


# -- 5. no exception reaches the client bare ------------------------------------------------


class Broken(MemoryBackend):
    """A store that fails in a way the service cannot foresee."""

    def execute(self, call: ScriptCall) -> Reply:
        raise IsADirectoryError(21, "Is a directory", "/srv/secret/zoneinfo/America")

    async def aexecute(self, call: ScriptCall) -> Reply:
        return self.execute(call)


def test_an_unforeseen_exception_is_a_generic_500_and_a_logged_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="freqguard.service"):
        (answer,) = _send(
            _app(backend=Broken()), [_json("POST", "/v1/policies/sms/hit", {"context": CTX})]
        )
    body = _problem(answer, 500)
    assert "secret" not in answer.text
    assert "Traceback" not in answer.text
    assert "Directory" not in answer.text
    assert body["detail"] == "the service failed unexpectedly; the details are in its log"
    assert any(r.exc_info and r.exc_info[0] is IsADirectoryError for r in caplog.records)


@pytest.mark.parametrize("zone", ["Nope/Nowhere", "America", "Etc", "", "../../etc/passwd"])
def test_a_zone_the_service_cannot_use_is_never_a_bare_error(zone: str) -> None:
    """A zone that names a directory raised IsADirectoryError (clock.py refuses it now):
    whatever the guard raises, the answer is problem+json and tells no path."""
    body = {"context": {"user": "u", "tz": zone}}
    answer, after = _send(
        _app(),
        [
            _json("POST", "/v1/policies/daily/hit", body),
            _json("POST", "/v1/policies/daily/peek", {"context": {"user": "u", "tz": "UTC"}}),
        ],
    )
    assert answer.headers["content-type"] == PROBLEM
    assert answer.status_code == 422
    assert answer.json()["field"] in ("context", "context.tz")
    assert "site-packages" not in answer.text
    assert "Errno" not in answer.text
    assert after.json()["remaining"] == 2


def test_a_dimension_named_like_a_parameter_of_the_guard_cannot_be_made() -> None:
    """``set_limit(policy, rule, rate, **context)`` could not take a context name ``rule``:
    Rule reserves such names, so no policy the service serves has one."""
    with pytest.raises(ConfigError, match="dimension 'rule' is not allowed"):
        Policy("odd", Rule("2/minute", by=("rule", "ttl"), name="r"))


def test_a_rebound_name_pointing_at_a_loopback_service_is_not_answered() -> None:
    """DNS rebinding: a page of evil.example points its own name at 127.0.0.1, so its
    requests carry Origin and Host alike (evil.example): the same-origin check passes them.
    A service bound to loopback answers only its loopback names (and --allow-host's)."""
    guard = AsyncGuard(MemoryBackend(), [SMS, DAILY], clock=ManualClock(1_700_000_000))
    app = create_app(guard, hosts=served_names("127.0.0.1"))
    rebound = {"host": "evil.example:8080", "origin": "http://evil.example:8080"}
    own = {"host": "127.0.0.1:8080", "origin": "http://127.0.0.1:8080"}
    body = {"context": CTX}
    answers = _send(
        app,
        [
            _json("POST", "/v1/policies/sms/hit", body, **rebound),
            ("GET", "/v1/policies", b"", rebound),  # reads too: the page, the policies
            _json("POST", "/v1/policies/sms/hit", body, **own),
            _json("POST", "/v1/policies/sms/hit", body, host="localhost:8080"),
            _json("POST", "/v1/policies/sms/peek", body, host="[::1]:8080"),
        ],
    )
    assert "evil.example" in _problem(answers[0], 421)["detail"]
    _problem(answers[1], 421)
    assert [a.status_code for a in answers[2:]] == [200, 200, 200]
    assert answers[2].json()["allowed"] is True  # the rebound hit counted nothing
    proxied = create_app(guard, hosts=served_names("127.0.0.1", ["limits.internal"]))
    (through,) = _send(
        proxied, [_json("POST", "/v1/policies/sms/peek", body, host="limits.internal")]
    )
    assert through.status_code == 200
    assert served_names("0.0.0.0") is None  # beyond loopback: any name (tokens guard it)
    with pytest.raises(ConfigError, match="--allow-host takes a host name"):
        served_names("127.0.0.1", ["evil/path"])


def test_the_host_check_judges_alike_however_often_and_however_many_names() -> None:
    """Its verdicts are kept per Host (64 at most, long ones never): the 70 names below
    overflow that, and each is judged the same the second time as the first."""
    guard = AsyncGuard(MemoryBackend(), [SMS, DAILY], clock=ManualClock(1_700_000_000))
    app = create_app(guard, hosts=served_names("127.0.0.1"))
    names = [f"evil{n}.example" for n in range(70)] + ["127.0.0.1:8080", "x" * 400]
    asked = [("GET", "/healthz", b"", {"host": name}) for name in names * 2]
    statuses = [answer.status_code for answer in _send(app, asked)]
    once = [421] * 70 + [200, 421]
    assert statuses == once + once
