"""Any keyword given to the ASGI middleware that is not its own (a slowapi ``Limiter``
argument, a misspelling, a name of any shape) is refused as the middleware is built: a
``ConfigError`` naming freqguard's way for slowapi's, a ``TypeError`` naming the argument
for any other; never accepted quietly (a route capped other than meant)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import AsyncGuard, ConfigError, MemoryBackend
from freqguard.integrations._http import LIMITER_ARGUMENTS
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit
from tests.conftest import examples

_OWN = {"guard", "limits", "headers", "refused", "enabled"}


async def _app(scope: Any, receive: Any, send: Any) -> None:
    """Never called: the tests build the middleware only."""


@settings(max_examples=examples(200), deadline=None)
@given(
    name=st.one_of(st.sampled_from(sorted(LIMITER_ARGUMENTS)), st.text(min_size=1, max_size=40)),
    value=st.one_of(st.none(), st.integers(), st.text(max_size=20), st.lists(st.integers())),
)
def test_a_keyword_not_the_middlewares_is_refused_naming_it(name: str, value: object) -> None:
    if name in _OWN or name == "app":
        return
    guard = AsyncGuard(MemoryBackend())
    slowapis = name in LIMITER_ARGUMENTS
    expected = f"slowapi's {re.escape(name)}=" if slowapis else re.escape(repr(name))
    given: dict[str, Any] = {name: value}
    with pytest.raises(ConfigError if slowapis else TypeError, match=expected):
        FreqGuardMiddleware(_app, guard=guard, limits=[Limit("/x", "1/minute")], **given)
