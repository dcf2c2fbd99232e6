"""Django's leases: a view capped by a concurrency rule holds its lease while it runs, and
a streamed answer until its body is sent or it is closed; an answer an outer middleware
drops (under the test client or Django's own ASGI handler), or hostile requests of any
kind, leave no lease held; a lease that cannot go back never fails the request's close.
The memory backend, time on a ManualClock; the rig is ``django_rig.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from django.test import AsyncClient, Client, RequestFactory, override_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import Guard, ManualClock, MemoryBackend
from tests.conftest import examples
from tests.integrations.django_rig import SITE, _aget, _get


def test_the_middleware_holds_a_lease_while_the_view_runs(clock: ManualClock) -> None:
    """A view capped by a concurrency rule: a request made while it runs is refused, and
    the lease is given back once it has answered (sync and async handlers)."""
    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(clock))):
        first, again = _get("/leased", times=2)
        assert [first.content, again.content] == [b"429", b"429"]  # given back each time
        afirst, aagain = _aget("/aleased", times=2)
        assert [afirst.content, aagain.content] == [b"429", b"429"]


def test_a_streamed_answer_holds_its_lease_until_its_body_is_sent_or_closed(
    clock: ManualClock,
) -> None:
    """The view returns before its body is sent: the lease is held until the body has been
    sent (or the response closed), not given back when the view returns."""
    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(clock))):
        client = Client()
        first: Any = client.get("/streamed")
        assert first.status_code == 200
        assert client.get("/streamed").status_code == 429  # the first is still in flight
        assert b"".join(first.streaming_content) == b"ab"  # sent: its lease back
        second = client.get("/streamed")
        assert second.status_code == 200
        second.close()  # closed before its body was sent (the client went away)
        third: Any = client.get("/streamed")
        assert b"".join(third.streaming_content) == b"ab"

        async def run() -> list[int]:
            aclient = AsyncClient()
            afirst: Any = await aclient.get("/astreamed")
            codes = [afirst.status_code, (await aclient.get("/astreamed")).status_code]
            assert b"".join([c async for c in afirst.streaming_content]) == b"ab"
            return [*codes, (await aclient.get("/astreamed")).status_code]

        assert asyncio.run(run()) == [200, 429, 200]


OUTER = ["tests.integrations.django_site.FailsOnStreamed", *SITE["MIDDLEWARE"]]


@pytest.mark.parametrize("status", ["500", "404", "403"])
def test_a_streamed_answer_an_outer_middleware_drops_gives_its_lease_back(
    clock: ManualClock, status: str
) -> None:
    """A middleware outside freqguard's fails once a streamed answer has passed: Django
    answers the error and drops the streamed response without closing it, so the lease
    tied to its closing stayed held until it lapsed. Given back when Django's request
    finishes (sync and async handlers); an ``Http404`` or ``PermissionDenied``, which
    Django answers without ``got_request_exception``, left it to lapse."""
    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(clock)), MIDDLEWARE=OUTER):
        client = Client(raise_request_exception=False)
        assert client.get("/streamed", headers={"X-Fail": status}).status_code == int(status)
        answer: Any = client.get("/streamed")
        assert answer.status_code == 200  # the dropped one's lease was given back
        assert b"".join(answer.streaming_content) == b"ab"

        async def run() -> list[int]:
            aclient = AsyncClient(raise_request_exception=False)
            failed = await aclient.get("/astreamed", headers={"X-Fail": status})
            again: Any = await aclient.get("/astreamed")
            assert b"".join([c async for c in again.streaming_content]) == b"ab"
            return [failed.status_code, again.status_code]

        assert asyncio.run(run()) == [int(status), 200]


_FAILS = st.sampled_from(["", "500", "404", "403"]) | st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40
)


@settings(max_examples=examples(30), deadline=None)
@given(steps=st.lists(st.tuples(_FAILS, st.booleans()), min_size=1, max_size=8))
def test_hostile_requests_never_leave_a_streamed_lease_held(
    steps: list[tuple[str, bool]],
) -> None:
    """Requests drawn with any ``X-Fail`` (the outer middleware's failures, junk) on a
    streamed view of one lease, each answer read to its end or closed early: each is
    answered as the model says (200, or the failure's status; never a 429, since every
    earlier answer was closed and gave its lease back), and none leaves its lease held."""
    clock = ManualClock(1_700_000_000.0)
    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(clock)), MIDDLEWARE=OUTER):
        client = Client(raise_request_exception=False)
        for fail, read in steps:
            answer: Any = client.get("/streamed", headers={"X-Fail": fail})
            expected = int(fail) if fail in ("500", "404", "403") else 200
            assert answer.status_code == expected
            if expected == 200 and read:
                assert b"".join(answer.streaming_content) == b"ab"
            else:
                answer.close()
        last: Any = client.get("/streamed")
        assert last.status_code == 200
        last.close()


@pytest.mark.parametrize("path", ["/streamed", "/astreamed"])
@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume synchronous")
def test_a_dropped_streamed_answer_gives_its_lease_back_under_djangos_asgi_handler(
    clock: ManualClock, path: str
) -> None:
    """The same through Django's own ASGI handler (what a server runs, not the test
    client): the request's tasks, and the response closed in a thread."""
    from django.core.handlers.asgi import ASGIHandler

    async def call(application: ASGIHandler, fail: str) -> int:
        headers = [(b"host", b"testserver"), (b"x-fail", fail.encode())]
        scope: dict[str, Any] = {"type": "http", "method": "GET", "path": path}
        scope |= {"headers": headers, "query_string": b"", "client": ("127.0.0.1", 1)}
        sent: list[Mapping[str, Any]] = []
        requested = False

        async def receive() -> dict[str, Any]:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await asyncio.Event().wait()  # no disconnect: the handler cancels this
            raise AssertionError("never")

        async def send(message: Mapping[str, Any]) -> None:
            sent.append(message)

        await application(scope, receive, send)
        return int(sent[0]["status"])

    async def run() -> list[int]:
        application = ASGIHandler()
        return [await call(application, "404"), await call(application, "")]

    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(clock)), MIDDLEWARE=OUTER):
        assert asyncio.run(run()) == [404, 200]


def test_a_dropped_answer_whose_leases_cannot_go_back_never_fails_the_requests_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Django closes the request as the server closes its answer: a release that fails
    there (the store down) is logged, never raised into the server (review); the request's
    own close still runs, and a DRF Request's is its Django request's."""
    from rest_framework.request import Request

    from freqguard.integrations._django_leases import _noted

    class Failing:
        def close(self) -> None:
            raise ConnectionError("the store is down")

    request = RequestFactory().get("/")
    closed: list[bool] = []
    request.close = lambda: closed.append(True)  # type: ignore[method-assign]
    _noted(Request(request), Failing())
    _noted(request, Failing())
    request.close()
    assert closed == [True]
    assert caplog.text.count("could not be given back") == 2


def test_a_view_that_gives_its_own_lease_back_answers_as_it_chose(clock: ManualClock) -> None:
    """Review: a view that releases its lease itself (``request.freqguard.decision``, once
    its work is done) had the middleware release it again: "already refunded or released"
    raised in place of its answer."""
    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(clock))):
        answers = _get("/released", times=2)
        assert [a.status_code for a in answers] == [200, 200]
        assert answers[0].content == b"released"
