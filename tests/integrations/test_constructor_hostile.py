"""Hostile construction-time arguments of the ASGI/Starlette/FastAPI and WSGI integrations,
``@capped`` and ``capped_task``: each either builds something that does what it says, or is
refused as it is built with a named error (a ConfigError, or a TypeError/ValueError naming
the argument), never a raw AttributeError/TypeError from deep inside, a route that quietly
caps nothing, or a construction whose cost grows without bound. Flask's are in
``test_flask_settings.py``, Django's and DRF's in
``test_constructor_hostile_django.py``."""

from __future__ import annotations

import asyncio
import contextlib
import functools
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
from freqguard.decorators import capped, configure
from freqguard.decorators.defaults import default_guard
from freqguard.integrations import wsgi
from freqguard.integrations.fastapi import limit_dependency
from freqguard.integrations.starlette import (
    FreqGuardMiddleware,
    Limit,
    client_ip,
    header,
    path_param,
)
from tests.conftest import START, examples

#: What a refusal may be: freqguard's own, or Python's for a wrong type (naming the argument).
_NAMED = (ConfigError, TypeError, ValueError)


async def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def _asgi_app(scope: Any, receive: Any, send: Any) -> None:
    """An ASGI app never called: the tests build middleware around it."""


def _codes(limit: Limit, url: str, times: int = 3) -> list[int]:
    """The statuses of ``times`` GETs of ``url`` through the middleware capped by ``limit``."""
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    inner = Starlette(routes=[Route("/{rest:path}", _ok)])
    app = FreqGuardMiddleware(inner, guard=guard, limits=[limit])

    async def main() -> list[int]:
        transport = httpx.ASGITransport(app=app, client=("9.9.9.9", 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return [(await client.get(url)).status_code for _ in range(times)]

    return asyncio.run(main())


# -- Limit ------------------------------------------------------------------------------------


def test_a_limit_path_with_a_query_string_is_refused() -> None:
    """``Limit("/search?q=1", ...)`` is accepted, and caps nothing: the ASGI path never
    holds the query string, so ``GET /search?q=1`` three times is 200, 200, 200."""
    assert _codes(Limit("/search", "1/minute"), "/search?q=1") == [200, 429, 429]  # the intent
    with pytest.raises(ConfigError, match=r"\?"):
        Limit("/search?q=1", "1/minute")


@pytest.mark.parametrize("factory", [client_ip, header], ids=["client_ip", "header"])
def test_a_key_factory_given_uncalled_is_refused(factory: Any) -> None:
    """``key=client_ip`` (no parentheses) passes the key check (it takes one argument),
    and every request is a 500: TypeError "'RequestInfo' object is not iterable" (for
    ``header``, AttributeError "'RequestInfo' object has no attribute 'lower'")."""
    with pytest.raises(ConfigError, match=rf"{factory.__name__}\("):
        Limit("/x", "1/minute", key=factory)


def test_a_path_param_the_pattern_lacks_is_refused_when_the_middleware_is_made() -> None:
    """The pattern is known when the middleware is made, and so is the parameter the key
    reads; it was a ConfigError at every request (a 500), not at construction. (Checked
    by the middleware, not the Limit: a FastAPI dependency's key reads its route's
    parameters, whatever its Limit's own pattern.)"""
    limit = Limit("/x/{a}", "1/minute", key=path_param("zz"))
    with pytest.raises(ConfigError, match=r"zz"):
        FreqGuardMiddleware(_asgi_app, guard=AsyncGuard(MemoryBackend()), limits=[limit])


def test_an_empty_limit_name_is_refused_as_a_blank_one_is() -> None:
    """``name=" "`` is refused ("1 to 64 characters"), ``name=""`` is taken silently as
    no name: the route gets the made-up name, yet its 429 names it as if given."""
    with pytest.raises(ConfigError, match=r"limit name"):
        Limit("/x", "1/minute", name="")


def test_parameters_side_by_side_are_refused_before_they_cost_a_backtracking_match() -> None:
    """A pattern of adjacent ``{x:path}`` parameters ending in a literal, before a
    ``/{s}`` Limit: the covering check matched its regex against the later pattern's
    probes, backtracking exponentially in the parameters (7: ~0.6 s, 8: ~4 s, 10:
    minutes), at construction, and every request's match alike. No path says where one of
    two adjacent parameters ends: the pattern is refused as it is made."""
    pattern = "/" + "".join(f"{{a{i}:path}}" for i in range(7)) + "a"
    with pytest.raises(ConfigError, match=r"side by side"):
        Limit(pattern, "1/minute")
    with pytest.raises(ConfigError, match=r"side by side"):
        Limit("/{a}{b}", "1/minute")
    assert Limit("/{a}-{b}", "1/minute").path == "/{a}-{b}"


_HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.binary(max_size=10),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=8)), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    st.just(object()),
)


@settings(max_examples=examples(60), deadline=None)
@given(
    field=st.sampled_from(["path", "rule", "methods", "cost", "name", "on_error", "key"]),
    value=_HOSTILE,
)
def test_a_limit_made_of_hostile_values_builds_or_names_its_error(
    field: str, value: object
) -> None:
    arguments: dict[str, Any] = {"path": "/x", "rule": "5/minute"}
    arguments[field] = value
    path, rule = arguments.pop("path"), arguments.pop("rule")
    with contextlib.suppress(*_NAMED):
        Limit(path, rule, **arguments)


# -- key functions ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", [None, 1, b"x-user"], ids=repr)
def test_header_of_a_name_not_a_string_is_refused(name: object) -> None:
    """None and 1: AttributeError "'NoneType' object has no attribute 'lower'"; bytes:
    TypeError "cannot use a string pattern on a bytes-like object" (from re)."""
    with pytest.raises(ConfigError, match=r"header"):
        header(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [" ", "x user", "x-user\n", "x:user"], ids=repr)
def test_header_of_a_name_no_request_can_carry_is_refused(name: str) -> None:
    """An HTTP field name is a token: no request carries one with a space, a newline or a
    colon. Accepted today: with the default ``missing="deny"`` every request is a 400,
    with ``missing="share"`` every client shares one budget."""
    with pytest.raises(ConfigError, match=r"header"):
        header(name)


@pytest.mark.parametrize("proxies", [None, 5, b"10.0.0.1"], ids=repr)
def test_client_ip_of_proxies_not_a_list_of_addresses_is_refused(proxies: object) -> None:
    """None and 5: TypeError "'NoneType' object is not iterable"; bytes are taken as their
    integers, each an address (0.0.0.49/32, ...), silently."""
    with pytest.raises(ConfigError, match=r"trusted_proxies"):
        client_ip(proxies)  # type: ignore[arg-type]


def test_client_ip_given_a_header_without_trusted_proxies_is_refused() -> None:
    """The header is read only behind a trusted proxy: with none, ``header=`` cannot apply,
    and every client behind the user's own proxy shares the proxy's budget, silently."""
    with pytest.raises(ConfigError, match=r"trusted_proxies"):
        client_ip(header="x-real-ip")


# -- the middleware and the dependency ---------------------------------------------------------


@pytest.mark.parametrize(
    "limits",
    [["/x"], [("/x", "1/minute")], "/x", Limit("/x", "1/minute"), None],
    ids=["a path", "a pair", "a string", "one Limit", "None"],
)
def test_middleware_limits_that_are_no_list_of_limits_are_refused(limits: object) -> None:
    """Today: AttributeError "'str' object has no attribute 'path'" (a path, a string),
    "'tuple' object ..." (a pair), TypeError "'Limit' object is not iterable" (one Limit),
    "'NoneType' object is not iterable"."""
    guard = AsyncGuard(MemoryBackend())
    with pytest.raises(ConfigError, match=r"limits"):
        FreqGuardMiddleware(_asgi_app, guard=guard, limits=limits)  # type: ignore[arg-type]


_NOT_GUARDS = [MemoryBackend(), "memory://", 5, Policy("p", Rule("1/minute"))]
_NOT_GUARD_IDS = ["a backend", "a URL", "an int", "a Policy"]


@pytest.mark.parametrize("guard", _NOT_GUARDS, ids=_NOT_GUARD_IDS)
def test_middleware_guard_that_is_no_guard_is_refused(guard: object) -> None:
    """A backend: AttributeError "'MemoryBackend' object has no attribute 'backend'"; the
    others: TypeError "cannot create weak reference to 'str' object"."""
    with pytest.raises(ConfigError, match=r"guard"):
        FreqGuardMiddleware(_asgi_app, guard=guard, limits=[Limit("/x", "1/minute")])  # type: ignore[arg-type]


@pytest.mark.parametrize("guard", _NOT_GUARDS, ids=_NOT_GUARD_IDS)
def test_limit_dependency_guard_that_is_no_guard_is_refused(guard: object) -> None:
    with pytest.raises(ConfigError, match=r"guard"):
        limit_dependency(guard, "1/minute", name="login")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "rule",
    [Policy("p", Rule("1/minute")), 5, 1.5, b"1/minute"],
    ids=["a Policy", "an int", "a float", "bytes"],
)
def test_limit_dependency_rule_of_another_type_is_named(rule: object) -> None:
    """Its docstring: "rule as for Limit" (which takes a Policy, and refuses the others by
    name). A Policy, 5, 1.5: TypeError "'Policy' object is not iterable" from ``list(rule)``;
    bytes: a ConfigError saying "got 49" (its first byte)."""
    with pytest.raises(ConfigError) as refused:
        limit_dependency(AsyncGuard(MemoryBackend()), rule, name="login")  # type: ignore[arg-type]
    shown = str(refused.value)
    assert (repr(rule)[:10] if not isinstance(rule, Policy) else "Policy 'p'") in shown


def test_limit_dependency_with_an_empty_name_is_refused() -> None:
    """``name=`` is required ("what its budget is called"); ``""`` is taken as none: two
    dependencies given ``""`` share the made-up name ``http.ANY-...``."""
    with pytest.raises(ConfigError, match=r"name"):
        limit_dependency(AsyncGuard(MemoryBackend()), "1/minute", name="")


def test_wsgi_middleware_given_an_async_guard_is_refused() -> None:
    """Built today; every request's hit is then a coroutine nobody awaits (a 500)."""
    with pytest.raises(ConfigError, match=r"Guard"):
        wsgi.FreqGuardMiddleware(
            lambda environ, start: [],
            guard=AsyncGuard(MemoryBackend()),  # type: ignore[arg-type]
            limits=[wsgi.Limit("/x", "1/minute")],
        )


# -- @capped and configure ----------------------------------------------------------------------


def test_configure_keeps_the_memory_backend_it_is_given() -> None:
    """An empty MemoryBackend is falsy (``__len__``): ``backend or MemoryBackend()`` drops
    it for a new one, its clock with it."""
    backend = MemoryBackend(ManualClock(START))
    try:
        configure(backend)
        assert default_guard().backend is backend
    finally:
        configure()


def test_capped_key_mapping_of_a_value_neither_path_nor_callable_is_named() -> None:
    """Today: AttributeError "'int' object has no attribute 'split'"."""
    with pytest.raises(ConfigError, match=r"key"):

        @capped("1/minute", key={"user": 5}, guard=Guard(MemoryBackend()))  # type: ignore[dict-item]
        def send(user: str) -> None: ...


@pytest.mark.parametrize("guard", _NOT_GUARDS, ids=_NOT_GUARD_IDS)
def test_capped_guard_that_is_no_guard_is_refused(guard: object) -> None:
    """Today: AttributeError "'MemoryBackend' object has no attribute 'policies'"."""
    with pytest.raises(ConfigError, match=r"guard"):

        @capped("1/minute", guard=guard)  # type: ignore[arg-type]
        def send(user: str) -> None: ...


def test_capped_context_on_a_decorated_function_is_refused() -> None:
    """``context=`` is the with-block form's; on a decorated function nobody reads it: one
    budget for every call, whatever the context says."""
    with pytest.raises(ConfigError, match=r"context"):

        @capped("1/minute", context={"user": "ann"}, guard=Guard(MemoryBackend()))
        def send(user: str) -> None: ...


@pytest.mark.parametrize("context", [5, "ann", ["user"]], ids=repr)
def test_capped_context_not_a_mapping_is_refused_when_made(context: object) -> None:
    """Accepted by ``capped(...)``; the with-block then fails in ``dict(context)``."""
    with pytest.raises(ConfigError, match=r"context"):
        capped("1/minute", context=context, guard=Guard(MemoryBackend()))  # type: ignore[arg-type]


def test_capped_key_path_on_a_partial_is_named() -> None:
    """Today: AttributeError "'functools.partial' object has no attribute '__qualname__'",
    raised while building the message that the key names no parameter."""

    def send(channel: str, user: str) -> None: ...

    with pytest.raises(ConfigError, match=r"key"):
        capped("1/minute", key="recipient", guard=Guard(MemoryBackend()))(
            functools.partial(send, "sms")
        )


def test_capped_on_exceeded_that_cannot_take_the_decision_is_refused() -> None:
    """A key function of the wrong arity is refused when the route is made; an
    ``on_exceeded`` of the wrong arity is taken, and the first denied call raises
    TypeError "<lambda>() takes 0 positional arguments but 1 was given"."""
    with pytest.raises(ConfigError, match=r"on_exceeded"):
        capped("1/minute", on_exceeded=lambda: None, guard=Guard(MemoryBackend()))  # type: ignore[arg-type,misc]


# -- capped_task ---------------------------------------------------------------------------------


def _celery() -> Any:
    celery = pytest.importorskip("celery", reason="the celery extra is not installed")
    app = celery.Celery("hostile", broker="memory://", set_as_current=False)
    app.conf.task_always_eager = True
    return app


_SMS = Policy("sms", Rule("1/minute", by="recipient"))


@pytest.mark.parametrize("app", [None, 5, "celery"], ids=repr)
def test_capped_task_app_that_is_no_celery_app_is_refused(app: object) -> None:
    """Today: AttributeError "'NoneType' object has no attribute 'task'", at decoration."""
    from freqguard.integrations.celery import capped_task

    with pytest.raises(ConfigError, match=r"app"):

        @capped_task(app, _SMS, guard=Guard(MemoryBackend()))
        def send(recipient: str) -> None: ...


def test_capped_task_throws_of_one_exception_class_is_taken_as_celery_takes_it() -> None:
    """``throws=ValueError`` with ``on_denied="raise"``: TypeError "Value after * must be
    an iterable, not type", from capped_task's own ``(*throws, TaskDenied)``; Celery takes
    one class as well as a tuple, and so does capped_task now."""
    from freqguard.integrations.celery import TaskDenied, capped_task

    app = _celery()
    try:
        task = capped_task(
            app, _SMS, guard=Guard(MemoryBackend()), on_denied="raise", throws=ValueError
        )(_send)
        assert task.throws == (ValueError, TaskDenied)
    finally:
        app.close()


def _send(recipient: str) -> None: ...


def test_capped_task_whose_function_cannot_take_a_rate_for_input_is_refused() -> None:
    """A dimension the function cannot take is refused at decoration; an input a rule's
    ``rate_for`` reads is not: the task can never be given ``plan``, so every run is at
    the default tier, silently (and sending ``plan=`` is a TypeError in the body)."""
    from freqguard import TierRates
    from freqguard.integrations.celery import capped_task

    tiered = Policy(
        "tiered",
        Rule("1/minute", by="recipient", name="r", rate_for=TierRates("plan", {"pro": "9/minute"})),
    )
    app = _celery()
    try:
        with pytest.raises(ConfigError, match=r"plan"):

            @capped_task(app, tiered, guard=Guard(MemoryBackend()), name="hostile.tiered")
            def send(recipient: str) -> None: ...

    finally:
        app.close()


def test_capped_task_option_nobody_reads_is_refused() -> None:
    """``max_retires=3`` (a typo of ``max_retries``) goes to ``app.task``, which sets it as
    an attribute nobody reads: the task retries by Celery's default, silently."""
    from freqguard.integrations.celery import capped_task

    app = _celery()
    try:
        with pytest.raises((ConfigError, TypeError), match=r"max_retires"):

            @capped_task(
                app, _SMS, guard=Guard(MemoryBackend()), name="hostile.typo", max_retires=3
            )
            def send(recipient: str) -> None: ...

    finally:
        app.close()
