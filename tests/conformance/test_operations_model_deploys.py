"""The operations model (``test_operations_model.py``) where its machine did not reach: deploys
that change a rule's rate, window or burst, its dimensions (``by``, which moves it to another
record or part) or its tier, and ``refund(decision)`` of a hit with a deploy between the hit
and its refund: none, the same policy registered again (another guard), a changed policy
(refused, nothing given back), a changed policy and the first again (given back).

Every other operation of the machine is drawn too, in between; every store (memory, Redis,
Redis in bins, Cluster) is held to the one model, so the stores decide alike.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

from freqguard import ConfigError
from freqguard.backends.base import SyncBackend
from tests.conformance.operations_model import BUCKETS
from tests.conformance.test_operations_model import (
    _TIER_VALUE,
    DIMS,
    WINDOWS,
    C,
    Operations,
    T,
    U,
    run_on,
)

BETWEEN = ("none", "same", "changed", "changed-back", "retiered")


def _own_tier(by: tuple[str, ...], tier: tuple[int, int] | None, own: bool) -> dict[str, Any]:
    """A tier by the rule's own last dimension when asked for and it has one, else by plan."""
    if tier is not None and own and by:
        return {"tier": tier, "tier_from": (by[-1], _TIER_VALUE[by[-1]])}
    return {"tier": tier, "tier_from": ("plan", "pro")}


class Deploys(Operations):
    # -- deploys the first machine does not draw

    @rule(
        index=st.integers(0, 5),
        limit=st.integers(1, 4),
        window=st.sampled_from(WINDOWS),
        burst=st.none() | st.integers(1, 3),
    )
    def deploy_rate(self, index: int, limit: int, window: int, burst: int | None) -> None:
        i = index % len(self.deployed)
        old = self.deployed[i]
        bucket = burst if old.kind in BUCKETS else None
        self.deployed[i] = replace(old, limit=limit, window=window, burst=bucket)
        self._deploy()

    @rule(index=st.integers(1, 5), by=st.sampled_from(DIMS), own=st.booleans())
    def deploy_by(self, index: int, by: tuple[str, ...], own: bool) -> None:
        # the model keeps a limit by rule name and value with the dimension it was set
        # for: a rule re-keyed from "t" to "u" does not read t=17's limit as u=17's, and
        # reads it again keyed back by "t" (test_limit_deploys.py)
        if len(self.deployed) < 2:
            return
        i = 1 + (index - 1) % (len(self.deployed) - 1)
        old = self.deployed[i]
        self.deployed[i] = replace(old, by=by, **_own_tier(by, old.tier, own))
        self._deploy()

    @rule(
        index=st.integers(1, 5),
        tier=st.none() | st.tuples(st.integers(1, 6), st.sampled_from(WINDOWS)),
        own=st.booleans(),
    )
    def deploy_tier(self, index: int, tier: tuple[int, int] | None, own: bool) -> None:
        if len(self.deployed) < 2:
            return
        i = 1 + (index - 1) % (len(self.deployed) - 1)
        old = self.deployed[i]
        self.deployed[i] = replace(old, **_own_tier(old.by, tier, own))
        self._deploy()

    # -- refunds by receipt, a deploy between

    @rule(
        u=st.sampled_from(U),
        t=st.sampled_from(T),
        c=st.sampled_from(C),
        plan=st.sampled_from(("", "pro")),
        cost=st.sampled_from((1, 1, 2, 0)),
        between=st.sampled_from(BETWEEN),
    )
    def hit_then_refund(self, u: str, t: str, c: str, plan: str, cost: int, between: str) -> None:
        ctx = self._ctx(u, t, c, plan)
        before = dict(self.model.states)
        decision = self._hit(ctx, cost)
        if decision is None:
            return
        after = dict(self.model.states)
        taken = decision.allowed and cost > 0
        assert (decision.receipt is not None) == taken, decision
        kept = list(self.deployed)
        if between in ("changed", "changed-back"):
            anchor = self.deployed[0]
            self.deployed[0] = replace(anchor, limit=anchor.limit % 4 + 1)
            self._deploy()
        if between == "retiered":  # the tiers' rates alone: not the rules a receipt names
            # (not a token bucket's: its refund counts the hit's span at the new rate, at
            # most the units taken, so a bucket full before the hit may come back less full
            # than the model's "as before": test_bucket_refund_retiered, docs/limits.md)
            self.deployed = [
                r
                if r.tier is None or r.kind == "token-bucket"
                else replace(r, tier=(r.tier[0] % 6 + 1, r.tier[1]))
                for r in self.deployed
            ]
            self._deploy()
        if between in ("same", "changed-back"):
            self.deployed = kept
            self._deploy()
        assert self.guard is not None
        if between == "changed" and taken:
            with pytest.raises(ConfigError, match="as it was registered then"):
                self.guard.refund(decision)
            return  # refused: nothing given back, and the receipt can go back by its policy
        given = self.guard.refund(decision)
        if not taken:  # nothing consumed: answered as it was
            assert given == decision
            return
        assert given.allowed
        if taken:
            self._given_back(ctx, cost, before, after)
            with pytest.raises(ConfigError, match="already refunded"):
                self.guard.refund(decision)

    def _given_back(
        self, ctx: dict[str, str], cost: int, before: dict[Any, Any], after: dict[Any, Any]
    ) -> None:
        """The model's refund at the hit's own µs: each state the hit consumed from, back
        by exactly its units (``Model.refund``)."""
        now = self.clock.now_us()
        for key, group in self.model.groups(self.deployed, self.order, ctx).items():
            if after.get(key) is before.get(key):
                continue  # not consumed (a lone exempt rule that would have denied)
            old = before.get(key)
            view = old if old is not None and old.expiry > now else None
            p = self.model.params(group[0], ctx, now)
            self.model.states[key] = self.model.refund(
                group[0].kind, after[key], view, p, now, cost
            )


def test_deploys_and_refunds_hold_to_the_model(any_store: SyncBackend) -> None:
    run_on(any_store, Deploys, 40)
