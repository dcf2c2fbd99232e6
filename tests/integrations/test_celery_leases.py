"""A task of a policy that holds leases (a concurrency rule: calls in flight to a vendor)
holds one while its body runs, under every exit: its hit was a ConfigError at every run
("take its leases with guard.lease"), so a concurrency cap on a task could not be had.
Given back when the body returns (its rate rules keep the call), refunded whole when it
raises (as a failing body's hit is), never taken for a task that is denied; and under
every exit an adversarial pass tried (a deploy, a Ctrl-C, Celery's soft time limit, each
raised by the profile hook at one named point, on a ManualClock)."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import CodeType
from typing import Any

import pytest

pytest.importorskip("celery")
from billiard.exceptions import SoftTimeLimitExceeded  # type: ignore[import-untyped]
from billiard.pool import soft_timeout_sighandler  # type: ignore[import-untyped]
from celery import Celery

from freqguard import CapExceeded, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.integrations.celery import capped_task
from tests.conftest import START
from tests.integrations.celery_rig import app as app
from tests.integrations.celery_rig import run_as_worker

VENDOR = Policy(
    "vendor",
    Rule("2 concurrent", lease=60, by="account", name="flight"),
    Rule("10/minute", by="account", name="rate"),
)


@pytest.fixture
def guard() -> Guard:
    return Guard(MemoryBackend(), [VENDOR], clock=ManualClock(START))


def _left(guard: Guard) -> dict[str, int]:
    return {state.rule.id: state.remaining for state in guard.peek("vendor", account="a").rules}


def test_a_task_holds_a_lease_while_its_body_runs_and_gives_it_back(
    app: Celery, guard: Guard
) -> None:
    seen: list[dict[str, int]] = []

    @capped_task(app, VENDOR, guard=guard, shared=False, name="leased.push")
    def push(account: str) -> str:
        seen.append(_left(guard))
        return "pushed"

    assert [push.delay(account="a").get() for _ in range(3)] == ["pushed"] * 3
    assert seen == [{"flight": 1, "rate": 9}, {"flight": 1, "rate": 8}, {"flight": 1, "rate": 7}]
    assert _left(guard) == {"flight": 2, "rate": 7}  # the calls counted, the leases back


def test_a_task_with_every_lease_held_elsewhere_is_denied_and_its_body_never_runs(
    app: Celery, guard: Guard
) -> None:
    ran: list[str] = []
    held = [guard.take_lease("vendor", account="a") for _ in range(2)]

    @capped_task(app, VENDOR, guard=guard, shared=False, name="leased.dropped", on_denied="drop")
    def push(account: str) -> str:
        ran.append(account)
        return "pushed"

    dropped = push.delay(account="a").get()
    assert dropped["dropped"] is True
    assert dropped["denied_by"] == ["flight"]
    assert ran == []
    for decision in held:
        guard.release(decision)
    assert push.delay(account="a").get() == "pushed"


def test_a_failing_body_gives_back_its_lease_and_its_call(app: Celery, guard: Guard) -> None:
    @capped_task(app, VENDOR, guard=guard, shared=False, name="leased.failing", on_denied="raise")
    def push(account: str) -> str:
        raise ConnectionError("vendor down")

    for _ in range(3):  # more than the leases: each went back
        with pytest.raises(ConnectionError):
            push.delay(account="a").get()
    assert _left(guard) == {"flight": 2, "rate": 10}


def test_a_denial_raises_as_asked(app: Celery, guard: Guard) -> None:
    held = [guard.take_lease("vendor", account="a") for _ in range(2)]

    @capped_task(app, VENDOR, guard=guard, shared=False, name="leased.raised", on_denied="raise")
    def push(account: str) -> str:
        return "pushed"

    with pytest.raises(CapExceeded, match="flight"):
        push.delay(account="a").get()
    assert len(held) == 2


# -- under every exit (an adversarial pass, design note 106) ------------------------------


@pytest.fixture
def main_thread() -> Iterator[None]:
    """A signal's handler runs in the main thread only; SIGINT's and SIGUSR1's put back."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("a signal's handler runs in the main thread only")
    usr1 = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGUSR1, usr1)


def _held(guard: Guard) -> int:
    return 2 - guard.peek("vendor", account="a").rules[0].remaining


def _signal_at(
    run: Callable[[], object], fires: Callable[[Any, str], bool], signum: int
) -> BaseException | None:
    """``run()`` with ``signum`` raised at the first profile event where the interpreter
    runs a pending signal's handler (a function's call, or a call into C returning) for
    which ``fires(frame, kind)`` holds (``fires`` is shown every event, returns too); what
    the run raised, if anything."""

    def hook(frame: Any, kind: str, arg: object) -> None:
        if fires(frame, kind) and kind in ("call", "c_return"):
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


def _nth_store_call(n: int, *, after: bool) -> Callable[[Any, str], bool]:
    """Fires as the ``n``-th call of the memory store's ``execute_many`` begins (``after``
    False: nothing applied yet), or at the first point after it returned (``after``: its
    write made, the answer not yet the caller's)."""
    code: CodeType = MemoryBackend.execute_many.__code__
    seen, returned = [0], [False]

    def fires(frame: Any, kind: str) -> bool:
        if frame.f_code is code and kind == "call":
            seen[0] += 1
            return seen[0] == n and not after
        if frame.f_code is code and kind == "return" and seen[0] == n:
            returned[0] = True
            return False
        return after and returned[0]

    return fires


def test_a_deploy_that_gives_the_tasks_policy_a_concurrency_rule_is_seen_at_the_next_run(
    app: Celery, guard: Guard
) -> None:
    """``_Cap`` chooses between ``hit`` and ``take_lease`` by the policy it resolved at
    decoration (``self.policy.leases``), not the one the guard decides by now. A deploy
    that gives the policy a concurrency rule (the vendor now caps calls in flight) made
    every later run raise ``ConfigError: policy 'feed' has a concurrency rule: take its
    leases with guard.lease(...)`` until the workers restarted. The ASGI middleware had the
    same flag and was fixed for it (design note 101); a task should take a lease at its
    next run, held while its body runs."""
    guard.add_policy(Policy("feed", Rule("10000/minute", by="account", name="rate")))
    seen: list[int] = []

    @capped_task(app, "feed", guard=guard, shared=False, name="exits.feed", on_denied="raise")
    def pull(account: str) -> str:
        seen.append(guard.peek("feed", account=account).rules[0].remaining)
        return "pulled"

    assert run_as_worker(pull, "before", account="a") == "pulled"
    leased = Policy(
        "feed",
        Rule("1 concurrent", lease=60, by="account", name="flight"),
        Rule("10000/minute", by="account", name="rate"),
    )
    guard.add_policy(leased, replace=True)  # the deploy

    assert run_as_worker(pull, "after", account="a") == "pulled"
    assert seen[-1] == 0  # its lease held while the body ran
    assert guard.peek("feed", account="a").rules[0].remaining == 1  # and given back


def test_a_ctrl_c_as_the_release_begins_after_the_body_returned_gives_the_lease_back(
    app: Celery, guard: Guard, main_thread: None
) -> None:
    """The body returned; ``run_leased`` calls ``guard.release(decision)`` inside ``try:
    ... except Exception``. A Ctrl-C (or a SIGTERM handler's ``SystemExit``: a deploy
    stopping a solo worker) that lands as ``release`` begins is raised before release's
    own ``try`` (test_lease_sweeps: "a Ctrl-C as one of them begins is its caller's"), and
    its caller here neither catches it nor gives the lease back: it stays held for the
    rule's 60 s. ``guard.take_lease`` and ``LeaseBlock`` give back what an interrupt
    caught between their steps; so should the task's run."""

    @capped_task(app, VENDOR, guard=guard, shared=False, name="exits.ctrl_c")
    def push(account: str) -> str:
        return "pushed"

    release = Guard.release.__code__
    raised = _signal_at(
        lambda: run_as_worker(push, "t1", account="a"),
        lambda frame, kind: frame.f_code is release and kind == "call",
        signal.SIGINT,
    )
    assert isinstance(raised, KeyboardInterrupt)
    assert _held(guard) == 0, "the lease of a task whose body returned is still held"


def test_a_soft_time_limit_as_the_take_is_answered_leaves_no_lease_held(
    app: Celery, guard: Guard, main_thread: None
) -> None:
    """Celery's ``soft_time_limit`` is a SIGUSR1 whose handler (billiard's
    ``soft_timeout_sighandler``, set in every prefork child) raises
    ``SoftTimeLimitExceeded``, an ``Exception``, wherever the worker's main thread is. The
    guard holds back SIGINT, SIGTERM, SIGQUIT, SIGABRT and SIGHUP while a lease's take is
    out (``_io._HELD``), not SIGUSR1: landing once the store applied the take, before
    ``take_lease`` returned, it leaves a lease taken that nobody holds; the body never
    ran, and one of the vendor's two slots is gone for the rule's 60 s."""
    signal.signal(signal.SIGUSR1, soft_timeout_sighandler)
    ran: list[str] = []

    @capped_task(app, VENDOR, guard=guard, shared=False, name="exits.soft_take", soft_time_limit=30)
    def push(account: str) -> str:
        ran.append(account)
        return "pushed"

    raised = _signal_at(
        lambda: run_as_worker(push, "t2", account="a"),
        _nth_store_call(1, after=True),
        signal.SIGUSR1,
    )
    assert isinstance(raised, SoftTimeLimitExceeded)
    assert ran == []
    assert _held(guard) == 0, "a soft time limit during the take left its lease held"


def test_a_soft_time_limit_as_the_release_goes_leaves_no_lease_held(
    app: Celery, guard: Guard, main_thread: None
) -> None:
    """The body returned and the release is on its way to the store when the soft time
    limit lands (SIGUSR1, not held back: ``_io._HELD``): ``SoftTimeLimitExceeded`` comes
    out of ``guard.release`` before the store applied anything, ``run_leased`` logs
    "release failed" and returns, and the lease is held for the rule's 60 s though nothing
    was given back. A Ctrl-C there is held back until the release is answered; the
    task's own time limit should not cost the vendor a slot either."""
    signal.signal(signal.SIGUSR1, soft_timeout_sighandler)

    @capped_task(
        app, VENDOR, guard=guard, shared=False, name="exits.soft_release", soft_time_limit=30
    )
    def push(account: str) -> str:
        return "pushed"

    _signal_at(
        lambda: run_as_worker(push, "t3", account="a"),
        _nth_store_call(2, after=False),  # the take's, then the release's
        signal.SIGUSR1,
    )
    assert _held(guard) == 0, "a soft time limit during the release left the lease held"
