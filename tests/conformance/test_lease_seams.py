"""Leases under exits the other lease tests left out, each a failing test of an adversarial
review (stop 55) before its fix: "a lease is taken before the call and given back exactly
once, whatever happens" (design note 101).

The reference model is docs/strategies/concurrency.md: a lease counts from its take until
it is given back (or lapses after ``lease`` seconds); a call whose lease nothing can give
back any more leaves the cap lower until then. Every test pins time (``ManualClock``), so
no lease lapses while it runs: what ``peek`` reports held is held. Stores: memory, and
where the store takes part, Redis and a Redis Cluster (the suite's own servers).
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    Guard,
    ManualClock,
    Policy,
    Rule,
)
from freqguard.backends.base import SyncBackend
from freqguard.backends.redis import RedisBackend
from freqguard.integrations.asgi import FreqGuardMiddleware, Limit
from tests.conftest import START

# -- 1. Flask: a streamed answer's lease is tied to werkzeug's Response.close -----------------


def _flask_app(guard: Guard, body: Any, replace: bool = False) -> Any:
    from flask import Flask, Response

    from freqguard.integrations.flask import FreqGuard

    app = Flask(__name__)
    if replace:

        @app.after_request  # registered before the extension's: runs after it
        def rewrap(response: Response) -> Response:
            # an after_request that answers with a response of its own around the streamed
            # body (a wrapper, a re-encoding): the streamed response it got is dropped,
            # unclosed, and no error reaches the request's teardown
            if response.is_streamed:
                return Response(response.response, response.status, response.headers)
            return response

    fg = FreqGuard(app, guard=guard)

    @app.get("/stream")
    @fg.capped(Rule("1 concurrent", by="client", lease=60))
    def stream() -> Response:
        return Response(body())

    return app


def test_a_flask_streamed_answer_gives_its_lease_back_when_its_bodys_close_raises() -> None:
    """A streamed view's generator whose clean-up fails as the server closes it (the client
    went away mid-stream; the generator's ``finally`` closes a connection that broke): the
    request is over, its lease must go back. The extension ties the release to
    ``response.call_on_close`` (freqguard/integrations/flask.py:251), and werkzeug's
    ``Response.close`` runs its on-close functions only after ``self.response.close()``
    returned: the lease stays held until it lapses (the WSGI middleware's ``HeldBody`` and
    Django release in a ``finally``)."""
    guard = Guard(clock=ManualClock(START))

    def body() -> Iterator[bytes]:
        try:
            yield b"a"
            yield b"b"
        finally:
            raise OSError("the clean-up failed")

    client = _flask_app(guard, body).test_client()
    first = client.get("/stream", buffered=False)
    assert first.status_code == 200
    assert client.get("/stream").status_code == 429  # the first is in flight
    with pytest.raises(OSError, match="clean-up"):
        first.close()  # as the server closes it once the client has gone
    # expected 200: the first request is over; got 429, its lease held for its 60 s
    third = client.get("/stream", buffered=False)
    assert third.status_code == 200
    with pytest.raises(OSError, match="clean-up"):
        third.close()


def test_a_flask_streamed_answer_a_later_after_request_replaces_gives_its_lease_back() -> None:
    """An ``after_request`` that runs after the extension's and answers with another
    response around the streamed body: Flask sends the new one, and the streamed response
    the extension tied the lease to (``call_on_close``, flask.py:251) is never closed. The
    teardown gives back a streamed answer's leases only when an error reached it
    (flask.py:261-262), so the lease is held until it lapses, though the body was sent
    and closed."""
    guard = Guard(clock=ManualClock(START))
    client = _flask_app(guard, lambda: iter([b"a", b"b"]), replace=True).test_client()
    first = client.get("/stream", buffered=False)
    assert first.status_code == 200
    assert first.get_data() == b"ab"
    first.close()  # sent whole and closed by the server
    # expected 200; got 429: the lease of a request that ended is still held
    assert client.get("/stream").status_code == 200


# -- 2. a deploy that leaves the policy's fingerprint as it was -------------------------------


def _deployed(kind: str) -> tuple[Policy, Policy, dict[str, str]]:
    """A policy, a deploy of it whose rules' states and specs are the same (so its plan's
    fingerprint is the same), and what a hit of the deployed one also names."""
    cc = Rule("2 concurrent", by="user", lease=60, name="cc")
    if kind == "priorities":  # the same rules, now decided by priority (batch capped)
        capped = Rule("2 concurrent", by="user", lease=60, name="cc", caps={"batch": 1})
        deployed = Policy("p", capped, priorities=("live", "batch"))
        return Policy("p", cc), deployed, {"priority": "live"}
    # a calendar rule whose zone was fixed is now each hit's own (tz_from)
    month = Rule("1000/month", by="user", name="month", calendar=True, tz="UTC")
    zoned = Rule("1000/month", by="user", name="month", calendar=True, tz_from="tz")
    return Policy("p", cc, month), Policy("p", cc, zoned), {"tz": "UTC"}


@pytest.mark.parametrize("kind", ["priorities", "zone"])
def test_a_lease_held_across_a_deploy_that_keeps_the_fingerprint_is_given_back(
    backend: SyncBackend, kind: str
) -> None:
    """A deploy that adds priorities to a leased policy, or makes a calendar rule's zone
    each hit's own, changes no state and no spec: the plan's fingerprint
    (freqguard/engine/plan.py:135) is the same, so ``Receipts._give_back`` releases by the
    *new* plan, whose ``refund_calls`` (plan.py:315-326, ``parts_for``) asks the receipt's
    context for a priority or a zone the take never had: ``ContextError`` out of the
    block's end, and the lease held until it lapses (a release by the plan it was taken
    under, kept for that, would have gone through)."""
    before, after, extra = _deployed(kind)
    guard = Guard(backend, [before], clock=ManualClock(START))
    raised: BaseException | None = None
    try:
        with guard.lease("p", user="u") as held:
            assert held.allowed
            guard.add_policy(after, replace=True)
    except Exception as exc:
        raised = exc
    free = guard.peek("p", 1, user="u", **extra).rules[0].remaining
    # got (ContextError(...), 1): the release refused, the lease held for its 60 s
    assert (raised, free) == (None, 2)


def test_a_lease_released_by_a_process_deployed_since_goes_back(backend: SyncBackend) -> None:
    """The webhook way (docs/strategies/concurrency.md: ``take_lease`` now, ``release``
    when the answer comes): the decision travels (pickled) and the process that receives
    the answer was deployed since, with the rule's limit raised and its name kept, as the
    docs ask. A lease is a time in the rule's state, the same whatever limit the rule has
    now (freqguard/engine/refunds.py, ``_give_back``), but that process never registered
    the old version: ``PolicyRegistry.taken_under`` answers the current plan
    (freqguard/engine/registry.py:122) and ``refund_calls`` refuses the receipt
    (plan.py:317): ``ConfigError``, the lease held until it lapses, counted by the new
    limit meanwhile. (tests/conformance/test_lease_model.py asserts this refusal for its
    deploys, which are new guards: a design question as much as a bug.)"""
    clock = ManualClock(START)
    old = Guard(
        backend, [Policy("p", Rule("2 concurrent", by="u", lease=60, name="cc"))], clock=clock
    )
    wire = pickle.dumps(old.take_lease("p", u="a"))
    new = Guard(
        backend, [Policy("p", Rule("3 concurrent", by="u", lease=60, name="cc"))], clock=clock
    )
    assert new.peek("p", u="a").remaining == 2  # the old process's lease counts here
    new.release(pickle.loads(wire))  # got ConfigError: "as it was registered then"
    assert new.peek("p", u="a").remaining == 3


# -- 3. the ASGI middleware's memo of which routes hold leases -------------------------------


def test_the_asgi_middleware_leases_a_route_a_deploy_gave_a_concurrency_rule() -> None:
    """The middleware remembers, per route, whether its policy holds leases
    (``FreqGuardMiddleware._leased``, freqguard/integrations/asgi.py:116, 130 and 146) and
    takes the hit path for a route once seen without one. A deploy that gives the route's
    policy a concurrency rule (``add_policy(..., replace=True)``, the same name) then
    reaches ``guard.hit``, which refuses a leased policy: every request of the route
    raises ``ConfigError`` (a 500 under a server), none is leased. WSGI, Flask and Django
    ask per request (``leasing``)."""
    guard = AsyncGuard(clock=ManualClock(START))
    seen: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((await guard.peek("llm")).rules[0].remaining)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    rates = Policy("llm", Rule("100/minute", name="rate"))
    capped_app = FreqGuardMiddleware(
        app, guard=guard, limits=[Limit("/llm", rule=rates, key=lambda request: {})]
    )

    async def main() -> list[int]:
        transport = httpx.ASGITransport(app=capped_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            assert (await client.get("/llm")).status_code == 200  # the route seen, no leases
            leased = Policy("llm", Rule("1 concurrent", lease=60, name="cc"))
            guard.add_policy(leased, replace=True)  # the deploy
            seen.clear()
            answer = await client.get("/llm")  # got ConfigError: "take its leases with lease"
            assert answer.status_code == 200
        return [*seen, (await guard.peek("llm")).rules[0].remaining]

    assert asyncio.run(main()) == [0, 1]  # held while the app ran, given back after


# -- 4. a take the store applied that its replicas did not acknowledge -----------------------


@pytest.mark.parametrize("on_error", ["raise", "allow"])
def test_a_lease_the_store_took_without_its_replicas_goes_back_when_the_block_ends(
    unreplicated: tuple[RedisBackend, RedisBackend], on_error: str
) -> None:
    """With ``wait_replicas``, a take the master applied and no replica acknowledged fails
    as ``BackendUnavailable`` (``applied``: its reply, marks and all). A hit is then "still
    counted, the strict side" (docs/operations.md); a lease so counted is a lease nobody
    gives back: with ``on_error="raise"`` the caller never ran its call, and with
    ``"allow"`` it ran under a fail-open decision that has no receipt, so the block's end
    gives nothing back. Either way one of the two leases stays held until it lapses,
    though the failure says exactly what it took (freqguard/engine/ops.py:75-76, the one
    call's failure raised as it is; ops.py:89 and 101 likewise for several parts;
    failover.py ``fail_answer``: no receipt)."""
    durable, reader = unreplicated
    policy = Policy("p", Rule("2 concurrent", by="user", lease=60, name="cc"), on_error=on_error)
    clock = ManualClock(START)
    guard = Guard(durable, [policy], clock=clock)
    failed: BackendUnavailable | None = None
    try:
        with guard.lease("p", user="u") as held:
            assert held.allowed == (on_error == "allow")
    except BackendUnavailable as exc:
        failed = exc
    if on_error == "raise":  # the store took it, and said so
        assert failed is not None
        assert failed.applied is not None
    free = Guard(reader, [policy], clock=clock).peek("p", user="u").rules[0].remaining
    assert free == 2  # got 1: held for its 60 s, by a call that ended (or never ran)


def test_a_lease_an_older_release_took_goes_back_after_the_upgrade() -> None:
    """A receipt pickled by an older release names its plan by its specs and keys alone (the
    fingerprint's second line now): the upgraded worker that receives it gives it back,
    where a new format alone refused every lease in flight across a rolling upgrade (a
    review of stop 55)."""
    from freqguard.decision import Decision, Receipt

    guard = Guard(policies=[Policy("p", Rule("1 concurrent", by="u", lease=60, name="cc"))])
    taken = guard.take_lease("p", u="a")
    assert taken.receipt is not None
    old = taken.receipt
    older = Receipt(
        old.policy,
        old.cost,
        old.times_us,
        old.context,
        old.marks,
        old.fingerprint.partition("\n")[2],  # as 0.3.0 made it
    )
    wire = Decision(taken.policy, True, 0.0, (), taken.raw, receipt=older)
    guard.release(pickle.loads(pickle.dumps(wire)))
    assert guard.peek("p", u="a").remaining == 1


def test_a_receipt_of_another_shape_is_refused_never_a_crash() -> None:
    """A receipt whose first line matches but whose marks are of another shape (made by
    hand, or damaged on its way) is refused as any other plan's, not a ``ValueError``."""
    from freqguard import ConfigError
    from freqguard.decision import Decision, Receipt

    guard = Guard(policies=[Policy("p", Rule("1 concurrent", by="u", lease=60, name="cc"))])
    taken = guard.take_lease("p", u="a")
    assert taken.receipt is not None
    old = taken.receipt
    first = old.fingerprint.partition("\n")[0]
    odd = Receipt(old.policy, old.cost, old.times_us, old.context, ((), ()), first + "\nx")
    with pytest.raises(ConfigError, match="as it was registered then"):
        guard.release(Decision(taken.policy, True, 0.0, (), taken.raw, receipt=odd))
