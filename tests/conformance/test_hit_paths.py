"""``hit`` has two paths, held equal here. A hit of a policy on one part, with nothing to do
around its one call but telling the observers (no deny cache, store failures raised, a
breaker counting no failures), is sent by ``hit`` itself (the one-call path: 5-15% of an
in-memory hit, see benchmarks/README.md); every other hit, and every other operation,
drives the operation's generator (``decide_op``) through the guard's ``_run``.

Two guards with the same options take the same random operations on stores of their own in
lockstep: one as it is, the other with its hits kept off the one-call path (its ``Hits``
never finds a hit alone). Whatever the options (observers, deny cache, each
``on_error``, a policy's own, fallbacks shared out or not, breaker on or off, a store that
fails and comes back; policies on several parts, with tiers, calendar rules, priorities and
quiet hours), they must give equal decisions and receipts (or equal errors), tell their
observers the same, keep the same denials and breaker state, and make the same store calls.
The first guard must take the one-call path exactly when its options allow it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    Decision,
    FreqGuardError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    QuietHours,
    Rule,
    TierRates,
)
from freqguard.denycache import DenyCache
from freqguard.engine.hits import Hits
from freqguard.engine.plan import PolicyPlan
from freqguard.failure import Breaker, Fallback
from freqguard.script.calls import Reply, ScriptCall
from tests.conftest import START, examples

PRIORITIES = ("transactional", "marketing")
POLICIES = [
    # one part: a log, a bucket and a shadow rule, all per recipient
    Policy(
        "one",
        Rule("3/second", by="r", name="sec"),
        Rule("5/minute", by="r", strategy="gcra", burst=2, name="min"),
        Rule("2/second", by="r", name="watch", shadow=True),
    ),
    # two parts: a hit a later part denies is given back in the earlier one
    Policy("two", Rule("3/second", by="r", name="r"), Rule("4/second", by="c", name="c")),
    Policy(
        "tiers",
        Rule(
            "2/second",
            by="r",
            name="tier",
            rate_for=TierRates("plan", {"pro": "5/second", "free": "1/second"}),
        ),
    ),
    Policy("calendar", Rule("3/day", by="r", name="day", calendar=True, tz_from="tz")),
    Policy(
        "priorities",
        Rule("4/minute", by="r", name="all", caps={"marketing": 2}),
        Rule("2/minute", by="r", name="promo", only=("marketing",)),
        priorities=PRIORITIES,
        quiet=QuietHours("21:00", "08:00", tz="UTC", exempt=("transactional",)),
    ),
]
NAMES = [policy.name for policy in POLICIES]
CONTEXTS = [
    {"r": "a", "c": "x", "plan": "pro", "tz": "UTC", "priority": "marketing"},
    {"r": "b", "c": "x", "plan": "free", "tz": "Asia/Tokyo", "priority": "transactional"},
    {"r": "a", "c": "y", "plan": "none", "tz": "America/New_York", "priority": "marketing"},
]


class Store(MemoryBackend):
    """A memory store that fails while ``down``, and counts its calls: all of them, and those
    sent alone (``execute`` outside a batch: only the one-call path sends a call so)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.down = False
        self.calls = 0
        self.alone = 0
        self._batches = 0

    def execute(self, call: ScriptCall) -> Reply:
        self.calls += 1
        if not self._batches:
            self.alone += 1
        if self.down:
            raise BackendUnavailable("the store is down")
        return super().execute(call)

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        self._batches += 1
        try:
            return super().execute_many(calls)
        finally:
            self._batches -= 1


class Recorder:
    """An observer that keeps what it is told (but for the time decisions took)."""

    def __init__(self) -> None:
        self.told: list[tuple[Any, ...]] = []

    def decided(self, decision: Decision, context: Mapping[str, str], seconds: float) -> None:
        self.told.append(("decided", _view(decision), dict(context)))

    def failed(self, error: BackendUnavailable, policy: str, backend: str) -> None:
        self.told.append(("failed", type(error).__name__, str(error), policy, backend))


class Driven(Hits):
    """A guard's ``Hits`` that never finds a hit alone: its hits take the driven path."""

    __slots__ = ()

    def alone(self, plan: PolicyPlan) -> bool:
        return False


class Side:
    """One guard of the pair, with its own clock, stores, observer, deny cache and breaker."""

    def __init__(self, options: dict[str, Any], asynchronous: bool, driven: bool) -> None:
        self.clock = ManualClock(START)
        self.store = Store(self.clock)
        self.fallback = Store(self.clock)
        self.recorder = Recorder() if options["observers"] else None
        observers: list[Any] = [] if self.recorder is None else [self.recorder]
        self.cache = DenyCache(8, clock=self.clock.now) if options["deny_cache"] else None
        self.breaker = (
            Breaker(2, cooldown=1.0, clock=self.clock.now) if options["breaker"] else None
        )
        policies = [
            _with_on_error(policy, self._on_error(options["policy_on_error"]))
            if policy.name == "one"
            else policy
            for policy in POLICIES
        ]
        kind = AsyncGuard if asynchronous else Guard
        self.guard: Any = kind(
            self.store,
            policies,
            self.clock,
            on_error=self._on_error(options["on_error"]),
            deny_cache=self.cache if self.cache is not None else 0,
            observers=observers,
            breaker=self.breaker,
        )
        if driven:
            self.guard._hits.__class__ = Driven
        self.loop = asyncio.new_event_loop() if asynchronous else None

    def _on_error(self, choice: str | None) -> Any:
        if choice == "backend":
            return self.fallback
        if choice == "shared":
            return Fallback(self.fallback, workers=2)
        return choice

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The guard's answer, or the error it raised, as a comparable view."""
        try:
            got = getattr(self.guard, method)(*args, **kwargs)
            if self.loop is not None:
                got = self.loop.run_until_complete(got)
        except FreqGuardError as exc:
            return ("error", type(exc).__name__, str(exc))
        return got

    def state(self) -> tuple[Any, ...]:
        """What the operations left behind, besides their answers."""
        breaker = self.breaker
        return (
            self.clock.now_us(),
            None if self.recorder is None else list(self.recorder.told),
            self._denials(),
            None
            if breaker is None
            else (breaker.state, breaker.state_of(), breaker.counting, breaker.tripped),
            self.store.calls,
            self.fallback.calls,
        )

    def _denials(self) -> list[Any] | None:
        """Each remembered denial of each policy and context, as the deny cache answers it."""
        if self.cache is None:
            return None
        found: list[Any] = [len(self.cache)]
        for policy in POLICIES:
            for ctx in CONTEXTS:
                values = [ctx[d] for d in policy.dimensions]
                values += [ctx.get(name, "") for name in policy.reads]
                denial = self.cache.get(policy.name, DenyCache.key(policy.name, values), 1)
                found.append(None if denial is None else _view(denial))
        return found

    def close(self) -> None:
        if self.loop is not None:
            self.loop.close()


def _with_on_error(policy: Policy, on_error: Any) -> Policy:
    return Policy(policy.name, *policy.rules, on_error=on_error, priorities=policy.priorities)


def _view(result: Any) -> Any:
    """A decision as comparable values (its rules by id: a fallback's shared-out rules are
    each guard's own objects), with its receipt; anything else as it is."""
    if isinstance(result, list):
        return [_view(item) for item in result]
    if not isinstance(result, Decision):
        return result
    receipt = result.receipt
    return (
        result.policy,
        result.allowed,
        result.retry_after,
        [rule.id for rule in result.denied_by],
        result.source,
        [(rule.id, remaining, reset, retry) for rule, remaining, reset, retry in result.raw],
        None
        if receipt is None
        else (
            receipt.policy,
            receipt.cost,
            receipt.times_us,
            dict(receipt.context),
            receipt.marks,
            receipt.fingerprint,
            receipt.spent,
        ),
    )


def _context(name: str, index: int) -> dict[str, str]:
    policy = POLICIES[NAMES.index(name)]
    ctx = CONTEXTS[index]
    return {key: ctx[key] for key in (*policy.dimensions, *policy.reads)}


def _alone_expected(side: Side, options: dict[str, Any], name: str) -> bool:
    """Whether the one-call path must be taken by a hit of ``name`` on this side now (read
    before the hit: the breaker's count is what it was)."""
    on_error = options["on_error"]
    if name == "one" and options["policy_on_error"] is not None:
        on_error = options["policy_on_error"]
    breaker = side.breaker
    return (
        side.guard._policies.plan(name).single_part
        and not options["deny_cache"]
        and on_error == "raise"
        and (breaker is None or not breaker.counting)
    )


# half the examples with the options that let the one-call path be taken (the breaker's
# count then decides), half with any options
plain = st.fixed_dictionaries(
    {
        "observers": st.booleans(),
        "deny_cache": st.just(False),
        "on_error": st.just("raise"),
        "policy_on_error": st.sampled_from([None, "raise", "allow"]),
        "breaker": st.sampled_from([True, True, False]),
    }
)
options = plain | st.fixed_dictionaries(
    {
        "observers": st.booleans(),
        "deny_cache": st.booleans(),
        "on_error": st.sampled_from(["raise", "allow", "deny", "backend", "shared"]),
        "policy_on_error": st.sampled_from([None, "raise", "allow", "shared"]),
        "breaker": st.booleans(),
    }
)
# an operation: its kind (hits more often than the rest), a policy, a context (its index in
# CONTEXTS), a number (a cost, a timeout, a limit, seconds, down or up) and, for a batch,
# more contexts
KINDS = ["hit"] * 8 + ["peek", "undo", "undo", "refund", "reset", "many", "acquire", "limit"]
KINDS += ["advance", "advance", "down", "down"]
op = st.tuples(
    st.sampled_from(KINDS),
    st.sampled_from(NAMES),
    st.integers(0, len(CONTEXTS) - 1),
    st.integers(0, 3),
    st.lists(st.integers(0, len(CONTEXTS) - 1), min_size=1, max_size=4),
)
SECONDS = [0.1, 0.6, 1.5, 61]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@settings(max_examples=examples(40))
@given(options=options, ops=st.lists(op, min_size=5, max_size=30))
def test_both_hit_paths_decide_and_leave_the_same(
    asynchronous: bool, options: dict[str, Any], ops: list[tuple[Any, ...]]
) -> None:
    one_call = Side(options, asynchronous, driven=False)
    driven = Side(options, asynchronous, driven=True)
    admitted: list[tuple[Decision, Decision]] = []  # each side's admitted hits, in order
    try:
        for kind, name, index, n, batch in ops:
            expected = kind == "hit" and _alone_expected(one_call, options, name)
            before = one_call.store.alone
            results = [
                _apply(side, (kind, name, index, n, batch), i, admitted)
                for i, side in enumerate((one_call, driven))
            ]
            if kind == "hit":
                taken = one_call.store.alone - before
                assert taken == (1 if expected else 0), (name, options, results[0])
            if kind in ("hit", "acquire") and all(
                isinstance(r, Decision) and r.receipt is not None for r in results
            ):
                admitted.append((results[0], results[1]))
            assert _view(results[0]) == _view(results[1]), (kind, name, index, n)
            assert one_call.state() == driven.state(), (kind, name, index, n)
        assert driven.store.alone == 0  # the driven side never took the one-call path
    finally:
        one_call.close()
        driven.close()


def _apply(
    side: Side,
    op: tuple[str, str, int, int, list[int]],
    which: int,
    admitted: list[tuple[Decision, Decision]],
) -> Any:
    """One operation on one side (``which``: its place in each pair of ``admitted``)."""
    kind, name, index, n, batch = op
    policy = POLICIES[NAMES.index(name)]
    ctx = _context(name, index)
    if kind == "hit":
        return side.call("hit", name, min(n, 2), **ctx)
    if kind == "peek":
        return side.call("peek", name, **ctx)
    if kind == "undo":  # refund(decision) of an admitted hit (a second time: refused)
        if not admitted:
            return None
        return side.call("refund", admitted[(index * 4 + n) % len(admitted)][which])
    if kind == "refund":
        return side.call("refund", name, max(n, 1), **ctx)
    if kind == "reset":
        return side.call("reset", name, **{d: ctx[d] for d in policy.rules[0].by})
    if kind == "many":
        return side.call("hit_many", name, [_context(name, i) for i in batch])
    if kind == "acquire":
        return side.call("acquire", name, float(n % 2 * 2), **ctx)
    if kind == "limit":
        rule = policy.rules[0]
        where = {d: ctx[d] for d in rule.by}
        if n == 0:
            return side.call("clear_limit", name, rule.id, **where)
        return side.call("set_limit", name, rule.id, f"{n}/second", **where)
    if kind == "advance":
        side.clock.advance(SECONDS[n])
        return None
    assert kind == "down"
    side.store.down = n % 2 == 1
    return None


_PLAIN = {
    "observers": False,
    "deny_cache": False,
    "on_error": "raise",
    "policy_on_error": None,
    "breaker": True,
}


def test_the_one_call_path_is_taken_while_nothing_needs_doing_around_the_call() -> None:
    """The path the property above holds to the other is taken (so that the property cannot
    pass by comparing the driven path with itself): by a plain guard's hits of a policy on
    one part, the failing one included; not while the breaker counts that failure (the hit
    that finds the store back is driven, and resets the count), nor for a policy on several
    parts; a guard's observers are told of its hits either way."""
    side = Side(_PLAIN, asynchronous=False, driven=False)
    store = side.store
    side.call("hit", "one", r="a")
    side.call("hit", "two", r="a", c="x")
    assert store.alone == 1
    store.down = True
    assert side.call("hit", "one", r="a")[:2] == ("error", "BackendUnavailable")
    assert store.alone == 2  # sent alone, and counted by the breaker
    store.down = False
    assert side.call("hit", "one", r="a").allowed  # driven: the breaker is told it answered
    assert store.alone == 2
    assert side.call("hit", "one", r="b").allowed
    assert store.alone == 3
    observed = Side({**_PLAIN, "observers": True}, asynchronous=False, driven=False)
    observed.call("hit", "one", r="a")
    assert observed.store.alone == 1
    assert observed.recorder is not None
    assert [told[0] for told in observed.recorder.told] == ["decided"]
