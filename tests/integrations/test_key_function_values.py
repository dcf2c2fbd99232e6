"""What a key function answers, per request: a str or an int keys the request (None is a
400, as docs/integrations.md says), a mapping gives those by dimension; anything else is
refused naming the key function and the type it gave, as a key function that raises is (the
exception goes to the framework: a 500 and its log line). Found by a new user coming from
Flask-Limiter and slowapi, which turn any key into text: a tuple was a 500 naming an
internal policy, and ``{}`` put every client on one budget without a word."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from freqguard import AsyncGuard, ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit
from freqguard.integrations.wsgi import FreqGuardMiddleware as WSGIMiddleware
from freqguard.integrations.wsgi import Limit as WSGILimit
from tests.conftest import examples


async def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def _statuses(rule: Any, key: Any, sent: int = 3) -> list[int]:
    app = Starlette(routes=[Route("/x", _ok)])
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(1000))
    limited = FreqGuardMiddleware(app, guard=guard, limits=[Limit("/x", rule, key=key)])

    async def main() -> list[int]:
        transport = httpx.ASGITransport(app=limited)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return [(await http.get("/x")).status_code for _ in range(sent)]

    return asyncio.run(main())


def by_pair(request: object) -> object:
    return ("a", "b")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (("a", "b"), "a tuple"),
        (["a"], "a list"),
        (b"a", "a bytes"),
        (1.5, "a float"),
        (True, "a bool"),
        ({"user": b"u"}, "'user': a bytes"),
        ({"user": 2.5}, "'user': a float"),
        ({"user": ["u"]}, "'user': a list"),
    ],
)
def test_a_key_that_is_no_str_or_int_is_refused_naming_the_key_function(
    value: object, shown: str
) -> None:
    def by_odd(request: object) -> object:
        return value

    with pytest.raises(ConfigError) as refused:
        _statuses("2/minute", by_odd)
    text = str(refused.value)
    assert "by_odd" in text
    assert shown in text
    assert "a str or an int" in text


def test_a_dimension_name_that_is_no_str_is_refused() -> None:
    def by_number(request: object) -> object:
        return {1: "a"}

    with pytest.raises(ConfigError, match=r"by_number.*dimension names are str"):
        _statuses("2/minute", by_number)


def test_an_empty_mapping_under_rates_is_refused_not_one_budget_for_all() -> None:
    def by_nothing(request: object) -> object:
        return {}

    with pytest.raises(ConfigError) as refused:
        _statuses("2/minute", by_nothing)
    text = str(refused.value)
    assert "by_nothing" in text
    assert "one budget" in text
    assert "Policy" in text  # the fix for one budget on purpose


def test_an_empty_mapping_under_a_policy_keyed_by_nothing_is_its_one_budget() -> None:
    everyone = Policy("everyone", Rule("2/minute"))
    assert _statuses(everyone, lambda request: {}) == [200, 200, 429]


@pytest.mark.parametrize("value", ["u", "", 7, {"user": "u"}, {"user": 7}])
def test_a_str_or_an_int_keys_the_request(value: object) -> None:
    assert _statuses("2/minute", lambda request: value) == [200, 200, 429]


def test_none_is_still_a_400() -> None:
    assert _statuses("2/minute", lambda request: None, sent=2) == [400, 400]


def test_the_wsgi_middleware_refuses_alike() -> None:
    def app(environ: object, start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    guard = Guard(MemoryBackend(), clock=ManualClock(1000))
    limits = [WSGILimit("/x", "2/minute", key=by_pair)]
    client = httpx.Client(
        transport=httpx.WSGITransport(app=WSGIMiddleware(app, guard=guard, limits=limits))
    )
    with pytest.raises(ConfigError, match=r"by_pair.*a tuple"):
        client.get("http://t/x")


_ANYTHING = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=8),
        st.binary(max_size=8),
        st.just("z" * 5000),
    ),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner)
        | st.dictionaries(st.text(max_size=4) | st.integers(), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=examples(100))
@given(value=_ANYTHING)
def test_any_key_value_is_an_answer_or_a_config_error_naming_the_key(value: object) -> None:
    """Hostile values a key function may answer: each keys the request (200, then 429 on
    one budget), is a 400 (None), or a ConfigError naming the key function (or the bad
    dimension name), never another exception, and never a message that quotes a long value
    whole."""

    def by_value(request: object) -> object:
        return value

    with contextlib.suppress(ConfigError):
        statuses = _statuses("1/minute", by_value, sent=2)
        assert statuses in ([200, 429], [400, 400])
        return
    with pytest.raises(ConfigError) as refused:
        _statuses("1/minute", by_value, sent=1)
    text = str(refused.value)
    # the key function named, or (a dimension name no Rule takes, {"": 0}) the dimension
    assert "by_value" in text or text.startswith("dimension ")
    assert len(text) < 1000
