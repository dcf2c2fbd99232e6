"""What django-ratelimit users bring to ``@capped``: a budget shared by name (their
``group=``), on function views and ``method_decorator`` alike, with the middleware or
without; deciding without refusing (their ``block=False``: ``request.limited``); a cap for
some methods (their ``method=``); their rate strings; and a refused request counted by
nothing, the default limits included."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import AsyncClient, Client, RequestFactory, override_settings
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import Guard, ManualClock, MemoryBackend
from freqguard.errors import ConfigError
from freqguard.integrations import django as fg_django
from freqguard.integrations._django_settings import read_settings
from freqguard.integrations.django import capped
from tests.conftest import examples
from tests.integrations import django_site

SITE = django_site.SETTINGS


@capped("2/m", name="shared")
def first(request: HttpRequest) -> HttpResponse:
    return HttpResponse("first")


@capped("2/m", name="shared")
def second(request: HttpRequest) -> HttpResponse:
    return HttpResponse("second")


class Orders(View):
    @method_decorator(capped("2/m", name="shared"))
    def post(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("posted")


class Refunds(View):
    @method_decorator(capped("2/m", name="shared"))
    def post(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("refunded")


@capped("1/m", block=False)
def soft(request: HttpRequest) -> JsonResponse:
    decision = request.freqguard.decision  # type: ignore[attr-defined]
    return JsonResponse(
        {
            "limited": request.limited,  # type: ignore[attr-defined]
            "allowed": decision.allowed,
            "retry_after": decision.retry_after,
            "denied_by": [rule.id for rule in decision.denied_by],
        }
    )


@capped("1/m", block=False)
async def asoft(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"limited": request.limited})  # type: ignore[attr-defined]


@capped("1/m", methods=["POST"])
def login(request: HttpRequest) -> HttpResponse:
    return HttpResponse("form" if request.method == "GET" else "signed in")


@capped("1/m")
def tight(request: HttpRequest) -> HttpResponse:
    return HttpResponse("tight")


class Urls:
    urlpatterns: ClassVar[list[Any]] = [
        path("first", first, name="first"),
        path("second", second, name="second"),
        path("orders", Orders.as_view(), name="orders"),
        path("refunds", Refunds.as_view(), name="refunds"),
        path("soft", soft, name="soft"),
        path("asoft", asoft, name="asoft"),
        path("login", login, name="login"),
        path("tight", tight, name="tight"),
    ]


MIDDLEWARE = SITE["MIDDLEWARE"]
WITHOUT = [m for m in MIDDLEWARE if "freqguard" not in m]


@pytest.fixture
def guard(clock: ManualClock) -> Guard:
    return Guard(MemoryBackend(clock))


def _site(guard: Guard, middleware: list[str] = MIDDLEWARE, **more: Any) -> Any:
    return override_settings(
        FREQGUARD_BACKEND=guard, ROOT_URLCONF=Urls, MIDDLEWARE=middleware, **more
    )


def _codes(method: str, *paths: str) -> list[int]:
    client = Client(enforce_csrf_checks=False)
    return [getattr(client, method)(p).status_code for p in paths]


@pytest.mark.parametrize("middleware", [MIDDLEWARE, WITHOUT], ids=["middleware", "without"])
def test_views_naming_one_budget_share_it(guard: Guard, middleware: list[str]) -> None:
    """django-ratelimit's group=: two function views and two methods, one budget."""
    with _site(guard, middleware):
        assert _codes("get", "/first", "/second", "/first") == [200, 200, 429]
        assert _codes("post", "/orders", "/refunds") == [429, 429]
    assert [rule.id for rule in guard.policies["shared"].rules] == ["sl.2.60s"]


def test_methods_naming_one_budget_share_it(guard: Guard) -> None:
    with _site(guard, WITHOUT):
        assert _codes("post", "/orders", "/refunds", "/orders") == [200, 200, 429]
        assert _codes("get", "/second") == [429]


def test_two_caps_naming_one_budget_with_two_rates_are_refused(guard: Guard) -> None:
    @capped("5/m", name="shared")
    def other(request: HttpRequest) -> HttpResponse:
        return HttpResponse("other")

    with _site(guard, WITHOUT):
        assert _codes("get", "/first") == [200]
        with pytest.raises(ConfigError, match="'shared' is given other rules by @capped on"):
            other(RequestFactory().get("/other"))


def test_a_refused_request_is_counted_by_no_default_limit(guard: Guard) -> None:
    """The shared cap is decided when its view runs, after the middleware's default
    limits: a request it refuses is given back to them."""
    with _site(guard, FREQGUARD_DEFAULT_LIMITS="3/minute"):
        assert _codes("get", "/first", "/first", "/first", "/first") == [200, 200, 429, 429]
        # the defaults of /first counted the two admitted, not the two refused
        peek = guard.peek("django.first", client="127.0.0.1")
        assert [state.remaining for state in peek.rules] == [1]


@pytest.mark.parametrize("path", ["/soft", "/asoft"])
def test_a_cap_that_does_not_block_lets_the_view_answer(guard: Guard, path: str) -> None:
    """django-ratelimit's block=False: the view runs and reads request.limited."""
    with _site(guard):
        if path == "/soft":
            responses = [Client().get(path) for _ in range(3)]
        else:

            async def run() -> list[Any]:
                client = AsyncClient()
                return [await client.get(path) for _ in range(3)]

            responses = asyncio.run(run())
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert [json.loads(r.content)["limited"] for r in responses] == [False, True, True]
    assert "Retry-After" not in responses[1]  # the view answered: not a refusal
    assert responses[1]["RateLimit"] == '"sl.1.60s";r=0;t=60'


def test_the_decision_is_on_the_request_and_a_denied_hit_counts_nothing(
    guard: Guard, clock: ManualClock
) -> None:
    with _site(guard, WITHOUT):
        client = Client()
        allowed = json.loads(client.get("/soft").content)
        clock.advance(15)
        denied = json.loads(client.get("/soft").content)
        clock.advance(45)  # the one admitted leaves the window: the denied left nothing
        again = json.loads(client.get("/soft").content)
    assert allowed == {"limited": False, "allowed": True, "retry_after": 0.0, "denied_by": []}
    assert denied == {
        "limited": True,
        "allowed": False,
        "retry_after": 45.0,
        "denied_by": ["sl.1.60s"],
    }
    assert again["allowed"] is True


def test_a_cap_for_some_methods_leaves_the_others_alone(guard: Guard) -> None:
    with _site(guard):
        assert _codes("get", "/login", "/login", "/login") == [200, 200, 200]
        assert _codes("post", "/login", "/login") == [200, 429]


def test_a_request_through_a_capped_view_twice_counts_once(guard: Guard) -> None:
    """Deliberate: a view that calls another capped view with the same request (a
    wrapper view, a retry) is one request, decided once."""
    request = RequestFactory().get("/tight")
    with _site(guard, WITHOUT):
        assert tight(request).status_code == 200
        assert tight(request).status_code == 200  # the same request object: decided
        assert tight(RequestFactory().get("/tight")).status_code == 429


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("ip", "client_ip()"),
        ("user_or_ip", "user_or_ip()"),
        ("header:x-api-key", "header("),
        # a login's idiom, found by a new user's first hour
        ("post:username", "lambda request: {'username': request.raw.POST.get('username', '')}"),
        ("get:q", "lambda request: {'q': request.raw.GET.get('q', '')}"),
    ],
)
def test_django_ratelimits_key_strings_are_refused_naming_ours(key: str, meant: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"key={key!r} is key={meant}")):
        capped("5/m", key=key)  # type: ignore[arg-type]


def test_a_callable_rate_is_refused_naming_tiers() -> None:
    """django-ratelimit's callable rate (``rate=lambda group, request: ...``) got "Limit
    rule must be a rate string, Rule or Policy": it names the tier, its translation (found
    by a new user)."""
    with pytest.raises(ConfigError) as found:
        capped(lambda group, request: "5/m")  # type: ignore[arg-type]
    message = str(found.value)
    assert message.startswith("capped takes")
    assert "rate_for=TierRates(" in message
    assert "django-ratelimit.md" in message


def test_django_ratelimits_habits_get_their_own_hints() -> None:
    """A key callable of theirs, ``(group, request)``, was told Flask-Limiter's takes none;
    a bare ``@capped`` (no rate) was told of tiers only; ``FREQGUARD_KEY = "ip"`` had no
    hint where ``capped(key="ip")`` had one (a new user's run of the Django pages)."""
    with pytest.raises(ConfigError, match=r"key callable takes \(group, request\)"):
        capped("5/m", key=lambda group, request: "k")  # type: ignore[arg-type, misc]
    with pytest.raises(ConfigError, match=re.escape("a bare @capped (no rate")):

        @capped  # type: ignore[arg-type]
        def view(request: HttpRequest) -> HttpResponse:
            return HttpResponse("unreached")

    with (
        override_settings(FREQGUARD_KEY="ip"),
        pytest.raises(ConfigError, match=re.escape("key='ip' is key=client_ip() here")),
    ):
        read_settings()


@settings(max_examples=examples(40))
@given(
    block=st.one_of(st.none(), st.integers(), st.text(max_size=4)),
    methods=st.one_of(
        st.text(max_size=6),
        st.lists(st.one_of(st.text(max_size=6), st.integers()), max_size=3),
    ),
)
def test_bad_block_and_methods_are_refused_by_name(block: object, methods: object) -> None:
    with pytest.raises(ConfigError, match="block must be True or False"):
        capped("5/m", block=block)  # type: ignore[arg-type]
    valid = (
        isinstance(methods, list)
        and methods
        and all(
            isinstance(m, str) and re.fullmatch(r"[A-Za-z]+(?:[-_][A-Za-z]+)*", m) for m in methods
        )
    )
    if not valid:
        with pytest.raises(ConfigError, match="methods must"):
            capped("5/m", methods=methods)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _closed() -> Iterator[None]:
    yield
    fg_django.close()


def test_default_limits_changed_on_the_same_guard_take_effect(guard: Guard) -> None:
    """override_settings in a test, the guard kept: the view's policy is replaced (it was
    a ConfigError: a different policy under its name)."""
    with _site(guard, FREQGUARD_DEFAULT_LIMITS="1/minute"):
        assert _codes("get", "/login", "/login") == [200, 429]
        with override_settings(FREQGUARD_DEFAULT_LIMITS="3/minute"):  # the one, two more
            assert _codes("get", "/login", "/login", "/login") == [200, 200, 429]
    assert [rule.id for rule in guard.policies["django.login"].rules] == ["default.sl.3.60s"]


@pytest.mark.parametrize("csrf_first", [True, False], ids=["csrf-first", "freqguard-first"])
def test_csrf_refusals_count_against_the_default_limits_wherever_it_is(
    guard: Guard, csrf_first: bool
) -> None:
    """docs/django.md, "Which requests count": a POST without its CSRF token is refused
    (403) after the middleware decided it, so it counts, whichever comes first."""
    csrf = "django.middleware.csrf.CsrfViewMiddleware"
    middleware = [csrf, *MIDDLEWARE] if csrf_first else [*MIDDLEWARE, csrf]
    with _site(guard, middleware, FREQGUARD_DEFAULT_LIMITS="2/minute"):
        client = Client(enforce_csrf_checks=True)
        assert [client.post("/login").status_code for _ in range(3)] == [403, 403, 429]
