"""Leases held by the integrations under exits the other lease tests left out, each a
failing test of an adversarial review before its fix: a lease a request or a task took is
given back exactly once, whatever ends it (docs/strategies/concurrency.md, "Calls and
requests in flight").

Time is pinned (``ManualClock``): no lease lapses while a test runs, so what ``peek``
reports held is held.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
from tests.conftest import START


@pytest.fixture
def app() -> Iterator[Any]:
    """The Celery app of ``celery_rig`` (eager, on the in-memory broker)."""
    celery = pytest.importorskip("celery")
    made = celery.Celery(
        "capped", broker="memory://", backend="cache+memory://", set_as_current=False
    )
    made.conf.task_always_eager = True
    made.conf.task_store_eager_result = False
    yield made
    made.close()


def _vendor(limit: int) -> Policy:
    return Policy(
        "vendor",
        Rule(f"{limit} concurrent", lease=60, by="account", name="flight"),
        Rule("10/minute", by="account", name="rate"),
    )


def test_a_task_that_raises_after_a_deploy_gives_its_lease_back(app: Any) -> None:
    """A task's body raises while a deploy raised the concurrency rule's limit (the rule
    named, so the lease is the same count: docs/strategies/concurrency.md). ``run_leased``
    gives a failing body's lease back by ``guard.refund(decision)`` alone, which a deploy
    since the take refuses (its rate units are counted by the policy as it is now); the
    refusal is logged and nothing else goes back: the lease stays held until it lapses, a
    call in flight that ended long ago. ``release(decision)`` gives it back across the
    deploy, as every other holder of a lease does (``guard.lease``'s block, the HTTP
    integrations)."""
    from freqguard.integrations.celery import capped_task
    from tests.integrations.celery_rig import run_as_worker

    guard = Guard(MemoryBackend(), [_vendor(2)], clock=ManualClock(START))

    @capped_task(app, "vendor", guard=guard, name="review.push")
    def push(account: str) -> str:
        guard.add_policy(_vendor(3), replace=True)  # a deploy while the body runs
        raise RuntimeError("the vendor failed")

    with pytest.raises(RuntimeError, match="the vendor failed"):
        run_as_worker(push, "t1", account="a")
    flight = guard.peek("vendor", account="a").rules[0]
    assert flight.rule.name == "flight"
    assert flight.remaining == 3  # every lease free: the task is over


def test_a_flask_request_a_named_cap_refuses_gives_back_its_leased_routes_rate_units() -> None:
    """A route whose default limits hold a lease and count a rate, and a view's named cap
    (``name=``: decided in the view, after them) that refuses the second request. "If it
    refuses, what the route's hit took is given back" (docs/integrations.md), as it is for
    a route without a concurrency rule: a refused request counts nothing. The extension's
    ``give_back`` skips every decision that holds a lease (``decision not in held``), to
    leave it to the teardown's release, which gives back the lease only: the refused
    request's unit stays counted in the route's rate rule (Django's ``give_back`` refunds a
    lease's decision whole, its rate units too: docs/django.md)."""
    pytest.importorskip("flask")
    from flask import Flask

    from freqguard.integrations.flask import FreqGuard

    guard = Guard(clock=ManualClock(START))
    app = Flask(__name__)
    app.config["FREQGUARD_DEFAULT_LIMITS"] = [Rule("2 concurrent", lease=60), "10/minute"]
    fg = FreqGuard(app, guard=guard)

    @app.get("/push")
    @fg.capped("1/minute", name="shared")
    def push() -> str:
        return "pushed"

    client = app.test_client()
    assert [client.get("/push").status_code for _ in range(2)] == [200, 429]
    left = {s.rule.id: s.remaining for s in guard.peek("flask.push", client="127.0.0.1").rules}
    assert left == {"default.cc.2.60s": 2, "default.sl.10.60s": 9}  # the 429 counted nothing


def test_a_flask_streamed_answer_deduct_when_refuses_holds_its_lease_while_it_streams() -> None:
    """A view capped at one request in flight and a rate, with ``deduct_when`` counting
    only 200s (Flask-Limiter's idiom: failed calls are not charged), answers a streamed
    404. The extension holds a streamed answer's lease "until the server closes its body"
    (docs/strategies/concurrency.md); ``deducted`` runs as the response is made and
    refunds the decision whole, its lease too, before the first byte is sent: while the
    first answer still streams the lease reads free and a second request is admitted, two
    in flight under ``1 concurrent``. What ``deduct_when`` declines to count is the call,
    the rate units; the request is in flight all the same until its body is closed.
    (Left failing: giving back the rate units at once and the lease at the close needs a
    refund that spares the lease, or the release turned into the refund; a design call.)"""
    pytest.importorskip("flask")

    from flask import Flask, Response

    from freqguard.integrations.flask import FreqGuard

    guard = Guard(clock=ManualClock(START))
    app = Flask(__name__)
    fg = FreqGuard(app, guard=guard)

    @app.get("/stream")
    @fg.capped(
        [Rule("1 concurrent", lease=60), "10/minute"],
        name="llm",
        deduct_when=lambda response: response.status_code == 200,
    )
    def stream() -> Response:
        def body() -> Iterator[bytes]:
            yield b"a"
            yield b"b"

        return Response(body(), status=404)

    client = app.test_client()
    first = client.get("/stream", buffered=False)  # its body not sent yet: in flight
    assert first.status_code == 404
    second = client.get("/stream", buffered=False)
    second.close()
    first.close()
    assert second.status_code == 429  # one in flight already


def test_a_flask_request_refused_after_a_deploy_is_a_429_and_gives_its_lease_back() -> None:
    """As above, a leased route and a named cap that refuses; a deploy of the route's
    policy (its rate raised) lands between the route's hit and the view's cap (a
    ``before_request`` after the extension's). The give-back's refund of the route's
    decision is refused (its rate units are the new policy's): it must stay best effort,
    the request answered 429 and its lease released at the teardown (by the plan it was
    taken under), not a 500 in place of the refusal."""
    pytest.importorskip("flask")
    from flask import Flask

    from freqguard.integrations.flask import FreqGuard

    guard = Guard(clock=ManualClock(START))
    app = Flask(__name__)
    app.config["FREQGUARD_DEFAULT_LIMITS"] = [Rule("2 concurrent", lease=60), "10/minute"]
    fg = FreqGuard(app, guard=guard)
    deploys: list[int] = []

    @app.before_request
    def deploy() -> None:
        if deploys:
            old = guard.policies["flask.push"]
            raised = Rule(f"{10 + len(deploys)}/minute", by=old.rules[1].by)
            guard.add_policy(Policy(old.name, old.rules[0], raised), replace=True)
        deploys.append(1)

    @app.get("/push")
    @fg.capped("1/minute", name="shared")
    def push() -> str:
        return "pushed"

    client = app.test_client()
    assert [client.get("/push").status_code for _ in range(2)] == [200, 429]
    flight = guard.peek("flask.push", client="127.0.0.1").rules[0]
    assert flight.remaining == 2  # every lease back


@pytest.mark.parametrize("deploy", [False, True])
def test_a_flask_answer_deduct_when_declines_gives_back_its_rate_units_and_lease_once(
    deploy: bool,
) -> None:
    """The fix above, for an answer not streamed: ``deduct_when`` declines a 404 of a
    leased cap; at the teardown its decision is refunded whole (the lease and the rate
    units: 10 left of 10/minute, the lease free), once. With a deploy of the cap's
    policy (its rate raised) before the teardown, that refund is refused: the lease is
    released all the same (its rate units stay counted: the strict side), no 500."""
    pytest.importorskip("flask")
    from flask import Flask

    from freqguard.integrations.flask import FreqGuard

    guard = Guard(clock=ManualClock(START))
    app = Flask(__name__)
    fg = FreqGuard(app, guard=guard)

    @app.get("/lookup")
    @fg.capped(
        [Rule("1 concurrent", lease=60), "10/minute"],
        name="lookup",
        deduct_when=lambda response: response.status_code == 200,
    )
    def lookup() -> tuple[str, int]:
        if deploy:
            old = guard.policies["lookup"]
            raised = Rule("11/minute", by=old.rules[1].by, name=old.rules[1].name)
            guard.add_policy(Policy(old.name, old.rules[0], raised), replace=True)
        return "missing", 404

    assert app.test_client().get("/lookup").status_code == 404
    flight, rate = guard.peek("lookup", client="127.0.0.1").rules
    assert flight.remaining == 1
    # refunded: 10 of 10; after the deploy, released only: 10 of 11, the unit kept
    assert (rate.remaining, rate.limit) == ((10, 11) if deploy else (10, 10))
