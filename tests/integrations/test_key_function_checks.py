"""A key function that cannot take the request is refused where it is given, never a 500 at
every request (found by a new user's first hour: Flask-Limiter's ``key_func`` takes no
argument, so ``key=lambda: request.headers[...]`` decorated fine and failed each call)."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend
from freqguard.integrations._request import RequestInfo
from freqguard.integrations.flask import FreqGuard
from freqguard.integrations.starlette import Limit


def _none() -> str:
    return "anon"


def _two(request: RequestInfo, other: object) -> str:
    return "anon"


@pytest.mark.parametrize("key", [lambda: "anon", _none, _two])
def test_a_key_that_cannot_take_the_request_is_refused_where_it_is_given(key: Any) -> None:
    app = Flask("keys")
    fg = FreqGuard(app, guard=Guard(MemoryBackend(), clock=ManualClock(0.0)))
    shown = "must take the request"
    with pytest.raises(ConfigError, match=shown):
        fg.capped("2/minute", key=key)
    with pytest.raises(ConfigError, match=shown):
        FreqGuard(key=key)
    with pytest.raises(ConfigError, match=shown):
        Limit("/a", "2/minute", key=key)


@pytest.mark.parametrize(
    "key",
    [
        lambda request: "a",
        lambda request, *rest: "a",
        lambda *args: "a",
        lambda request, other=1: "a",
        str,  # a builtin: no signature to read, called as it is
    ],
)
def test_a_key_that_takes_the_request_passes(key: Any) -> None:
    Limit("/a", "2/minute", key=key)
    FreqGuard(key=key)


def test_the_message_names_the_fix() -> None:
    with pytest.raises(ConfigError) as refused:
        Limit("/a", "2/minute", key=_none)  # type: ignore[arg-type]
    text = str(refused.value)
    assert "Limit('/a')" in text
    assert "key=lambda request: request.headers.get('x-user')" in text
    assert "Flask-Limiter's key_func takes none" in text


def _takes_request(func: Any) -> Any:
    """An adapter of a Flask-Limiter key_func (no argument) to ours: a wrapper that takes
    the request, made with functools.wraps as decorators are."""
    import functools

    @functools.wraps(func)
    def key(request: RequestInfo) -> object:
        return func()

    return key


def test_a_wrapper_that_takes_the_request_passes_whatever_it_wraps() -> None:
    """Review: inspect.signature follows ``__wrapped__``, so the signature checked was the
    wrapped function's (no argument), not the wrapper's, which is what is called."""
    key = _takes_request(_none)
    assert key(RequestInfo("GET", "/", dict, "1.2.3.4")) == "anon"
    Limit("/a", "2/minute", key=key)
    FreqGuard(key=key)


def test_an_async_key_function_is_refused_where_it_is_given() -> None:
    """Review: a coroutine function takes the request, so it passed the check, and every
    request is then keyed by (or refused over) an un-awaited coroutine."""

    async def by_user(request: RequestInfo) -> str:
        return "u"

    with pytest.raises(ConfigError, match="key function"):
        Limit("/a", "2/minute", key=by_user)
