"""A guard's policies, each compiled once into a plan
(:class:`~freqguard.engine.plan.PolicyPlan`) and looked up by name.

Read by every call, from any thread, without a lock; changed (a policy added or replaced:
its name checked and its plan added as one) under one, copy on write: a reader iterating
the policies, or a release looking for the plan its lease was taken under, holds a dict
that no deploy changes (one changed under it raised "dictionary changed size during
iteration" out of a release, the lease held).
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType

from freqguard.engine.denials import Denials
from freqguard.engine.failover import Failover
from freqguard.engine.plan import PolicyPlan, keep
from freqguard.errors import ConfigError, shown
from freqguard.policy import Policy

__all__ = ["PolicyRegistry"]

#: Replaced plans kept per policy, so that leases taken under them are given back after a
#: deploy (however many policies one deploy replaces).


class PolicyRegistry:
    """The policies a guard decides, by name, each compiled once, when it is registered.

    Args:
        prefix: the guard's key prefix.
        estimate: the store's time as the guard best knows it (µs): calendar periods are
            sent around it.
        bins: how many bins the records share in Redis (``RedisBackend(bins=N)``;
            0: a hash each): part of every key.
    """

    __slots__ = ("_bins", "_by_name", "_changing", "_estimate", "_plans", "_prefix", "_versions")

    def __init__(self, prefix: str, estimate: Callable[[], int], bins: int) -> None:
        self._prefix = prefix
        self._estimate = estimate
        self._bins = bins
        self._plans: dict[str, PolicyPlan] = {}
        # the plans, and those replaced (by name and fingerprint, oldest first: a lease
        # taken under one is given back by it), swapped as one: a release reads both of
        # one version (a rollback, A to B to A again, read apart had lost A)
        self._versions: tuple[dict[str, PolicyPlan], dict[str, dict[str, PolicyPlan]]]
        self._versions = ({}, {})
        self._by_name: Mapping[str, Policy] = MappingProxyType({})
        self._changing = threading.RLock()  # one change at a time; readers take none

    def compile(self, policy: object, replace: object = False) -> PolicyPlan | None:
        """``policy`` compiled, to add once the guard accepts it (:meth:`register`); None
        when an equal policy is registered already (re-adding it is a no-op).

        Raises:
            ConfigError: not a Policy, ``replace`` not a bool, or a different policy of
                that name is registered (and ``replace`` is False).
        """
        if not isinstance(policy, Policy):
            raise ConfigError(f"add_policy takes a Policy, got {shown(policy)}")
        if not isinstance(replace, bool):
            raise ConfigError(f"add_policy's replace must be True or False, got {shown(replace)}")
        known = self._plans.get(policy.name)
        if known is not None:
            if known.policy == policy:
                return None
            if not replace:
                raise ConfigError(
                    f"a different policy named {policy.name!r} is already registered "
                    "(add_policy(..., replace=True) replaces it)"
                )
        return PolicyPlan(policy, self._prefix, self._estimate, self._bins)

    def register(
        self, policy: object, replace: object, failover: Failover, denials: Denials
    ) -> None:
        """``Guard.add_policy``: ``policy`` compiled (:meth:`compile`), its ``on_error``
        taken by ``failover``, and added; what ``denials`` remembers of its name forgotten
        (a replaced policy's denials say nothing of the new rules).

        With ``replace``, the store's records stay, and a state both versions keep goes on
        counting: the log of hits every sliding-log rule of the same dimensions reads, any
        other rule's state by its id (which names its rate). A decision made under the old
        version is not refunded (its receipt names the policy as it was).
        """
        with self._changing:  # the name's check and the add as one: two threads
            plan = self.compile(policy, replace)  # registering one name, one refused
            if plan is not None:
                failover.add(plan)
                self._add(plan)
                denials.forget(plan, None)

    def _add(self, plan: PolicyPlan) -> None:
        """Register a plan made by :meth:`compile` (the one it replaces kept for
        :meth:`taken_under`), in new dicts: never one a reader holds changed."""
        plans, replaced = self._versions
        old = plans.get(plan.name)
        versions = dict(replaced.get(plan.name, {}))
        if old is not None and old.fingerprint != plan.fingerprint:
            keep(versions, old.fingerprint, old)
        versions.pop(plan.fingerprint, None)
        plans = {**plans, plan.name: plan}
        self._versions = plans, {**replaced, plan.name: versions}
        self._plans = plans
        # made once a change, not once a read: a middleware asks it each request
        self._by_name = MappingProxyType({name: p.policy for name, p in plans.items()})

    def taken_under(self, name: str, fingerprint: str) -> PolicyPlan:
        """The plan a receipt of ``name`` was made by: the registered one, or one it
        replaced (its last :data:`~freqguard.engine.plan.MOST_REPLACED`), so that a lease
        taken before a deploy is given back after it; else the registered one (which
        refuses the receipt).

        Raises:
            ConfigError: no policy of that name is registered.
        """
        plans, replaced = self._versions  # of one version: a deploy swaps both at once
        plan = plans.get(name) or self.plan(name)
        if plan.fingerprint == fingerprint:  # the usual release: no deploy since
            return plan
        olders = reversed(replaced.get(name, {}).values())
        return next((o for o in olders if o.fingerprint == fingerprint), plan)

    def plan(self, name: str) -> PolicyPlan:
        """The plan registered under a policy's name.

        Raises:
            ConfigError: no policy of that name is registered.
        """
        plan = self._plans.get(name) if isinstance(name, str) else None  # (no foreign hash)
        if plan is None:
            known = ", ".join(sorted(self._plans)) or "none"
            if isinstance(name, Policy):
                raise ConfigError(
                    f"hit takes a policy's name, got {shown(name)}: register it "
                    f"(guard.add_policy(policy), or Guard(backend, [policy])), then give "
                    f"{name.name!r} (registered: {known})"
                )
            if not isinstance(name, str):  # limits' hit(item, key), say
                raise ConfigError(
                    f"hit takes a policy's name, got {type(name).__name__} {shown(name)}: register "
                    f"a Policy of its rules, then give its name (registered: {known})"
                )
            close = difflib.get_close_matches(name[:64], list(self._by_name), n=1)
            if close:
                raise ConfigError(
                    f"unknown policy {shown(name)} (did you mean {close[0]!r}? registered: {known})"
                )
            raise ConfigError(
                f"unknown policy {shown(name)} (registered: {known}): register it first, "
                f"guard.add_policy(Policy({shown(name[:64])}, Rule(...), ...)) or "
                "Guard(backend, policies=[...])"
            )
        return plan

    @property
    def policies(self) -> Mapping[str, Policy]:
        """The registered policies by name (read-only)."""
        return self._by_name
