"""A generator a leased ``@capped`` call returns is returned as it is (the call's lease
around the call): holding it under a lease of its own had a service over a capped
repository deny itself (two leases a stream) and a generator handed back left unclosed by
its caller's close; and E007 sees a class's named cap under a cap around its
``as_view()``. A review's findings, written failing first."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from freqguard import Guard, ManualClock, Policy, Rule, capped
from tests.conftest import START

pytest.importorskip("django")
from tests.integrations import django_site

django_site.setup()
from django.core import checks  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from django.views import View  # noqa: E402

from freqguard.integrations import django as fg_django  # noqa: E402


def _one_at_a_time() -> Guard:
    return Guard(
        policies=[Policy("db", Rule("1 concurrent", lease=60, name="cc"))],
        clock=ManualClock(START),
    )


def _free(guard: Guard) -> int:
    return guard.peek("db").rules[0].remaining


def _traced(func: Callable[..., Any]) -> Callable[..., Any]:
    """A tracing wrapper, as OpenTelemetry's or a retry library's: it hides what it wraps."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


# -- 1. a capped call returning a capped generator of the same policy holds two leases --


def test_a_service_returning_a_capped_repositorys_generator_is_not_denied_by_itself() -> None:
    """The usual layering: a repository's generator function capped by the "db" policy
    (one lease, from its first row to its end), and a service function capped by the
    same policy that returns the repository's generator. Before a3f47e6 iterating the
    service's answer held one lease (the repository's) and gave the rows. Now the service's
    call wraps the generator it returns in a lease of its own, taken at the first step,
    and the repository's generator asks for a second one inside it: under "1 concurrent"
    every iteration is denied by itself (CapExceeded, with nobody else in flight); under
    "N concurrent" each stream holds two of the N."""
    guard = _one_at_a_time()

    @capped("db", guard=guard)
    def rows() -> Iterator[int]:
        yield _free(guard)

    @capped("db", guard=guard)
    def report() -> Iterator[int]:
        return rows()

    assert list(report()) == [0]  # got CapExceeded: policy 'db' denied by cc.1.60s
    assert _free(guard) == 1


# -- 2. closing what the call returned no longer closes the generator it returned --------


def test_closing_a_returned_generator_closes_the_one_the_call_gave() -> None:
    """A capped call that hands back a generator it was given (a routing or logging step:
    the design notes' reason not to refuse them) returned that very generator before
    a3f47e6; now it returns a wrapper that first steps it under a lease. Closed by its
    caller (``contextlib.closing``, a ``with`` of a streamed response, a consumer that
    stops early) before its first step, the wrapper never started, so ``close()`` does not
    reach the generator inside: a started source (a cursor opened, a file read) stays
    suspended, its ``finally`` not run, until garbage collection, where it ran at once
    before."""
    guard = _one_at_a_time()
    cleaned: list[str] = []

    def source() -> Generator[int, None, None]:
        try:
            yield 1
            yield 2
        finally:
            cleaned.append("cursor closed")

    rows = source()
    assert next(rows) == 1  # the header row read before routing

    @capped("db", guard=guard)
    def route(given: Generator[int, None, None]) -> Generator[int, None, None]:
        return given

    routed = route(rows)
    routed.close()
    assert cleaned == ["cursor closed"]  # got []
    assert inspect.getgeneratorstate(rows) == inspect.GEN_CLOSED  # got GEN_SUSPENDED
    assert _free(guard) == 1


# -- 3. the async paths: the generator returned runs unleased -------------------------


# -- 4. E007 misses a named class cap under a cap around as_view() -----------------------


@fg_django.capped("2/minute", name="review-h-otp")
class OtpView(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("sent")


@fg_django.capped("3/minute", name="review-h-otp")
def resend_otp(request: HttpRequest) -> HttpResponse:
    return HttpResponse("sent again")


urlpatterns = [
    path("otp/", fg_django.capped("100/hour")(OtpView.as_view())),  # a per-URL cap too
    path("resend/", resend_otp),
]


def test_e007_still_sees_a_named_class_cap_under_a_cap_around_as_view() -> None:
    """``OtpView`` is capped with ``name="review-h-otp"`` at 2/minute, ``resend_otp`` names
    the same budget at 3/minute: E007's conflict, a 500 at the second view requested. The
    URLconf adds a per-URL cap around ``OtpView.as_view()``. a3f47e6 made the walk read
    the callback's cap first (``_freqguard_cap`` of the wrapper, the unnamed "100/hour")
    instead of ``view_class``'s, and takes one cap a view: the class's named cap is no
    longer noted, and E007 says nothing (before the commit it was said). Both caps run
    (the wrapper's, and the class's around ``dispatch``)."""
    with override_settings(ROOT_URLCONF=__name__):
        client = Client(raise_request_exception=False)
        codes = [client.get("/resend/").status_code, client.get("/otp/").status_code]
        found = [m.msg for m in checks.run_checks() if m.id == "freqguard.E007"]
    assert codes == [200, 500]  # the budget's other rules met at a request
    assert [m for m in found if "review-h-otp" in m], found  # got []
