"""A guard's registry and settings: its policies (compiled once into plans), clock, prefix,
``on_error``, breaker, deny cache and observers, validated at construction."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from freqguard.bounds import check_time
from freqguard.clock import Clock
from freqguard.engine.breaker import Breaker
from freqguard.engine.denycache import DenyCache
from freqguard.engine.failover import (
    shared_out,
)
from freqguard.engine.plan import PolicyPlan
from freqguard.errors import (
    ConfigError,
)
from freqguard.observe.base import Observer, backend_label
from freqguard.policy import Fallback, Policy, check_on_error
from freqguard.rules import check_name
from freqguard.script.calls import ScriptCall
from freqguard.script.contract import HIT

__all__ = ["DEFAULT_BREAKER", "Registry", "check_backend"]

DEFAULT_BREAKER: Any = object()  # "a new Breaker()": a default argument must not be shared


def check_backend(guard: str, backend: object, methods: tuple[str, ...]) -> None:
    """Refuse, at construction, a backend the guard could not drive: the alternative is an
    AttributeError at the first hit, far from the mistake."""
    if all(callable(getattr(backend, name, None)) for name in methods) and hasattr(
        backend, "clock"
    ):
        return
    if isinstance(backend, (list, tuple)) and backend and isinstance(backend[0], Policy):
        got = f"a {type(backend).__name__} of policies: pass policies=[...]"
    elif isinstance(backend, Policy):
        got = "a Policy: pass policies=[...]"
    elif isinstance(backend, str):
        maker = "backend_from_url" if guard == "Guard" else "async_backend_from_url"
        got = f"the string {backend!r}: pass {maker}({backend!r})"
    else:
        got = _short(repr(backend))
        other = "AsyncGuard" if guard == "Guard" else "Guard"
        twins = ("aexecute", "aexecute_many") if guard == "Guard" else ("execute", "execute_many")
        if all(callable(getattr(backend, name, None)) for name in twins):
            # the hint first: a client's repr can run to hundreds of characters
            got = f"{type(backend).__name__}, which serves {other}, not {guard} ({got})"
    kind = "a sync" if guard == "Guard" else "an async"
    raise TypeError(
        f"{guard} needs {kind} backend (with {', '.join(methods)} and clock) as its first "
        f"argument, got {got}"
    )


def _short(text: str, most: int = 80) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."


class Registry:
    """Policies and settings: what every operation of a guard reads."""

    _methods: tuple[str, ...]  # what a backend (and a fallback backend) must offer

    def __init__(
        self,
        backend: object,
        policies: Iterable[Policy],
        clock: Clock | None,
        prefix: str,
        on_error: object,
        deny_cache: object,
        observers: Iterable[Observer],
        breaker: Breaker | None,
    ) -> None:
        if isinstance(policies, Policy):
            raise TypeError(
                f"policies takes a list of policies: pass policies=[policy], got {policies!r}"
            )
        self.clock = clock
        self.prefix = check_name("key prefix", prefix)
        self.on_error = check_on_error(on_error, type(self).__name__, self._methods)
        self._given_on_error = self.on_error  # as given: an async face adapts it (_adopt)
        self._adapt: Callable[[object], object] = _same
        if breaker is not None and not isinstance(breaker, Breaker):
            raise ConfigError(f"breaker must be a Breaker or None, got {breaker!r}")
        self.breaker = breaker
        self.observers: tuple[Observer, ...] = tuple(observers)
        for observer in self.observers:
            if not isinstance(observer, Observer):
                raise TypeError(f"observers must have decided() and failed(), got {observer!r}")
        self._cache = _deny_cache(deny_cache, clock)
        self._plain = not self.observers and self._cache is None
        self._broke: set[tuple[int, str, type[Exception]]] = set()  # observers' errors logged
        self._label = backend_label(backend)
        # a backend of several nodes (Redis Cluster) names each call's: one circuit each
        self._node_of: Callable[[ScriptCall], object] | None = getattr(backend, "node_of", None)
        # the store's time as this process best knows it: calendar periods are sent around it
        self._estimate: Callable[[], int] = backend.clock.now_us  # type: ignore[attr-defined]
        # records shared in buckets (a Redis backend's buckets=N): part of every key
        self._buckets: int = getattr(backend, "buckets", 0)
        self._plans: dict[str, PolicyPlan] = {}
        self._on_error: dict[str, object] = {}
        self._shared: dict[tuple[str, int], tuple[PolicyPlan, PolicyPlan]] = {}  # _shared_out
        for policy in policies:
            self.add_policy(policy)

    def add_policy(self, policy: Policy) -> None:
        """Register a policy; re-adding an equal one is a no-op, a different one an error."""
        if not isinstance(policy, Policy):
            raise ConfigError(f"add_policy takes a Policy, got {policy!r}")
        known = self._plans.get(policy.name)
        if known is not None:
            if known.policy == policy:
                return
            raise ConfigError(f"a different policy named {policy.name!r} is already registered")
        # stored as given (an async face of this guard adapts what it reads: _Adapted), checked as
        # this guard will drive it
        on_error = self._given_on_error if policy.on_error is None else policy.on_error
        where = f"policy {policy.name!r} on {type(self).__name__}"
        check_on_error(self._adapt(on_error), where, self._methods)
        plan = PolicyPlan(policy, self.prefix, self._estimate, self._buckets)
        if isinstance(on_error, Fallback):  # its shared-out rules checked now, not at a hit
            self._shared_out(plan, on_error)
        self._plans[policy.name] = plan
        self._on_error[policy.name] = on_error

    def _adopt(self, other: Registry, fallback: Callable[[object], object]) -> None:
        """Share ``other``'s registry, breaker, deny cache and observers, not copies: a
        policy added to either, now or later, is known to both (an async face of a sync
        guard). ``fallback`` adapts its fallback backends to this guard's kind."""
        self._plans = other._plans
        self._on_error = _Adapted(other._on_error, fallback)
        self.on_error = fallback(other.on_error)
        self._given_on_error, self._adapt = other._given_on_error, fallback
        self.breaker, self.observers, self._cache = other.breaker, other.observers, other._cache
        self._shared = other._shared
        self._plain = other._plain

    @property
    def policies(self) -> Mapping[str, Policy]:
        """The registered policies by name."""
        return {name: plan.policy for name, plan in self._plans.items()}

    def _lookup(self, policy: str) -> PolicyPlan:
        """The plan registered under a policy's name."""
        plan = self._plans.get(policy)
        if plan is None:
            known = ", ".join(sorted(self._plans)) or "none"
            raise ConfigError(f"unknown policy {policy!r} (registered: {known})")
        return plan

    def _now(self) -> int | None:
        return None if self.clock is None else check_time(self.clock.now_us())

    def _request(
        self, policy: str, cost: object, ctx: Mapping[str, object], mode: int
    ) -> tuple[PolicyPlan, dict[str, str], int]:
        """A request's plan, context (as text) and cost, validated."""
        plan = self._lookup(policy)
        checked = plan.check_cost(cost, upper=mode == HIT)
        return plan, plan.texts(ctx), checked

    def _one_call(self, plan: PolicyPlan) -> bool:
        """Whether a hit of ``plan`` may take the one-call path: one slot, and nothing to do
        around the call (no observers, no deny cache, failures raised, no store failures
        being counted: the breaker has nothing to check or reset)."""
        breaker = self.breaker
        return (
            plan.single_part
            and self._plain
            and self._on_error[plan.name] == "raise"
            and (breaker is None or not breaker.counting)
        )

    def _on_failure(self, plan: PolicyPlan, cost: int = 0) -> tuple[object, PolicyPlan]:
        """How a store failure of ``plan`` is answered (``"raise"``, ``"allow"``, ``"deny"``
        or the backend to fall back on) and the plan a fallback decides with: ``plan``
        itself, or its limits shared out (:class:`~freqguard.failure.Fallback`), made once.
        A ``cost`` the shared-out limits can never admit fails closed instead."""
        on_error = self._on_error[plan.name]
        if not isinstance(on_error, Fallback):
            return on_error, plan
        there = self._shared_out(plan, on_error)
        return (on_error.backend if there.fits(cost) else "deny"), there

    def _shared_out(self, plan: PolicyPlan, fallback: Fallback) -> PolicyPlan:
        """``plan`` with its limits shared out among the fallback's ``workers``, its keys as
        the fallback's backend builds them (its buckets), made once."""
        workers = fallback.workers
        made = self._shared.get((plan.name, workers))
        if made is None or made[0] is not plan:
            buckets: int = getattr(fallback.backend, "buckets", 0)
            scaled = PolicyPlan(shared_out(plan.policy, workers), self.prefix, buckets=buckets)
            made = self._shared[(plan.name, workers)] = (plan, scaled)
        return made[1]


class _Adapted(dict[str, object]):
    """A live mirror of another guard's per-policy ``on_error``, each value adapted once (a
    hit reads it: no adapter may be made per hit)."""

    def __init__(self, source: dict[str, object], adapt: Callable[[object], object]) -> None:
        super().__init__()
        self._source, self._adapt = source, adapt
        self._made: dict[int, tuple[object, object]] = {}  # id(value) -> (value, adapted)

    def __getitem__(self, name: str) -> object:
        value = self._source[name]
        made = self._made.get(id(value))
        if made is None or made[0] is not value:
            made = self._made[id(value)] = (value, self._adapt(value))
        return made[1]

    def __setitem__(self, name: str, value: object) -> None:
        self._source[name] = value


def _same(value: object) -> object:
    return value


def _deny_cache(deny_cache: object, clock: Clock | None) -> DenyCache | None:
    """The guard's deny cache: ``deny_cache`` denials (0: none) on a monotonic clock, or
    on the guard's own when it pins its time (its denials are in that time); or the
    :class:`DenyCache` given."""
    if isinstance(deny_cache, DenyCache):
        return deny_cache
    if deny_cache == 0 and not isinstance(deny_cache, bool):
        return None
    if clock is None:
        return DenyCache(deny_cache)  # type: ignore[arg-type] # (checked there)
    return DenyCache(deny_cache, clock=clock.now)  # type: ignore[arg-type]
