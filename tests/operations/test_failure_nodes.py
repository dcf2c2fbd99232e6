"""A store of several nodes, one of them failing: one circuit per node, and batches answered
by the store where it can and by ``on_error`` where it cannot. On an injected clock.

The store here is a real MemoryBackend behind nodes named by the first letter of a record's
hash tag (``fg:{A7}:p`` is on node ``A``); a node in ``down`` fails the calls sent to it as
a hung Redis Cluster node does, and the rest of a batch is applied (a
:class:`~freqguard.PartialFailure`). tests/backends/test_fault_replies.py does the same on a real
cluster.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    Clock,
    ConfigError,
    Decision,
    Guard,
    ManualClock,
    MemoryBackend,
    PartialFailure,
    Policy,
    Rule,
)
from freqguard.failure import Breaker, CircuitOpen
from freqguard.script.calls import Reply, ScriptCall
from tests.operations.failure_rig import AsyncSide

CAP = 3
P = Policy("p", Rule(f"{CAP}/day", by="r", name="daily"))
TWO = Policy("two", Rule(f"{CAP}/day", by="r", name="per-r"), Rule("100/day", by="c", name="per-c"))
FAILURES = 2
COOLDOWN = 5.0
DEGRADED = {"allow": "fail-open", "deny": "fail-closed", "fallback": "fallback"}


class Nodes(AsyncSide):
    """A MemoryBackend spread over nodes; calls to a node in ``down`` fail, the rest run."""

    def __init__(self, clock: ManualClock) -> None:
        self.inner = MemoryBackend(clock)
        self.clock: Clock = clock
        self.down: set[str] = set()
        self.refused: set[str] = set()  # nodes whose ACL refuses this user their keys
        self.then_down: set[str] = set()  # nodes that go down as a refusal is raised
        self.down_on_denial: set[str] = set()  # nodes that go down once a call denies
        self.calls: Counter[str] = Counter()  # calls each node was sent

    def node_of(self, call: ScriptCall) -> str:
        record = call.part.layouts[0].record(call.texts)
        return record[record.index("{") + 1]

    def execute(self, call: ScriptCall) -> Reply:
        return self.execute_many([call])[0]

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        results: list[Any] = []
        errors: dict[str, BackendUnavailable] = {}
        refusal: ConfigError | None = None  # as the Redis backend's, NOPERM: the rest ran
        for call in calls:
            node = self.node_of(call)
            self.calls[node] += 1
            if node in self.down:
                results.append(errors.setdefault(node, _hung(node)))
            elif node in self.refused:
                results.append(refusal := refusal or ConfigError(f"node {node}: NOPERM"))
            else:
                results.append(reply := self.inner.execute(call))
                if not reply.allowed:
                    self.down |= self.down_on_denial
        if refusal is not None:
            refusal.results = results
            self.down |= self.then_down  # what the rest took cannot be given back there
            raise refusal
        if not errors:
            return results
        if len(errors) == 1 and all(isinstance(r, BackendUnavailable) for r in results):
            raise next(iter(errors.values()))
        raise PartialFailure("some nodes failed", results)


def _hung(node: str) -> BackendUnavailable:
    """The error of a call to a hung node, naming it (as the cluster backend's errors do:
    named before a slot map learnt again meanwhile could name another)."""
    error = BackendUnavailable(f"node {node}: TimeoutError")
    error.__cause__ = TimeoutError(node)
    error.node = node
    return error


class Heard:
    """An observer: the store errors it was told of, by type."""

    def __init__(self) -> None:
        self.errors: Counter[str] = Counter()

    def decided(self, decision: Decision, context: Mapping[str, str], seconds: float) -> None:
        pass

    def failed(self, error: BackendUnavailable, policy: str, backend: str) -> None:
        self.errors[type(error).__name__] += 1


class Rig:
    """A guard (sync, or async run to completion: the same calls) on :class:`Nodes`."""

    def __init__(self, on_error: str, asynchronous: bool) -> None:
        self.clock = ManualClock()
        self.store = Nodes(self.clock)
        self.breaker = Breaker(FAILURES, COOLDOWN, clock=self.clock.now)
        self.heard = Heard()
        self.fallback = MemoryBackend(self.clock) if on_error == "fallback" else None
        how: Any = self.fallback if self.fallback is not None else on_error
        options: dict[str, Any] = {"on_error": how, "breaker": self.breaker}
        options["observers"] = [self.heard]
        if asynchronous:
            self._async = AsyncGuard(self.store, [P, TWO], self.clock, **options)
        else:
            self._sync = Guard(self.store, [P, TWO], self.clock, **options)
        self.asynchronous = asynchronous

    def __getattr__(self, name: str) -> Any:
        if not self.asynchronous:
            return getattr(self._sync, name)
        method = getattr(self._async, name)
        return lambda *a, **k: asyncio.run(method(*a, **k))


def test_a_failing_node_opens_its_own_circuit_only(asynchronous: bool) -> None:
    rig = Rig("allow", asynchronous)
    assert rig.hit("p", r="A1").source == "backend"
    rig.store.down = {"A"}
    for _ in range(5):  # A fails, B answers in between: A's failures still add up
        assert rig.hit("p", r="A1").source == "fail-open"
        assert rig.hit("p", r="B1").source == "backend"
    assert rig.store.calls["A"] == 1 + FAILURES  # one that answered, then the failures
    assert (rig.breaker.state_of("A"), rig.breaker.state_of("B")) == ("open", "closed")
    assert rig.heard.errors == {"BackendUnavailable": FAILURES, "CircuitOpen": 5 - FAILURES}
    rig.store.down = set()
    rig.clock.advance(COOLDOWN)
    probe = rig.hit("p", r="A1")
    assert (probe.source, probe.remaining) == ("backend", CAP - 2)  # A's first, then this
    assert rig.breaker.state == "closed"


def test_an_open_node_is_left_out_of_a_batch_and_the_rest_is_sent(asynchronous: bool) -> None:
    """With A's circuit open, a batch sends B's calls only; A's hits meet the open circuit
    (told once) and are answered by on_error."""
    rig = Rig("deny", asynchronous)
    rig.store.down = {"A"}
    for _ in range(FAILURES):
        rig.hit("p", r="A1")
    sent = rig.store.calls["A"]
    got = rig.hit_many("p", [{"r": r} for r in ("A1", "B1", "A2", "B2")])
    assert [d.source for d in got] == ["fail-closed", "backend", "fail-closed", "backend"]
    assert rig.store.calls["A"] == sent  # not called
    assert got[0].retry_after == pytest.approx(COOLDOWN)  # until A's probe
    assert rig.heard.errors["CircuitOpen"] == 1


@pytest.mark.parametrize("on_error", ["raise", "allow", "deny", "fallback"])
def test_a_batch_across_a_failing_node_is_decided_where_it_can_be(
    on_error: str, asynchronous: bool
) -> None:
    rig = Rig(on_error, asynchronous)
    rig.store.down = {"A"}
    batch = [{"r": r} for r in ("A1", "B1", "A2", "B1")]
    if on_error == "raise":
        with pytest.raises(PartialFailure) as caught:
            rig.hit_many("p", batch)
        got = caught.value.results
        assert [type(r).__name__ for r in got] == [
            "BackendUnavailable",
            "Decision",
            "BackendUnavailable",
            "Decision",
        ]
        assert got[0] is got[2]  # one node, one error
    else:
        got = rig.hit_many("p", batch)
        degraded = DEGRADED[on_error]
        assert [d.source for d in got] == [degraded, "backend", degraded, "backend"]
        assert got[0].allowed is (on_error != "deny")
    assert [got[1].remaining, got[3].remaining] == [CAP - 1, CAP - 2]  # in order, exact
    if rig.fallback is not None:  # the failed part, and only it, was decided there
        assert [got[0].remaining, got[2].remaining] == [CAP - 1, CAP - 1]
        assert "keys=2" in repr(rig.fallback)
    rig.store.down = set()
    assert rig.peek("p", r="A1").remaining == CAP  # A applied nothing


def test_a_batch_a_node_refuses_gives_back_what_the_rest_took(asynchronous: bool) -> None:
    """A node refuses its calls as misconfigured (an ACL: NOPERM) while another's circuit
    is open and a third answers: the ConfigError is raised, whatever ``on_error`` says, and
    what the answered calls took goes back (their results put in the batch's places, the
    held call's among them)."""
    rig = Rig("allow", asynchronous)
    rig.store.down = {"A"}
    for _ in range(FAILURES):
        rig.hit("p", r="A1")
    assert rig.breaker.state_of("A") == "open"
    rig.store.down, rig.store.refused = set(), {"B"}
    with pytest.raises(ConfigError, match="NOPERM"):
        rig.hit_many("p", [{"r": r} for r in ("C1", "A1", "B1", "C2", "C1")])
    rig.store.refused = set()
    assert [rig.peek("p", r=r).remaining for r in ("C1", "C2", "B1")] == [CAP] * 3
    assert rig.breaker.state_of("B") == "closed"  # a refusal is no outage


@pytest.mark.parametrize("on_error", list(DEGRADED))
@pytest.mark.parametrize(
    ("policy", "contexts"),
    [
        # a hit refused in its second part (per-c, on B), its first (per-r, on C) not given back
        ("two", [{"r": "C1", "c": "B1"}]),
        # the same in a batch, after a hit admitted in both parts
        ("two", [{"r": "C2", "c": "C9"}, {"r": "C1", "c": "B1"}, {"r": "C3", "c": "C9"}]),
        # one part: the batch is one step, refused on B, admitted on C
        ("p", [{"r": "C2"}, {"r": "B1"}, {"r": "C1"}]),
    ],
)
def test_a_refusal_whose_give_back_fails_is_still_the_refusal(
    asynchronous: bool, on_error: str, policy: str, contexts: list[dict[str, str]]
) -> None:
    """B refuses its calls (an ACL: NOPERM), and C goes away as the refusal comes, so what
    C admitted cannot be given back. The caller sees the refusal, whatever ``on_error``
    says; the give-back's failure was raised in its place, an outage that ``on_error``
    answered (a fail-open of a hit the store refused): a misconfiguration hidden. The units
    C keeps stay taken (the strict side)."""
    rig = Rig(on_error, asynchronous)
    rig.store.refused, rig.store.then_down = {"B"}, {"C"}
    lone = len(contexts) == 1
    with pytest.raises(ConfigError, match="NOPERM"):
        rig.hit(policy, **contexts[0]) if lone else rig.hit_many(policy, contexts)
    rig.store.refused = rig.store.down = set()
    rig.clock.advance(COOLDOWN)  # C's circuit, opened by the failed give-backs, probes again
    seen = rig.peek(policy, **({"r": "C1", "c": "C0"} if policy == "two" else {"r": "C1"}))
    assert (seen.source, seen.rules[0].remaining) == ("backend", CAP - 1)


def test_a_probe_answered_in_a_batch_another_node_refuses_closes_its_circuit(
    asynchronous: bool,
) -> None:
    """A's circuit is due its probe; a batch goes with a call to A (the probe: A answers)
    and one B refuses (NOPERM). The refusal is raised from ``Accounting.finished`` before
    the breaker is told of anything, so A's answered probe is never heard of: A stays
    half-open, its probe "under way", and the next hit on A meets the open circuit and is
    answered by on_error (fail-open here; fail-closed denies) for a further cool-down,
    though A is up. The refusal's results (``sent.placed``) say what each node did."""
    rig = Rig("allow", asynchronous)
    rig.store.down = {"A"}
    for _ in range(FAILURES):
        rig.hit("p", r="A1")
    rig.store.down = set()
    rig.clock.advance(COOLDOWN)  # A's probe is due
    rig.store.refused = {"B"}
    with pytest.raises(ConfigError, match="NOPERM"):
        rig.hit_many("p", [{"r": "A1"}, {"r": "B1"}])
    rig.store.refused = set()
    assert rig.breaker.state_of("A") == "closed"  # got: half-open
    assert rig.hit("p", r="A1").source == "backend"  # got: fail-open


def test_a_batch_that_fails_everywhere_raises_its_one_error(asynchronous: bool) -> None:
    rig = Rig("raise", asynchronous)
    rig.store.down = {"A"}
    with pytest.raises(BackendUnavailable) as caught:
        rig.hit_many("p", [{"r": "A1"}, {"r": "A2"}])
    assert type(caught.value) is BackendUnavailable  # not a PartialFailure: nothing decided
    assert isinstance(caught.value.__cause__, TimeoutError)


def test_a_multi_part_batch_decides_the_hits_that_avoid_the_failing_node(
    asynchronous: bool,
) -> None:
    """TWO goes part by part: a hit whose per-r record is on A fails, and gives back what it
    took on B first (failing open here); the others are decided."""
    rig = Rig("allow", asynchronous)
    rig.store.down = {"A"}
    got = rig.hit_many("two", [{"r": r, "c": "B0"} for r in ("B1", "A1", "B2", "A2", "B3")])
    assert [d.source for d in got] == ["backend", "fail-open", "backend", "fail-open", "backend"]
    rig.store.down = set()
    per_c = {s.rule.name: s.remaining for s in rig.peek("two", r="B9", c="B0").rules}
    assert per_c["per-c"] == 100 - 3  # the failed hits took nothing there


def test_on_a_store_of_one_node_the_first_failure_ends_a_multi_part_batch() -> None:
    """No node_of: one store. Once it failed, the hits after are not tried (each would wait
    for the same dead store) and on_error answers them all."""

    class OneNode(Nodes):
        node_of = None  # type: ignore[assignment]

        def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
            self.calls["store"] += 1
            if self.down:
                raise _hung("store")
            return self.inner.execute_many(calls)

    clock = ManualClock()
    store = OneNode(clock)
    guard = Guard(store, [TWO], clock, on_error="deny", breaker=None)
    store.down = {"all"}
    got = guard.hit_many("two", [{"r": f"B{n}", "c": "B0"} for n in range(10)])
    assert {d.source for d in got} == {"fail-closed"}
    assert store.calls["store"] == 1


def test_a_circuit_of_a_node_long_quiet_is_forgotten() -> None:
    """A node that failed once and is never called again leaves no circuit for ever."""
    clock = ManualClock()
    breaker = Breaker(3, 1.0, clock=clock.now)
    breaker.failed("A")
    assert breaker.counting
    clock.advance(2.0)
    breaker.succeeded("B")
    assert not breaker.counting
    for _ in range(3):
        breaker.failed("A")
    with pytest.raises(CircuitOpen, match="to A"):
        breaker.check("hit", "A")
    breaker.check("hit", "B")  # B's circuit is closed


def test_a_batch_failing_on_every_node_each_its_own_way_says_so(asynchronous: bool) -> None:
    rig = Rig("raise", asynchronous)
    rig.store.down = {"A", "B"}
    with pytest.raises(PartialFailure) as caught:
        rig.hit_many("p", [{"r": "A1"}, {"r": "B1"}])
    assert str(caught.value).startswith("2 of 2 hits failed: ")  # none decided: not said
    assert all(isinstance(r, BackendUnavailable) for r in caught.value.results)


def test_the_breaker_takes_a_clock_or_a_function_of_seconds() -> None:
    clock = ManualClock()
    for given in (clock, clock.now):
        breaker = Breaker(1, 2.0, clock=given)
        breaker.failed("A")
        assert breaker.state_of("A") == "open"
        clock.advance(2.0)
        assert breaker.state_of("A") == "half-open"
    with pytest.raises(ConfigError, match="Breaker clock must be a function of seconds"):
        Breaker(clock=5)


@pytest.mark.parametrize("batch", [False, True], ids=["hit", "hit_many"])
@pytest.mark.parametrize("on_error", list(DEGRADED))
def test_a_hit_a_later_part_denied_is_denied_though_its_give_back_fails(
    asynchronous: bool, on_error: str, batch: bool
) -> None:
    """Per-r on C admits, per-c on B denies, and C goes away before what per-r took is
    given back: the denial is known, yet the give-back's BackendUnavailable was answered
    by ``on_error`` as an outage ("allow": admitted, a hit the store denied; a fallback:
    decided again there). Denied, as the store said; the unit C keeps stays taken."""
    rig = Rig(on_error, asynchronous)
    for i in range(100):  # per-c's day, spent by others on A
        assert rig.hit("two", r=f"A{i}", c="B1").allowed
    rig.store.down_on_denial = {"C"}
    context = {"r": "C1", "c": "B1"}
    got = rig.hit_many("two", [context])[0] if batch else rig.hit("two", **context)
    assert not got.allowed
