"""The Django middleware and ``@capped`` views on the memory backend, time on a ManualClock:
default limits per view, a view's cap decided with them in one hit, sync and async views
and class-based views, keys, exemptions, the switch, and the 429 every integration sends.
The leases a request holds (a concurrency rule, streamed answers) are in
``test_django_leases.py``; the rig is ``django_rig.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory, override_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.errors import ConfigError
from freqguard.integrations import django as fg_django
from tests.conftest import examples
from tests.integrations.django_rig import SITE, _aget, _get


@pytest.fixture
def guard(clock: ManualClock) -> Iterator[Guard]:
    guard = Guard(MemoryBackend(clock))
    with override_settings(FREQGUARD_BACKEND=guard, FREQGUARD_DEFAULT_LIMITS="3/minute"):
        yield guard


def _codes(responses: list[Any]) -> list[int]:
    return [response.status_code for response in responses]


def test_default_limits_count_each_view_on_its_own(guard: Guard, clock: ManualClock) -> None:
    assert _codes(_get("/plain", 4)) == [200, 200, 200, 429]
    # the same view under another (unnamed) route: its own budget, named by dotted path
    assert _codes(_get("/plain-again", 4)) == [200, 200, 200, 429]
    assert {"django.plain", "django.tests.integrations.django_site.plain"} <= set(guard.policies)
    clock.advance(60)
    assert _codes(_get("/plain")) == [200]


def test_a_denial_is_a_problem_with_retry_after_and_ietf_headers(
    guard: Guard, clock: ManualClock
) -> None:
    *allowed, denied = _get("/plain", 4)
    assert allowed[0]["RateLimit-Policy"] == '"default.sl.3.60s";q=3;w=60'
    assert allowed[0]["RateLimit"] == '"default.sl.3.60s";r=2;t=60'
    assert denied["Content-Type"] == "application/problem+json"
    assert denied["Retry-After"] == "60"
    body = json.loads(denied.content)
    assert body["status"] == 429
    assert body["instance"] == "/plain"
    assert body["policy"] == "django.plain"
    assert body["violated_policies"] == ["default.sl.3.60s"]


def test_a_views_cap_and_the_defaults_are_one_hit(guard: Guard) -> None:
    """The cap (2/minute) denies the third request; the defaults (3/minute) are not
    charged for it: one policy, one atomic decision."""
    assert _codes(_get("/sync", 3)) == [200, 200, 429]
    peek = guard.peek("django.sync", client="127.0.0.1")
    remaining = {state.rule.id: state.remaining for state in peek.rules}
    assert remaining == {"default.sl.3.60s": 1, "sl.2.60s": 0}


@pytest.mark.parametrize("path", ["/sync", "/async", "/class", "/async-class"])
def test_sync_and_async_views_under_both_handlers(guard: Guard, path: str) -> None:
    """A sync client (WSGI handler, sync middleware, Guard) and an async one (ASGI
    handler, async middleware, AsyncGuard) count on one store."""
    assert _codes(_get(path)) == [200]
    assert _codes(_aget(path, 2)) == [200, 429]
    assert _codes(_get(path)) == [429]


def test_a_method_decorated_cap_is_decided_on_its_own(guard: Guard) -> None:
    client = Client()
    assert [client.post("/method").status_code for _ in range(2)] == [200, 429]
    # GET has no cap of its own; the view's default limits (3/minute) counted the POST
    # admitted, and gave back the one the method's cap refused
    assert _codes(_get("/method", 3)) == [200, 200, 429]


def test_a_header_key_gives_each_value_its_own_budget(guard: Guard) -> None:
    assert _codes(_get("/key", 2, x_api_key="a")) == [200, 429]
    assert _codes(_get("/key", 1, x_api_key="b")) == [200]
    missing = _get("/key")[0]
    assert missing.status_code == 400
    assert "x-api-key" in json.loads(missing.content)["detail"]


@pytest.mark.parametrize("get", [_get, _aget])
def test_users_and_addresses_have_budgets_of_their_own(clock: ManualClock, get: Any) -> None:
    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(clock))):  # no defaults
        _users(get)


def _users(get: Any) -> None:
    assert _codes(get("/user", 3, x_user="ann")) == [200, 200, 429]
    assert _codes(get("/user", 2, x_user="bob")) == [200, 200]
    assert _codes(get("/user", 3)) == [200, 200, 429]  # anonymous: by address


def test_forwarded_addresses_count_only_behind_trusted_proxies(clock: ManualClock) -> None:
    guard = Guard(MemoryBackend(clock))
    key = fg_django.client_ip(["127.0.0.0/8"])
    with override_settings(
        FREQGUARD_BACKEND=guard, FREQGUARD_DEFAULT_LIMITS="1/minute", FREQGUARD_KEY=key
    ):
        assert _codes(_get("/plain", 2, x_forwarded_for="203.0.113.7")) == [200, 429]
        assert _codes(_get("/plain", 1, x_forwarded_for="203.0.113.8")) == [200]


def test_an_exempt_view_takes_no_default_limits(guard: Guard) -> None:
    assert _codes(_get("/exempt", 5)) == [200] * 5


def test_the_switch_turns_every_cap_off(clock: ManualClock) -> None:
    guard = Guard(MemoryBackend(clock))
    with override_settings(
        FREQGUARD_BACKEND=guard, FREQGUARD_DEFAULT_LIMITS="1/minute", FREQGUARD_ENABLED=False
    ):
        responses = _get("/sync", 3) + _aget("/async", 3)
    assert _codes(responses) == [200] * 6
    assert "RateLimit" not in responses[0]


def test_without_the_middleware_a_cap_decides_and_sends_its_headers(clock: ManualClock) -> None:
    guard = Guard(MemoryBackend(clock))
    others = [m for m in SITE["MIDDLEWARE"] if "freqguard" not in m]
    with override_settings(FREQGUARD_BACKEND=guard, MIDDLEWARE=others):
        sync = _get("/sync", 3)
        asynchronous = _aget("/async", 3)
        plain = _get("/plain", 5)
    assert _codes(sync) == _codes(asynchronous) == [200, 200, 429]
    assert sync[0]["RateLimit"] == '"sl.2.60s";r=1;t=60'
    assert asynchronous[2]["Retry-After"] == "60"
    assert _codes(plain) == [200] * 5  # the default limits need the middleware


def test_decorating_something_else_is_refused() -> None:
    with pytest.raises(ConfigError, match="view function or a class-based view"):
        fg_django.capped("1/minute")(int)
    with pytest.raises(ConfigError, match="cost must be an integer >= 0, got -1"):
        fg_django.capped("1/minute", cost=-1)
    with pytest.raises(ConfigError, match="rate"):
        fg_django.capped("often")


def test_a_configuration_file_makes_the_guard(tmp_path: Path) -> None:
    config = tmp_path / "freqguard.toml"
    config.write_text(
        'backend = "memory://"\n\n[[policy]]\nname = "sms"\n'
        'rules = [{ rate = "2/minute", by = "recipient", name = "rcpt-1m" }]\n'
    )
    with override_settings(FREQGUARD_CONFIG=str(config), FREQGUARD_DEFAULT_LIMITS="2/minute"):
        assert _codes(_get("/plain", 3)) == [200, 200, 429]
        assert _codes(_aget("/async", 1)) == [200]  # the async side on the same store
        assert "sms" in fg_django.guard().policies  # the file's policies are registered
        assert fg_django.async_guard().policies.keys() == fg_django.guard().policies.keys()


def test_a_policy_as_the_cap_brings_its_rules_and_on_error(clock: ManualClock) -> None:
    policy = Policy("quota", Rule("1/minute", by="client"), on_error="allow")

    @fg_django.capped(policy)
    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(clock)), MIDDLEWARE=[]):
        allowed = view(RequestFactory().get("/anywhere"))
        denied = view(RequestFactory().get("/again"))
        registered = fg_django.guard().policies[view._freqguard_cap.alone]  # type: ignore[attr-defined]
    assert allowed.status_code == 200
    assert denied.status_code == 429
    assert registered.on_error == "allow"
    assert [rule.id for rule in registered.rules] == [policy.rules[0].id]


def test_a_methods_denial_keeps_its_own_headers_under_the_middleware(guard: Guard) -> None:
    """The middleware decided the view's defaults (allowed), the method's cap denies: the
    429 carries the denial's headers, the tightest, not the defaults'."""
    client = Client()
    client.post("/method")
    denied = client.post("/method")
    assert denied.status_code == 429
    assert denied["RateLimit"] == '"sl.1.60s";r=0;t=60'


def test_a_cost_counts_that_many(clock: ManualClock) -> None:
    @fg_django.capped("10/minute", cost=2)
    def heavy(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(clock)), MIDDLEWARE=[]):
        codes = [heavy(RequestFactory().get("/")).status_code for _ in range(6)]
    assert codes == [200] * 5 + [429]


_header_text = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=0, max_size=60
)


@settings(max_examples=examples(30))
@given(spoofs=st.lists(_header_text, min_size=1, max_size=4))
def test_a_spoofed_forwarded_for_never_buys_a_new_budget(spoofs: list[str]) -> None:
    """No trusted proxies: whatever X-Forwarded-For a client writes, it is keyed by its
    peer address, so after its one request every other is denied."""
    with override_settings(
        FREQGUARD_BACKEND=Guard(MemoryBackend(ManualClock(1e9))),
        FREQGUARD_DEFAULT_LIMITS="1/minute",
    ):
        assert _codes(_get("/plain")) == [200]
        for spoof in spoofs:
            assert _codes(_get("/plain", 1, x_forwarded_for=spoof)) == [429]


@settings(max_examples=examples(30))
@given(key=_header_text.filter(lambda text: text.strip() != ""))
def test_any_api_key_is_its_own_budget_and_never_an_error(key: str) -> None:
    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(ManualClock(1e9)))):
        assert _codes(_get("/key", 2, x_api_key=key)) == [200, 429]


def test_a_methods_cap_is_named_after_the_method(guard: Guard) -> None:
    client = Client()
    client.post("/method")
    client.post("/method")
    names = [name for name in guard.policies if name.startswith("django.view.")]
    assert names == ["django.view.tests.integrations.django_site.MethodCapped.post"]


def test_one_capped_on_two_views_gives_each_its_own_budget(clock: ManualClock) -> None:
    once = fg_django.capped("1/minute")

    @once
    def first(request: HttpRequest) -> HttpResponse:
        return HttpResponse("1")

    @once
    def second(request: HttpRequest) -> HttpResponse:
        return HttpResponse("2")

    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(clock)), MIDDLEWARE=[]):
        codes = [view(RequestFactory().get("/")).status_code for view in (first, second)]
    assert codes == [200, 200]


@fg_django.capped("1/minute")
def named_a(request: HttpRequest) -> HttpResponse:
    return HttpResponse("a")


@fg_django.capped("3/minute")
def named_b(request: HttpRequest, pk: int = 0) -> HttpResponse:
    return HttpResponse("b")


def test_two_views_under_one_route_name_keep_their_own_caps(clock: ManualClock) -> None:
    """Route names are not unique in Django: each view keeps its own cap (one view under
    two paths of one name keeps one)."""
    from django.urls import path

    urls = type("urls", (), {})
    urls.urlpatterns = [  # type: ignore[attr-defined]
        path("a", named_a, name="same"),
        path("b", named_b, name="same"),
        path("b/<int:pk>", named_b, name="same"),
    ]
    with override_settings(
        FREQGUARD_BACKEND=Guard(MemoryBackend(clock)),
        ROOT_URLCONF=urls,
        MIDDLEWARE=SITE["MIDDLEWARE"],
    ):
        client = Client()
        a = [client.get("/a").status_code for _ in range(2)]
        b = [client.get(path).status_code for path in ("/b", "/b/1", "/b/2", "/b")]
    assert a == [200, 429]
    assert b == [200, 200, 200, 429]
