"""The decision service against an attacker's review: cross-site writes, the token file's
format, and the Host a request names (DNS rebinding). In process: httpx on the ASGI app, a
guard on a MemoryBackend and a ManualClock (``hardening_rig.py``). What a 503 tells, and
every error as problem+json naming its field (never a bare 500), are in
``test_service_hardening_errors.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from freqguard import AsyncGuard, ConfigError, ManualClock, MemoryBackend
from freqguard import service as svc
from freqguard.service import create_app, served_names
from tests.integrations.hardening_rig import (
    CTX,
    DAILY,
    SMS,
    WRITES,
    _app,
    _json,
    _peek,
    _problem,
    _send,
)

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


@pytest.mark.parametrize("text", ["", "\n", "  \n  "])
def test_a_tokens_variable_set_but_holding_no_token_is_refused(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """``FREQGUARD_TOKENS`` set to nothing (a secret not mounted into the variable) turned
    authentication off without a word, as an empty token file did (an operator's first
    hour): set means tokens are meant; unset it for a service without tokens."""
    monkeypatch.delenv("FREQGUARD_TOKENS_FILE", raising=False)
    monkeypatch.setenv("FREQGUARD_TOKENS", text)
    with pytest.raises(ConfigError, match="FREQGUARD_TOKENS is set but holds no token"):
        svc.tokens_from_env()
    monkeypatch.delenv("FREQGUARD_TOKENS")
    assert svc.tokens_from_env() == []


def test_create_app_refuses_a_token_that_could_never_be_sent() -> None:
    guard = AsyncGuard(MemoryBackend(), [SMS])
    with pytest.raises(ConfigError, match="token 2") as caught:
        create_app(guard, ["good", "k,9fQ2secret"])
    assert "9fQ2" not in str(caught.value)


# -- 3. the Host a request names ------------------------------------------------------------


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
