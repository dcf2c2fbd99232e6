"""The decision service's errors against an attacker's review: what a 503 tells (no hosts,
ports or reprs; an outage logged once a while), and every error as problem+json naming its
field, nothing counted (never a bare 500). In process: httpx on the ASGI app, a guard on a
MemoryBackend and a ManualClock (``hardening_rig.py``). Cross-site writes, tokens and the
Host a request names are in ``test_service_hardening.py``."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from freqguard import (
    BackendUnavailable,
    ConfigError,
    MemoryBackend,
    Policy,
    Rule,
    async_backend_from_url,
)
from freqguard.observe.base import RepeatFilter
from freqguard.script.calls import Reply, ScriptCall
from freqguard.service.problems import store_failed
from tests.integrations.hardening_rig import (
    CTX,
    PROBLEM,
    WRITES,
    Request,
    _app,
    _json,
    _peek,
    _problem,
    _send,
)
from tests.servers import free_port

# -- 1. what a 503 tells --------------------------------------------------------------------


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


# -- 2. raw errors --------------------------------------------------------------------------


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


# -- 3. no exception reaches the client bare ------------------------------------------------


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


def test_a_store_that_refused_part_of_a_batch_does_not_say_nothing_was_applied() -> None:
    """A batch on one server run in part, then refused (an error reply to a later call): its
    error is answered (the server is up) and sent (part of it was applied). The 503 said
    "the store refused the call; nothing was applied", reading answered before sent."""
    failure = BackendUnavailable("NOREPLICAS", answered=True, sent=True)
    detail = store_failed(failure, "sms", RepeatFilter(60.0)).detail
    assert "nothing was applied" not in detail
    assert "applied" in detail


@pytest.mark.parametrize(
    ("answered", "sent"), [(False, False), (False, True), (True, False), (True, True)]
)
def test_every_store_503_says_when_to_retry(answered: bool, sent: bool) -> None:
    """An operator's first hour: only the open circuit's 503 carried Retry-After; the
    store unreachable or silent said nothing of when to come back. Every store 503 does
    (a second, or the circuit's wait)."""
    failure = BackendUnavailable("down", answered=answered, sent=sent)
    problem = store_failed(failure, "sms", RepeatFilter(60.0))
    assert problem.status == 503
    assert problem.headers["retry-after"] == "1"
