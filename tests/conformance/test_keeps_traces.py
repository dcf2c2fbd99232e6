"""Random traces through a state's *keep* (design notes 118 and 119), beside the scenarios of
``test_keeps_adversarial.py``: a ``rate_for`` function's tiers, per-key limits set, cleared
and covering the tiers, refunds by receipt, resets, peeks, batches of mixed tiers, deploys of
the own rate and a clock stepping back. One trace holds a store to the exact list of the
admitted units once its state met the longest tier; another runs memory and a Redis store in
lockstep and holds their decisions equal."""

from __future__ import annotations

import random
from typing import Any

import pytest

from freqguard import ConfigError, Decision, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.backends.base import SyncBackend
from tests.conformance.test_keeps_adversarial import keeps_policy

US = 1_000_000
HOUR = 3600 * US
PLANS = {"pro": "20/hour", "team": "7 per 10 minutes"}
OWNS = ("5/minute", "3 per 10 seconds", "6 per 2 minutes")
# a limit's numbers within the pro tier's or past them (a window and a count it covers)
LIMITS = ("3/second", "4 per 30 seconds", "15/hour", "20 per 20 minutes", "500/day", "100/hour")
GAPS = (0.000001, 1, 7, 30, 59, 60, 61, 120, 200, 599, 600, 601, 1800, 3599, 3601)
OPS = ("hit", "peek", "many", "refund", "reset", "limit", "clear", "deploy", "back", "gap")
WEIGHTS = (20, 1, 2, 3, 0.3, 1.5, 1.5, 0.5, 0.5, 10)


def _policy(strategy: str, own: str) -> Policy:
    return keeps_policy(strategy, own, PLANS, by="user")


class _Caller:
    """One user's admitted units (µs, cost, decision), refunded ones taken out; ``met``:
    when an admitted pro hit began the state's memory of the pro hour (None: not since it
    last expired or was reset)."""

    def __init__(self) -> None:
        self.units: list[tuple[int, int, Decision]] = []
        self.met: int | None = None
        self.latest = 0

    def used(self, at: int, window: int) -> int:
        return sum(cost for t, cost, _ in self.units if t > at - window)


@pytest.mark.parametrize("strategy", ["sliding-log", "rolling-window"])
@pytest.mark.parametrize("seed", [8, 9, 18])  # each found design note 119's fault
def test_a_function_s_tiers_decide_as_the_exact_list_through_limits_refunds_and_deploys(
    any_store: SyncBackend, clock: ManualClock, seed: int, strategy: str
) -> None:
    """400 steps a seed. Once a state met the pro tier (20 an hour, the longest window and
    the largest count) and every unit of its hour came after, every hit is decided as the
    exact list says (a sliding log) or never past it (a rolling window), at the rate in
    force: the tier's, the own rate's, or a per-key limit's (one covering the tier's
    numbers too: design note 119). Not held after a refund while the hour holds more units
    than the log keeps (a named gap: ``test_a_refund_on_a_log_full_at_its_count...``)."""
    draw = random.Random(seed)
    guard = Guard(any_store, [_policy(strategy, OWNS[0])], clock=clock)
    callers = {name: _Caller() for name in "uv"}
    checked = 0
    for _ in range(400):
        op = draw.choices(OPS, WEIGHTS)[0]
        name = draw.choice("uuv")
        caller = callers[name]
        now = round(clock.now() * US)
        if op in ("hit", "many"):
            if op == "hit":
                plan, cost = draw.choice(["pro", "team", "free"]), draw.choice([1, 1, 2, 3])
                batch = [(name, plan, cost)]
                decided = [guard.hit("p", cost, user=name, plan=plan)]
            else:  # one batch, mixed tiers and callers
                batch = [
                    (draw.choice("uv"), draw.choice(["pro", "team", "free"]), 1) for _ in "abcd"
                ]
                decided = guard.hit_many("p", [{"user": n, "plan": p} for n, p, _ in batch])
            for (who, plan, cost), decision in zip(batch, decided, strict=True):
                checked += _judge(callers[who], decision, plan, cost, now, strategy)
        elif op == "peek":
            guard.peek("p", user=name, plan=draw.choice(["pro", "free"]))
        elif op == "refund" and caller.units:
            _refund(guard, caller, draw.randrange(len(caller.units)), now)
        elif op == "reset":
            guard.reset("p", user=name)
            caller.units, caller.met = [], None
        elif op == "limit":
            guard.set_limit("p", "r", draw.choice(LIMITS), user=name)
        elif op == "clear":
            guard.clear_limit("p", "r", user=name)
        elif op == "deploy":
            guard = Guard(any_store, [_policy(strategy, draw.choice(OWNS))], clock=clock)
        elif op == "back":
            clock.set(clock.now() - draw.choice([0.000001, 0.5, 3]), backwards=True)
        elif op == "gap":
            clock.advance(draw.choice(GAPS))
    assert checked > 60


def _judge(
    caller: _Caller, decision: Decision, plan: str, cost: int, now: int, strategy: str
) -> int:
    """Hold ``decision`` to the exact list if the state is known; note what it admitted."""
    at = max(now, caller.latest)  # a call is judged no earlier than its state's latest
    if caller.units and caller.units[-1][0] <= at - HOUR:
        caller.met = None  # the state expired: what it remembered went with it
    state = decision.rules[0]
    limit, window = state.capacity, state.rule.rate.window_us
    expected = caller.used(at, window) + cost <= limit
    met = caller.met
    known = met is not None and all(t >= met for t, _, _ in caller.units if t > at - HOUR)
    if known:
        if strategy == "sliding-log":
            assert decision.allowed == expected, (plan, cost, caller.used(at, window), state)
        else:
            assert not decision.allowed or expected, (plan, cost, caller.used(at, window), state)
    if decision.allowed:
        caller.latest = at
        caller.units.append((at, cost, decision))
        if plan == "pro" and caller.met is None:
            caller.met = at
    return int(known)


def _refund(guard: Guard, caller: _Caller, index: int, now: int) -> None:
    at = max(now, caller.latest)
    if caller.used(at, HOUR) > 20:  # more than the log keeps: the named gap
        caller.met = None
    unit = caller.units.pop(index)
    if _refunded(guard, unit[2]) == "ConfigError":  # a receipt from before a deploy that
        caller.units.insert(index, unit)  # changed the rule is refused: nothing given back


# -- memory and the Lua in lockstep ---------------------------------------------------------


def _summary(decision: Decision) -> tuple[Any, ...]:
    return (
        decision.allowed,
        decision.retry_after,
        tuple((s.remaining, s.reset_after, s.retry_after, s.capacity) for s in decision.rules),
    )


@pytest.mark.parametrize("redis_store", ["redis", "binned", "cluster"])
@pytest.mark.parametrize("strategy", ["sliding-log", "rolling-window"])
@pytest.mark.parametrize("seed", range(2))
def test_memory_and_the_lua_decide_alike_through_keeps(
    request: pytest.FixtureRequest, clock: ManualClock, seed: int, strategy: str, redis_store: str
) -> None:
    """The same 250 steps on memory and on a Redis store (refunds by receipt and without,
    resets, peeks, batches, limits, deploys that change the own rate or take ``rate_for``
    away, a clock stepping back): every decision equal, remaining and waits included."""
    draw = random.Random(seed)
    stores = [MemoryBackend(), request.getfixturevalue(f"{redis_store}_backend")]
    conf: dict[str, Any] = {"own": OWNS[0], "tiers": True}

    def make() -> list[Guard]:
        rule: Policy = _policy(strategy, conf["own"])
        if not conf["tiers"]:
            rule = Policy("p", Rule(conf["own"], by="user", name="r", strategy=strategy))
        return [Guard(store, [rule], clock=clock) for store in stores]

    guards = make()
    admitted: list[list[Decision]] = []
    for step in range(250):
        op = draw.choices((*OPS, "refund_ctx"), (*WEIGHTS, 1))[0]
        name, cost = draw.choice("uuv"), draw.choice([1, 1, 2, 3])
        plan = {"plan": draw.choice(["pro", "team", "free"])} if conf["tiers"] else {}
        out: list[Any] = []
        if op == "hit":
            out = _both(guards, "hit", "p", cost, user=name, **plan)
            if out[0].allowed:
                admitted.append(out)
        elif op == "peek":
            out = _both(guards, "peek", "p", cost, user=name, **plan)
        elif op == "many":
            contexts = [{"user": draw.choice("uv"), **plan} for _ in "abc"]
            out = [
                tuple(_summary(d) for d in got) for got in _both(guards, "hit_many", "p", contexts)
            ]
        elif op == "refund" and admitted:
            pair = admitted.pop(draw.randrange(len(admitted)))
            out = [_refunded(g, d) for g, d in zip(guards, pair, strict=True)]
        elif op == "refund_ctx":
            out = _both(guards, "refund", "p", cost, user=name, **plan)
        elif op == "reset":
            _both(guards, "reset", "p", user=name)
        elif op == "limit":
            _both(guards, "set_limit", "p", "r", draw.choice(LIMITS), user=name)
        elif op == "clear":
            _both(guards, "clear_limit", "p", "r", user=name)
        elif op == "deploy":
            conf = {"own": draw.choice(OWNS), "tiers": draw.random() < 0.8}
            guards = make()
        elif op == "back":
            clock.set(clock.now() - draw.choice([0.000001, 0.5, 3]), backwards=True)
        elif op == "gap":
            clock.advance(draw.choice(GAPS))
        if out:
            seen = [_summary(d) if isinstance(d, Decision) else d for d in out]
            assert seen[0] == seen[1], (seed, step, op, name, plan, cost)


def _both(guards: list[Guard], method: str, *args: Any, **kwargs: Any) -> list[Any]:
    """``method`` of each guard, called alike."""
    return [getattr(guard, method)(*args, **kwargs) for guard in guards]


def _refunded(guard: Guard, decision: Decision) -> object:
    try:
        return guard.refund(decision)
    except ConfigError as exc:
        return type(exc).__name__
