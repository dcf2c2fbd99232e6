"""Leases under every exit, an adversarial pass over the integrations' own frames (review).

docs/strategies/concurrency.md promises that a request's lease is held "until the server
closes the response" (WSGI), "until the view has returned, or, for a streamed answer, until
its body has been sent or the response closed" (Django), and that a Celery task's is
"given back when it returns and refunded when it raises"; and it lists the few points
where a Ctrl-C or a stop signal's exit still leaves one held: a block's ``__exit__`` as it
begins, a program's own ``finally`` as ``release`` begins, a program's own code between
``take_lease`` and its ``try``. Design note 97: "A lease holds under a deploy's SIGTERM and a
program's own Ctrl-C"; a gunicorn sync worker exits on SIGINT and SIGQUIT by ``sys.exit``
wherever its main thread is.

The existing sweep of the integrations (``test_lease_sweeps``) stops once the lease is in
the request's list; what the request does with that list afterwards was not swept. Here a
signal is raised (Python's profile hook, as ``test_lease_sweeps`` does) at the points where
the interpreter runs a pending signal's handler, in freqguard's own frames between a
request's take and its body's hand-over, and between a body's close and its release: the
WSGI middleware, the Django middleware and a Django view's cap decided without it, and a
Celery task whose body raised. After each, no lease may be held (the stores are the memory
store: these frames are the integrations', whatever the store).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.integrations._decide import Decider
from freqguard.integrations._held import HeldBody
from tests.conftest import START

#: a vendor's calls in flight, and its rate (high enough for a sweep's requests in one
#: minute of a manual clock, which never moves: moved, it would free a lease left held)
FLIGHT = Policy(
    "llm", Rule("2 concurrent", lease=60, name="flight"), Rule("10000/minute", name="rate")
)


@pytest.fixture(autouse=True)
def _main_thread() -> Iterator[None]:
    """A signal's handler runs in the main thread only; the handlers a test sets put back."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("a signal's handler runs in the main thread only")
    kept = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    yield
    for signum, handler in kept.items():
        signal.signal(signum, handler)


def _exit(signum: int, frame: object) -> None:
    sys.exit(0)  # a worker's own handler: gunicorn's on SIGINT and SIGQUIT, a deploy's SIGTERM


#: the stop signals: Python's own Ctrl-C, and a program's handler that exits
STOPS = [
    pytest.param(signal.SIGINT, signal.default_int_handler, id="ctrl-c"),
    pytest.param(signal.SIGTERM, _exit, id="sigterm-exit"),
]


def _signal_at(
    run: Callable[[], object], code: Any, signum: int, nth: int = 1
) -> BaseException | None:
    """``run()`` with ``signum`` raised as the ``nth`` call of ``code`` begins (a function's
    first instruction, where the interpreter runs a pending signal's handler); what it
    raised, if anything."""
    seen = [0]

    def hook(frame: Any, kind: str, arg: object) -> None:
        if kind == "call" and frame.f_code is code:
            seen[0] += 1
            if seen[0] == nth:
                sys.setprofile(None)
                signal.raise_signal(signum)

    try:
        sys.setprofile(hook)
        run()
    except BaseException as exc:  # what the run raised is the finding
        return exc
    finally:
        sys.setprofile(None)
    return None


def _leaks(
    run: Callable[[], object], held: Callable[[], int], within: Any, free: Callable[[], object]
) -> list[int]:
    """A Ctrl-C at each point of ``run`` inside the calls of ``within`` in turn (as
    ``test_lease_sweeps`` places it): the points after which a lease was held (each then
    freed by ``free()``, so that one leak is not counted at every later point)."""
    from tests.conformance.test_lease_sweeps import _ctrl_c_at

    total = _ctrl_c_at(None, run, within)
    assert total > 0
    found = []
    for event in range(1, total + 1):
        with contextlib.suppress(Exception):  # a request's own error, once interrupted
            _ctrl_c_at(event, run, within)
        if held():
            found.append(event)
            free()
    return found


# -- WSGI ----------------------------------------------------------------------------------


def _wsgi() -> tuple[Guard, Callable[[], None]]:
    """A guard and one request through the WSGI middleware, served as PEP 3333 asks: the
    body iterated, then closed, however that ends."""
    from werkzeug.test import EnvironBuilder

    from freqguard.integrations.wsgi import FreqGuardMiddleware, Limit

    clock = ManualClock(START)
    guard = Guard(MemoryBackend(clock=clock), clock=clock)

    def app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [("content-type", "text/plain")])
        return iter([b"a", b"b"])

    middleware = FreqGuardMiddleware(
        app, guard=guard, limits=[Limit("/llm", rule=FLIGHT, key=lambda request: {})]
    )

    def serve() -> None:
        environ = EnvironBuilder(path="/llm").get_environ()
        body = middleware(environ, lambda status, headers, *exc: None)
        try:
            for _ in body:
                pass
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()

    return guard, serve


def _held(guard: Guard, policy: str = "llm", **ctx: object) -> int:
    state = guard.peek(policy, 1, **ctx).rules[0]
    assert state.rule.rate is not None
    return state.rule.rate.limit - state.remaining


@pytest.mark.parametrize(("signum", "handler"), STOPS)
def test_a_stop_as_a_wsgi_requests_answer_is_made_leaves_no_lease_held(
    signum: int, handler: Any
) -> None:
    """A WSGI app behind the middleware, a route capped at 2 requests in flight; the worker
    is stopped (a dev server's Ctrl-C, gunicorn's SIGINT or SIGQUIT: its handler exits)
    while a request is being decided. Expected (concurrency.md: held "until the server
    closes the response"; note 97): the request's lease goes back as it is cut. Instead the
    middleware takes the lease (``_held.leasing``: into the list the request gives back),
    builds the answer and its headers and calls the app, and only then enters the ``try``
    that gives it back: a stop in between, here as ``Decider.answer`` begins, leaves one of
    the two slots held for the rule's 60 s (27 of the 288 points of the middleware's call
    in the sweep below)."""
    signal.signal(signum, handler)
    guard, serve = _wsgi()
    serve()
    raised = _signal_at(serve, Decider.answer.__code__, signum)
    assert isinstance(raised, (KeyboardInterrupt, SystemExit))
    assert _held(guard) == 0, "a stop as the WSGI request's answer was made left its lease"


@pytest.mark.parametrize(("signum", "handler"), STOPS)
def test_a_stop_as_a_wsgi_bodys_release_begins_leaves_no_lease_held(
    signum: int, handler: Any
) -> None:
    """The same worker stopped as the server closes a sent body. Expected: the lease goes
    back. Instead ``HeldBody.close`` marks itself released and calls ``guard.release``: a
    stop as ``release`` begins, before its hold keeps one back, leaves the release unsent,
    and nothing sends it again. The docs leave that point to "a ``finally`` of your own";
    this ``finally`` is freqguard's, and ``guard.lease``'s block and a Celery task's
    release (note 106) send such a release again."""
    signal.signal(signum, handler)
    guard, serve = _wsgi()
    serve()
    raised = _signal_at(serve, Guard.release.__code__, signum)
    assert isinstance(raised, (KeyboardInterrupt, SystemExit))
    assert _held(guard) == 0, "a stop as the WSGI body's release began left its lease"


@pytest.mark.slow
def test_a_ctrl_c_anywhere_in_a_wsgi_request_leaves_no_lease_held() -> None:
    """The same at every point of the middleware's call and of the body's close (the
    server's own frames aside: a stop between its call of the app and its ``try`` is the
    server's)."""
    from freqguard.integrations.wsgi import FreqGuardMiddleware

    signal.signal(signal.SIGINT, signal.default_int_handler)
    guard, serve = _wsgi()
    serve()
    held, free = partial(_held, guard), partial(guard.reset, "llm")
    assert _leaks(serve, held, FreqGuardMiddleware.__call__, free) == []
    assert _leaks(serve, held, HeldBody.close, free) == []


# -- Django --------------------------------------------------------------------------------


@contextlib.contextmanager
def _django(alone: bool = False) -> Iterator[tuple[Guard, Callable[[], None]]]:
    """The test site's guard, and one GET of its streamed leased view (one concurrent
    request a client) through Django's test client, its body read to its end (the client
    closes the response then); ``alone``: without freqguard's middleware (the view's cap
    decides by itself)."""
    pytest.importorskip("django")
    from django.test import Client, override_settings

    from freqguard.integrations import django as fg_django
    from tests.integrations import django_site

    clock = ManualClock(START)
    guard = Guard(MemoryBackend(clock=clock), clock=clock)
    middleware = django_site.SETTINGS["MIDDLEWARE"]
    if alone:
        middleware = [m for m in middleware if not m.startswith("freqguard.")]

    def get() -> None:
        answer: Any = Client().get("/streamed")
        b"".join(answer.streaming_content)

    with override_settings(FREQGUARD_BACKEND=guard, MIDDLEWARE=middleware):
        try:
            yield guard, get
        finally:
            fg_django.close()


def _django_held(guard: Guard) -> int:
    (name,) = [n for n in guard.policies if n.endswith("streamed")]
    return _held(guard, name, client="127.0.0.1")


@pytest.mark.parametrize("alone", [False, True], ids=["middleware", "view-cap-alone"])
@pytest.mark.parametrize(("signum", "handler"), STOPS)
def test_a_stop_as_a_django_requests_answer_is_made_leaves_no_lease_held(
    signum: int, handler: Any, alone: bool
) -> None:
    """A Django view capped at one request in flight a client, streamed; the worker is
    stopped (runserver's Ctrl-C, a WSGI worker's exit) while a request is being decided.
    Expected (concurrency.md: held "until its body has been sent or the response closed"):
    the lease goes back as the request is cut. Instead the middleware (and a view's cap
    decided without it, ``_run_alone``) takes the lease, then notes the answer on the
    request (``noted``, ``taken``) before ``answered`` enters the ``try`` that gives it
    back: a stop as ``Decider.answer`` begins leaves it held for 60 s (40 of the 425 points
    of the middleware's call in the sweep below)."""
    signal.signal(signum, handler)
    with _django(alone) as (guard, get):
        get()
        raised = _signal_at(get, Decider.answer.__code__, signum)
        assert isinstance(raised, (KeyboardInterrupt, SystemExit))
        assert _django_held(guard) == 0, "a stop as the answer was made left its lease"


@pytest.mark.parametrize(("signum", "handler"), STOPS)
def test_a_stop_as_a_django_streamed_bodys_release_begins_leaves_no_lease_held(
    signum: int, handler: Any
) -> None:
    """The same view's body sent, and the worker stopped as the response closes it.
    Expected: the lease goes back. Instead ``release_each`` catches the stop that cut
    ``guard.release`` as it began, raises it once the others were tried, and never sends
    the release it cut; the body is marked released, and the request's own close
    (``_Closing``) finds nothing to do (20 of the 194 points of the body's close)."""
    signal.signal(signum, handler)
    with _django() as (guard, get):
        get()
        raised = _signal_at(get, Guard.release.__code__, signum)
        assert isinstance(raised, (KeyboardInterrupt, SystemExit))
        assert _django_held(guard) == 0, "a stop as the body's release began left its lease"


@pytest.mark.slow
def test_a_ctrl_c_anywhere_in_a_django_request_leaves_no_lease_held() -> None:
    """The same at every point of the middleware's call and of the streamed body's close."""
    from freqguard.integrations.django import FreqGuardMiddleware

    signal.signal(signal.SIGINT, signal.default_int_handler)
    with _django() as (guard, get):
        get()
        (name,) = [n for n in guard.policies if n.endswith("streamed")]
        held, free = partial(_django_held, guard), partial(guard.reset, name, client="127.0.0.1")
        assert _leaks(get, held, FreqGuardMiddleware.__call__, free) == []
        assert _leaks(get, held, HeldBody.close, free) == []


# -- Celery --------------------------------------------------------------------------------


@pytest.fixture
def failing() -> Iterator[tuple[Guard, Callable[[], object]]]:
    """A guard of a vendor's leases by account, and a run of a capped task whose body
    raises (the vendor failed), as a worker's pool runs it."""
    celery = pytest.importorskip("celery")
    from freqguard.integrations.celery import capped_task
    from tests.integrations.celery_rig import run_as_worker

    app = celery.Celery("capped", broker="memory://", backend="cache+memory://")
    app.conf.task_always_eager = True
    clock = ManualClock(START)
    vendor = Policy(
        "vendor",
        Rule("2 concurrent", lease=60, by="account", name="flight"),
        Rule("10000/minute", by="account", name="rate"),
    )
    guard = Guard(MemoryBackend(clock=clock), [vendor], clock=clock)

    @capped_task(app, vendor, guard=guard, name="review.failing")
    def push(account: str) -> None:
        raise ValueError("the vendor failed")

    yield guard, lambda: run_as_worker(push, "t1", account="a")
    app.close()


def _soft_time_limit(signum: int, frame: Any) -> None:
    """Celery's soft time limit: billiard's handler of SIGUSR1 in a prefork child."""
    from billiard.pool import soft_timeout_sighandler  # type: ignore[import-untyped]

    soft_timeout_sighandler(signum, frame)


@pytest.mark.parametrize(
    ("signum", "handler", "where"),
    [
        *(pytest.param(*stop.values, "_Cap", id=f"{stop.id}-at-_Cap.refund") for stop in STOPS),
        pytest.param(signal.SIGUSR1, _soft_time_limit, "_Cap", id="soft-time-limit-at-_Cap.refund"),
        # the soft time limit's exception there is caught, logged, and the lease released
        *(pytest.param(*stop.values, "Guard", id=f"{stop.id}-at-Guard.refund") for stop in STOPS),
    ],
)
def test_a_stop_as_a_failed_tasks_refund_begins_leaves_no_lease_held(
    failing: tuple[Guard, Callable[[], object]], signum: int, handler: Any, where: str
) -> None:
    """A Celery task capped at 2 calls in flight whose body raised (the vendor failed),
    and the worker stopped (a solo worker's Ctrl-C, a deploy's SIGTERM that exits) or its
    soft time limit fired as the run gives the call back. Expected (docs/celery.md:
    "refunded whole when it raises", the soft time limit "never leaves one held"; note
    106 closed the same point of the release once the body returned): the lease goes
    back. Instead ``run_leased`` calls ``self.refund(task, [decision])``, whose ``try``
    around ``guard.refund`` catches ``ConfigError`` and ``Exception``, then releases the
    lease if the refund was refused: a stop, or ``SoftTimeLimitExceeded`` (an
    ``Exception``), as ``_Cap.refund`` begins, before that ``try``, goes out of the task
    with nothing given back; a Ctrl-C or an exit as ``Guard.refund`` begins goes past
    ``except Exception`` likewise. The lease is held for the rule's 60 s."""
    from freqguard.integrations.celery import _Cap

    guard, run = failing
    signal.signal(signum, handler)
    code = (_Cap.refund if where == "_Cap" else Guard.refund).__code__
    raised = _signal_at(run, code, signum)
    assert raised is not None
    assert not isinstance(raised, ValueError), raised  # the stop, not the body's error
    assert _held(guard, "vendor", account="a") == 0, "a stop as the refund began left its lease"


@pytest.mark.slow
def test_a_ctrl_c_anywhere_in_a_failed_tasks_run_leaves_no_lease_held(
    failing: tuple[Guard, Callable[[], object]],
) -> None:
    """The same at every point of ``run_leased`` whose body raised."""
    from freqguard.integrations.celery import _Cap

    guard, task = failing
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def run() -> None:
        with contextlib.suppress(ValueError):  # the body's own failure
            task()

    held = partial(_held, guard, "vendor", account="a")
    free = partial(guard.reset, "vendor", account="a")
    assert _leaks(run, held, _Cap.run_leased, free) == []
