"""Leases over every way out, against a model written from docs/strategies/concurrency.md.

Hypothesis draws sequences of: leases taken (and kept), given back (``release``), given
back twice, given back after they expired, taken by a block that ends, raises, or is
cancelled at any await of its entry or its exit (once or twice), taken by a ``@capped``
generator iterated to its end, closed early or never iterated, dropped by a holder that
died (the lease frees itself), time moving, per-key limits set, changed and cleared
while leases are held, and deploys that turn the rule into a rate rule and back (with
another lease). Every store runs the same sequence: memory, Redis, Redis with bins, Redis
without Functions and a Redis Cluster, on a pinned clock.

The model: a lease counts from when it was taken until it is given back or ``lease``
seconds pass (the rule's lease as deployed now: a take of the key drops what has left
it, and the key's state expires a lease after its newest take, by the lease of then, so
a deploy that makes the lease longer counts again only what neither dropped);
at most N (a per-key limit of leases: its count) are held at once; a hit of
the rate rule counts for its window; the two are apart (a deploy leaves the other's
entries where they are, counting by their own time); a decision of one deploy cannot be
given back under another. After each step the store's view of every key agrees with the
model's; and once every caller has left and the leases of the dead have lapsed, nothing
is held."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import AsyncGuard, ConfigError, Decision, ManualClock, Policy, Rule, capped
from tests.conformance.lease_rig import EVERY_STORE, async_store
from tests.conftest import START, examples

KEYS = ("u", "v")
#: The key a block takes its lease by when "u" holds something: whether a block cancelled
#: early wrote (dropping what had left the window, moving the state's expiry) depends on
#: the store's speed, so no other step uses it
BLOCKS = "w"
RATE_US = 60_000_000  # the rate rule's window


def _policy(kind: str, limit: int, lease: int) -> Policy:
    if kind == "leases":
        return Policy("llm", Rule(f"{limit} concurrent", by="user", lease=lease, name="cc"))
    return Policy("llm", Rule(f"{limit}/minute", by="user", name="cc"))


@dataclass
class Entry:
    """One lease or hit, as the model keeps it."""

    at: int  # µs, when taken
    cost: int
    deploy: tuple[str, int]  # the policy that took it: given back while it holds leases


@dataclass
class Model:
    limit: int = 2
    lease_us: int = 60_000_000
    kind: str = "leases"
    logs: dict[tuple[str, str], list[Entry]] = field(default_factory=dict)  # (kind, key)
    key_limits: dict[str, tuple[str, int]] = field(default_factory=dict)  # key: (kind, n)
    # (kind, key): when the state expires, set by a write (its newest entry and the window
    # then): from then on it is absent, whatever window a later deploy gives
    expiries: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def deploy(self) -> tuple[str, int]:
        """The policy as deployed: a receipt of an equal one is given back."""
        return (self.kind, self.lease_us if self.kind == "leases" else 0)

    def window(self, kind: str) -> int:
        return self.lease_us if kind == "leases" else RATE_US

    def held(self, key: str, now: int, kind: str | None = None) -> int:
        kind = kind or self.kind
        if self.expiries.get((kind, key), now + 1) <= now:  # the store's state expired
            self.logs[kind, key] = []
        window = self.window(kind)
        return sum(e.cost for e in self.logs.get((kind, key), []) if e.at > now - window)

    def cap(self, key: str) -> int:
        stored = self.key_limits.get(key)
        return stored[1] if stored is not None and stored[0] == self.kind else self.limit

    def free(self, key: str, now: int) -> int:
        return max(0, self.cap(key) - self.held(key, now))

    def take(self, key: str, now: int, cost: int) -> Entry | None:
        if self.held(key, now) + cost > self.cap(key):
            return None
        entry = Entry(now, cost, self.deploy)
        self.written(key, now).append(entry)
        return entry

    def log(self, key: str) -> list[Entry]:
        return self.logs.get((self.kind, key), [])

    def written(self, key: str, now: int, dry: bool = False) -> list[Entry]:
        """The key's log as a write leaves it: what left the window is dropped (so a deploy
        that makes the lease longer later counts only what no write has dropped); ``dry``:
        what it would be, the log left as it is."""
        kind = self.kind
        self.held(key, now)  # an expired state first
        log = [e for e in self.log(key) if e.at > now - self.window(kind)]
        if not dry:
            self.logs[kind, key] = log
            self.expiries[kind, key] = now + self.window(kind)  # a take's entry is the newest
        return log

    def give_back(self, key: str, entry: Entry) -> None:
        log = self.logs.get(("leases", key), [])
        if entry in log:
            log.remove(entry)


@dataclass
class Holder:
    key: str
    decision: Decision
    entry: Entry


step = st.one_of(
    st.tuples(st.just("take"), st.sampled_from(KEYS), st.sampled_from([1, 1, 2])),
    st.tuples(st.just("release"), st.integers(0, 20), st.just(0)),
    st.tuples(st.just("twice"), st.integers(0, 20), st.just(0)),
    st.tuples(st.just("block"), st.integers(0, 12), st.sampled_from([None, 0, 1, 3, "raise"])),
    st.tuples(st.just("generator"), st.sampled_from(["end", "close", "never"]), st.just(0)),
    st.tuples(st.just("dies"), st.sampled_from(KEYS), st.just(0)),
    st.tuples(st.just("advance"), st.sampled_from([1, 20, 45, 61]), st.just(0)),
    st.tuples(st.just("limit"), st.sampled_from(KEYS), st.sampled_from([None, 1, 3, 4])),
    st.tuples(st.just("deploy"), st.sampled_from([30, 60]), st.just(0)),
)


async def _replay(backend: Any, steps: list[tuple[Any, Any, Any]]) -> None:
    clock = ManualClock(START)
    model = Model()
    guard = AsyncGuard(backend, [_policy("leases", model.limit, 60)], clock=clock)
    holders: list[Holder] = []
    given_back: list[Decision] = []

    def now() -> int:
        return clock.now_us()

    async def agrees(where: str) -> None:
        for key in (*KEYS, BLOCKS):
            state = (await guard.peek("llm", user=key)).rules[0]
            wanted = model.free(key, now())
            assert state.remaining == wanted, (where, key, model)

    for index, (name, a, b) in enumerate(steps):
        where = f"step {index}: {name} {a} {b}"
        if name == "take":
            key, cost = a, b
            cost = min(cost, model.cap(key))
            if model.kind == "leases":
                decision = await guard.take_lease("llm", cost, user=key)
            else:
                decision = await guard.hit("llm", cost, user=key)
            entry = model.take(key, now(), cost)
            assert decision.allowed == (entry is not None), where
            if entry is not None and model.kind == "leases":
                holders.append(Holder(key, decision, entry))
        elif name in ("release", "twice") and holders:
            holder = holders[a % len(holders)]
            if name == "twice" and given_back:
                with pytest.raises(ConfigError, match="already refunded"):
                    await guard.release(given_back[a % len(given_back)])
                continue
            # by its place: two leases taken at one time hold equal decisions and entries
            del holders[a % len(holders)]
            # taken under a deploy this guard never had (each deploy is a new guard, as a
            # new process): given back while a concurrency rule holds it, whatever its
            # lease (a lease is a time in the log), refused once the rule counts a rate
            if holder.entry.deploy[0] != model.kind:
                with pytest.raises(ConfigError, match="as it was registered then"):
                    await guard.release(holder.decision)
                continue
            await guard.release(holder.decision)
            given_back.append(holder.decision)
            model.give_back(holder.key, holder.entry)
        elif name == "block" and model.kind == "leases":
            # on "u" when it holds nothing: whether the block's write (which it may or may not
            # reach before it is cancelled) happened then changes nothing later (what it
            # drops, when the state expires); else on a key of its own
            model.held("u", now())
            key = "u" if not model.log("u") else BLOCKS
            await _block(guard, a, b, key)
        elif name == "generator" and model.kind == "leases":
            if a != "never" and model.free("u", now()) > 0:  # it takes one, and gives it back
                model.written("u", now())
            await _generator(guard, a)
        elif name == "dies" and model.kind == "leases":
            decision = await guard.take_lease("llm", user=a)  # its holder dies: never back
            assert decision.allowed == (model.take(a, now(), 1) is not None), where
        elif name == "advance":
            clock.advance(a)
        elif name == "limit":
            if b is None:
                await guard.clear_limit("llm", "cc", user=a)
                model.key_limits.pop(a, None)
            else:
                rate = f"{b} concurrent" if model.kind == "leases" else f"{b}/minute"
                await guard.set_limit("llm", "cc", rate, user=a)
                model.key_limits[a] = (model.kind, b)
        elif name == "deploy":
            model.kind = "rate" if model.kind == "leases" else "leases"
            model.lease_us = a * 1_000_000 if model.kind == "leases" else model.lease_us
            lease = model.lease_us // 1_000_000
            guard = AsyncGuard(backend, [_policy(model.kind, model.limit, lease)], clock=clock)
        await agrees(where)
    # every caller leaves: the leases are given back (under the deploy that took them),
    # and those of the dead lapse; nothing is held
    if model.kind != "leases":
        model.kind = "leases"
        lease = model.lease_us // 1_000_000
        guard = AsyncGuard(backend, [_policy("leases", model.limit, lease)], clock=clock)
    clock.advance(model.lease_us / 1_000_000)
    for key in (*KEYS, BLOCKS):
        assert model.held(key, now(), "leases") == 0
        assert (await guard.peek("llm", user=key)).rules[0].remaining == model.cap(key)


async def _block(guard: AsyncGuard, steps: int, again: int | str | None, key: str) -> None:
    """A block that holds its lease until it raises, or until it is cancelled ``steps``
    loop steps after it starts (and, with ``again``, once more that many later, while it
    gives the lease back): whatever happened, it holds nothing once it is done."""

    async def holder() -> None:
        async with guard.lease("llm", user=key) as decision:
            if decision.allowed:
                if again == "raise":
                    raise RuntimeError("the call failed")
                await asyncio.Event().wait()

    task = asyncio.create_task(holder())
    for _ in range(steps):
        await asyncio.sleep(0)
    if again == "raise":
        with contextlib.suppress(RuntimeError):
            await task
        return
    task.cancel()
    if isinstance(again, int):
        for _ in range(again):
            await asyncio.sleep(0)
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _generator(guard: AsyncGuard, how: str) -> None:
    """A ``@capped`` async generator of the policy, iterated to its end, closed after its
    first item, or never iterated: it holds nothing once it is done."""

    @capped("llm", key="user", guard=guard, on_exceeded="skip")
    async def stream(user: str) -> AsyncGenerator[int, None]:
        for i in range(3):
            yield i

    made = stream("u")
    if how == "end":
        async for _ in made:
            pass
    elif how == "close":
        async for _ in made:
            break
        await made.aclose()


@pytest.mark.parametrize("store", EVERY_STORE)
@settings(max_examples=examples(8))
@given(steps=st.lists(step, min_size=1, max_size=30))
def test_leases_hold_to_the_model_over_every_way_out(
    request: pytest.FixtureRequest, store: str, steps: list[tuple[Any, Any, Any]]
) -> None:
    async def main() -> None:
        async with async_store(request, store) as backend:
            await _replay(backend, steps)

    asyncio.run(main())
