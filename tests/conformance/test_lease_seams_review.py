"""A review's failing tests of stop 55's lease changes (design note 101), each the behaviour
the docs or the design notes promise, deterministic (time pinned with ``ManualClock``; no
sleep); each failed before its fix, for the reason it names:

1. ``decide_op`` now sends a single-part lease take through the per-part loop
   (freqguard/engine/ops.py:77); a denied take there yields an *empty* step (ops.py:95-97,
   ``undo([]) + []``), which ``Accounting.admitted`` cannot take while another node's
   circuit is open (freqguard/engine/accounting.py:87-88: ``held[0]`` of an empty dict).
2. A lease take the master applied and no replica acknowledged is given back with
   ``undo(calls, replies)`` (ops.py:103-104): a refund of every mark, the rate rules' too,
   where docs/operations.md says "a release" and design note 101 "a hit's units are still
   kept, the strict side".
3. Flask's streamed answer holds its lease only in ``HeldBody`` (freqguard/integrations/
   flask.py:255-256, no ``call_on_close`` any more): an ``after_request`` that runs after
   the extension's and re-wraps ``response.response`` (Flask-Compress's streaming
   compression does ``response.response = compress_chunks(response.iter_encoded())``)
   drops the HeldBody unclosed, and the lease stays held.
4. ``release_each``/``arelease_each`` (freqguard/integrations/_held.py:49-58, 63-72) keep
   the *first* exception: a cancellation (or a Ctrl-C) that comes while a later lease goes
   back is replaced by an earlier release's ordinary error.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    Decision,
    Guard,
    ManualClock,
    Policy,
    Rule,
)
from freqguard.backends.redis import RedisBackend
from freqguard.failure import Breaker
from freqguard.integrations._held import arelease_each, release_each
from tests.conftest import START
from tests.operations.test_failure_nodes import Nodes

# -- 1. a denied single-part lease take, another node's circuit open --------------------------


def test_a_denied_lease_take_is_a_denial_while_another_nodes_circuit_is_open(
    asynchronous: bool,
) -> None:
    """A store of several nodes (a Redis Cluster; here the suite's node rig over a memory
    store), node B failing until its circuit opens (the default breaker opens after 5
    failures). A lease policy whose keys live on node A is at its cap: its next take must
    be a denial. Since decide_op sends a lease take on one part through the per-part loop
    (ops.py:77), the denial's give-back step is an empty batch (ops.py:95-97), and
    ``Accounting.admitted`` with the breaker tripped reads ``held[0]`` of nothing
    (accounting.py:87-88): ``KeyError: 0`` out of ``take_lease``, or out of a lease block,
    a Flask/Django/ASGI request's 500 for every request over the cap. (At 03d9176 the take
    was one call: a denial.)"""
    clock = ManualClock()
    store = Nodes(clock)
    rate = Policy("p", Rule("3/day", by="r", name="daily"))
    leased = Policy("l", Rule("1 concurrent", by="r", lease=60, name="cc"))
    breaker = Breaker(2, 5.0, clock=clock.now)

    async def takes(guard: AsyncGuard) -> list[bool]:
        for _ in range(2):
            with pytest.raises(BackendUnavailable):
                await guard.hit("p", r="B1")
        assert guard.breaker is not None
        assert guard.breaker.tripped
        return [(await guard.take_lease("l", r="A1")).allowed for _ in range(2)]

    store.down = {"B"}
    if asynchronous:
        taken = asyncio.run(takes(AsyncGuard(store, [rate, leased], clock, breaker=breaker)))
    else:
        guard = Guard(store, [rate, leased], clock, breaker=breaker)
        for _ in range(2):
            with pytest.raises(BackendUnavailable):
                guard.hit("p", r="B1")
        assert guard.breaker is not None
        assert guard.breaker.tripped
        taken = [guard.take_lease("l", r="A1").allowed for _ in range(2)]
    assert taken == [True, False]  # got KeyError: 0 at the second take


# -- 2. a take its replicas missed: the lease goes back, the rate units stay -------------------


@pytest.mark.parametrize("on_error", ["raise", "allow"])
def test_a_take_its_replicas_missed_gives_back_its_lease_and_keeps_its_rate_units(
    unreplicated: tuple[RedisBackend, RedisBackend],
    on_error: str,
) -> None:
    """A policy of a concurrency rule and a rate rule, on a store whose replicas never
    acknowledge. docs/operations.md: "A lease's take so applied is given back first (a
    release, which waits for no replica)"; a release gives back the leases and "its rate
    rules keep the call"; design note 101: "a hit's units are still kept, the strict
    side". With ``"allow"`` the call even runs (failing open). ops.py:103-104 gives back
    ``undo(calls, replies)``: every mark, so the rate rule forgets a call that was made
    (``allow``) or counted as the store counted it (``raise``)."""
    durable, reader = unreplicated
    policy = Policy(
        "p",
        Rule("2 concurrent", by="user", lease=60, name="cc"),
        Rule("5/minute", by="user", name="rpm"),
        on_error=on_error,
    )
    clock = ManualClock(START)
    guard = Guard(durable, [policy], clock=clock)
    ran = False
    try:
        with guard.lease("p", user="u") as held:
            ran = held.allowed
    except BackendUnavailable:
        pass
    assert ran == (on_error == "allow")
    rules = Guard(reader, [policy], clock=clock).peek("p", user="u").rules
    # the lease back (2 free), the call's rate unit kept (4 left); got [2, 5]
    assert [(r.rule.id, r.remaining) for r in rules] == [("cc", 2), ("rpm", 4)]


# -- 3. Flask: a later after_request re-wraps the streamed body -------------------------------


def test_a_flask_streamed_answer_a_later_after_request_rewraps_gives_its_lease_back() -> None:
    """Flask-Compress's streaming compression (its default, ``COMPRESS_STREAMS``) runs after
    the extension's ``after_request`` when ``Compress(app)`` was set up first, and does
    ``response.response = compress_chunks(app, response.iter_encoded(), algorithm)``: a
    generator over the body that never closes it. The extension now ties the lease to
    the body alone (flask.py:255-256, ``HeldBody``), so the body it wrapped is dropped
    unclosed and the lease is held until it lapses, though the response was sent whole and
    closed. At 03d9176 (``response.call_on_close``) it went back as the response closed."""
    from flask import Flask, Response

    from freqguard.integrations.flask import FreqGuard

    guard = Guard(clock=ManualClock(START))
    app = Flask(__name__)

    @app.after_request  # registered before the extension's: runs after it
    def compress(response: Response) -> Response:
        if response.is_streamed:  # as flask_compress.Compress.after_request, streaming
            chunks = response.iter_encoded()

            def compressed() -> Iterator[bytes]:
                deflate = zlib.compressobj()
                for data in chunks:
                    out = deflate.compress(data)
                    if out:
                        yield out
                yield deflate.flush()

            response.direct_passthrough = False
            response.response = compressed()
            response.headers["Content-Encoding"] = "deflate"
        return response

    fg = FreqGuard(app, guard=guard)

    @app.get("/stream")
    @fg.capped(Rule("1 concurrent", by="client", lease=60))
    def stream() -> Response:
        return Response(iter([b"a", b"b"]))

    client = app.test_client()
    first = client.get("/stream")
    assert first.status_code == 200
    assert zlib.decompress(first.get_data()) == b"ab"
    first.close()  # sent whole and closed by the server
    # expected 200: the first request is over; got 429, its lease held for its 60 s
    assert client.get("/stream").status_code == 200


# -- 4. a cancellation while a request's leases go back ----------------------------------------


def _two_leases() -> list[Decision]:
    guard = Guard(
        policies=[Policy("l", Rule("2 concurrent", lease=60, name="cc"))],
        clock=ManualClock(START),
    )
    return [guard.take_lease("l"), guard.take_lease("l")]


class _Releasing:
    """A guard's ``release`` as a request's leases meet it: the first release fails (the
    store went away); the second is under way when the caller is stopped."""

    def __init__(self, stop: BaseException | None = None) -> None:
        self.stop, self.released = stop, 0
        self.gate = asyncio.Event() if stop is None else None

    def release(self, decision: Decision) -> Decision:
        self.released += 1
        if self.released == 1:
            raise BackendUnavailable("store down")
        assert self.stop is not None
        raise self.stop  # a Ctrl-C as the second lease goes back

    async def arelease(self, decision: Decision) -> Decision:
        self.released += 1
        if self.released == 1:
            raise BackendUnavailable("store down")
        assert self.gate is not None
        await self.gate.wait()  # cancelled here
        return decision


def test_a_cancellation_while_a_requests_leases_go_back_is_raised_as_a_cancellation() -> None:
    """``arelease_each`` catches ``BaseException`` and raises the *first* once each lease
    was tried (_held.py:63-72): the request's task, cancelled (the client went away, a
    timeout, a TaskGroup) while its second lease goes back, ends with the first release's
    ``BackendUnavailable`` instead: the cancellation is swallowed (``task.cancelled()`` is
    False; ``asyncio.timeout`` raises no ``TimeoutError``; a TaskGroup sees a failure).
    A cancellation must win over an ordinary error."""

    async def main() -> tuple[bool, BaseException | None]:
        stub = _Releasing()
        face: Any = type("Face", (), {"release": lambda self, d: stub.arelease(d)})()
        task = asyncio.create_task(arelease_each(face, _two_leases()))
        while stub.released < 2:  # no sleeping: each pass lets the task run one step
            await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except BaseException as exc:  # what the task ended with
            return task.cancelled(), exc
        return task.cancelled(), None

    cancelled, raised = asyncio.run(main())
    # got (False, BackendUnavailable('store down'))
    assert cancelled, raised


def test_a_ctrl_c_while_a_requests_leases_go_back_is_raised_as_a_ctrl_c() -> None:
    """``release_each`` (_held.py:49-58), the sync twin: a Ctrl-C (or a SIGTERM handler's
    ``SystemExit``) that comes as the second lease goes back is replaced by the first
    release's ``BackendUnavailable``: the worker does not stop."""
    stub = _Releasing(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):  # got BackendUnavailable('store down')
        release_each(stub, _two_leases())  # type: ignore[arg-type]
