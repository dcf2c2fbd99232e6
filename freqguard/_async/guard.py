"""The guard: the engine every operation goes through.

Written once, for asyncio; the sync guard (``freqguard/_sync/guard.py``) is generated
from it by ``scripts/unasync.py``. Both are made of the same I/O-free parts
(:mod:`freqguard.engine`: the registry, the failover, the deny cache's use, the accounting
of store calls, the operations and the receipts, each one object) and drive the same
operations; only how a batch of calls is sent and a wait made differs (``_io.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import TypeVar, overload

from freqguard._async._io import Cancelled, Interrupt, Turns, send, sleep, unwind
from freqguard._async.leases import (
    AsyncLeaseBlock,
    give_back,
    give_back_unsent,
    refunding,
    releasing,
)
from freqguard.backends.base import AsyncBackend
from freqguard.backends.memory import MemoryBackend
from freqguard.clock import Clock, check_clock
from freqguard.decision import Decision
from freqguard.engine.accounting import Accounting, Outcome
from freqguard.engine.awaitables import must_await
from freqguard.engine.breaker import Breaker
from freqguard.engine.denials import Denials
from freqguard.engine.denycache import DenyCache
from freqguard.engine.failover import Failover
from freqguard.engine.hits import Hits
from freqguard.engine.limits import limit_call, limits_calls, limits_of
from freqguard.engine.observers import Observers
from freqguard.engine.ops import Elsewhere, Op, Sleep
from freqguard.engine.refunds import Receipts
from freqguard.engine.registry import PolicyRegistry
from freqguard.engine.settings import (
    DEFAULT_BREAKER,
    Now,
    PeerHabits,
    Shared,
    Sharing,
    check_backend,
    check_breaker,
    check_observers,
    check_policies,
)
from freqguard.errors import BackendUnavailable, ConfigError
from freqguard.observe.base import Observer, backend_label
from freqguard.policy import OnError, Policy, check_on_error
from freqguard.rates import Rate
from freqguard.rules import Rule, check_name
from freqguard.script.calls import Reply, ScriptCall
from freqguard.script.contract import CHECK, REFUND

__all__ = ["AsyncGuard"]

T = TypeVar("T")


class AsyncGuard(PeerHabits):
    """The asyncio engine.

    Args:
        backend: where state lives (default: a new :class:`MemoryBackend`).
        policies: the policies to register.
        clock: pins time for every backend (tests, replays); default: the backend's own time.
        prefix: the key prefix.
        on_error: what a store failure answers: ``"raise"`` (default), ``"allow"``,
            ``"deny"``, or a backend to decide on instead (see :mod:`freqguard.failure`);
            ``Policy(..., on_error=...)`` overrides it per policy.
        deny_cache: remember up to this many denials and answer them without the store
            until their ``retry_after`` (0: off), on a monotonic clock (the guard's own when
            it pins its time); or a :class:`~freqguard.denycache.DenyCache` to use (see
            :mod:`freqguard.denycache`).
        observers: told of every decision and store error (:mod:`freqguard.observe`).
        breaker: the circuit breaker (default ``Breaker()``: open after 5 consecutive
            failures, probe after 5 s); None to call the store every time.

    Raises:
        TypeError: ``backend`` is of the other kind (a sync one for an asyncio guard, or
            the reverse; ``MemoryBackend`` serves both), or policies were given where the
            backend goes (write ``policies=[...]``).
        ConfigError: a bad policy, prefix, on_error or deny_cache.
    """

    _methods = ("aexecute", "aexecute_many", "aclose")

    def __init__(
        self,
        backend: AsyncBackend | None = None,
        policies: Iterable[Policy] = (),
        clock: Clock | None = None,
        *,
        prefix: str = "fg",
        on_error: OnError = "raise",
        deny_cache: int | DenyCache = 0,
        observers: Iterable[Observer] = (),
        breaker: Breaker | None = DEFAULT_BREAKER,
    ) -> None:
        if backend is not None:
            check_backend("AsyncGuard", backend, self._methods)
        self.backend: AsyncBackend = backend if backend is not None else MemoryBackend()
        policies = check_policies(policies)
        self._now = Now(clock)
        self.prefix = check_name("key prefix", prefix)
        owner = type(self).__name__
        self.on_error: object = check_on_error(on_error, owner, self._methods)
        self.breaker = check_breaker(breaker)
        self.observers = check_observers(observers)
        denials = Denials(deny_cache, clock)
        registry = PolicyRegistry(
            self.prefix, self.backend.clock.now_us, getattr(self.backend, "bins", 0)
        )
        failover = Failover(self.on_error, owner, self._methods, self.breaker, self.prefix)
        self._compose(registry, failover, denials)
        for policy in policies:
            self.add_policy(policy)

    def _compose(self, policies: PolicyRegistry, failover: Failover, denials: Denials) -> None:
        """Make the parts every operation goes through, around the guard's registry,
        failover and deny cache (its own, or those of the sync guard it faces)."""
        label = backend_label(self.backend)
        observers = Observers(self.observers, label)
        node_of = getattr(self.backend, "node_of", None)
        self._policies, self._failover, self._denials = policies, failover, denials
        self._accounting = Accounting(self.breaker, observers, node_of, label)
        self._hits = Hits(policies, failover, denials, observers, self._now, node_of is not None)
        self._receipts = Receipts(policies, failover, denials, self._now)
        self._turns = Turns()

    def _shared(self) -> Shared:
        """What an async face of this guard shares with it (see :meth:`_adopt`)."""
        parts = (self._policies, self._failover, self._denials, self.breaker, self.observers)
        return Shared(*parts)

    def _adopt(self, other: Sharing, fallback: Callable[[object], object]) -> None:
        """Share ``other``'s registry, ``on_error``, breaker, deny cache and observers (not
        copies: a policy added to either is known to both); ``fallback`` adapts its fallbacks."""
        shared = other._shared()
        self.breaker, self.observers = shared.breaker, shared.observers
        failover = shared.failover.facing(fallback, type(self).__name__, self._methods)
        self.on_error = failover.default
        self._compose(shared.policies, failover, shared.denials)

    @property
    def clock(self) -> Clock | None:
        """The clock that pins time for every backend, or None (the backend's own time)."""
        return self._now.clock

    @clock.setter
    def clock(self, clock: Clock | None) -> None:
        self._now.clock = check_clock(clock, "guard.clock")

    @property
    def policies(self) -> Mapping[str, Policy]:
        """The registered policies by name."""
        return self._policies.policies

    def add_policy(self, policy: Policy, *, replace: bool = False) -> None:
        """Register a policy; re-adding an equal one is a no-op, a different one an error,
        unless ``replace``: it decides from then on, states both keep going on counting.

        Raises:
            ConfigError: not a Policy, another of that name, or an ``on_error`` it cannot take.
        """
        self._policies.register(policy, replace, self._failover, self._denials)

    @overload
    async def _run(self, op: ScriptCall, policy: str, whole: bool = False) -> Reply: ...

    @overload
    async def _run(self, op: Op[T], policy: str, whole: bool = False) -> T: ...

    async def _run(self, op: Op[T] | ScriptCall, policy: str, whole: bool = False) -> T | Reply:
        """Drive ``op``: a lone call (:meth:`Hits.hit`'s) sent alone, its reply the answer;
        an operation step by step. A cancelled caller's operation gives back what it took
        first; with ``whole`` (it writes in more than one call, a batch, a lease's take or
        give-back) after its call under way is let finish, so that what that call took goes
        back too."""
        if type(op) is ScriptCall:
            try:
                return await self.backend.aexecute(op)
            except BackendUnavailable as exc:
                self._accounting.failed_alone(policy, op, exc)
                raise
        assert not isinstance(op, ScriptCall)
        try:
            step = next(op)
            while True:
                try:
                    replies = await self._step(step, policy, whole)
                except (BackendUnavailable, ConfigError) as exc:  # it may undo what it did
                    step = op.throw(exc)
                    continue
                except Cancelled as cancelled:
                    raise await unwind(op, cancelled, self.backend) from None
                step = op.send(replies)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _step(self, step: object, policy: str, whole: bool) -> list[Reply]:
        """A step: its calls sent (breaker and observers told), or to the fallback; a wait."""
        if type(step) is list:
            accounting = self._accounting
            sent = accounting.admitted(policy, step)
            try:
                outcome: Outcome = await send(self.backend, sent, whole)
            except (BackendUnavailable, ConfigError) as exc:  # a refusal: the rest goes back
                outcome = exc
            return accounting.finished(policy, step, sent, outcome)
        if isinstance(step, Elsewhere):
            return await send(step.backend, step.calls, whole)
        assert isinstance(step, Sleep)
        await sleep(self.clock or self.backend.clock, step)
        return []

    @must_await
    async def hit(self, policy: str, cost: int = 1, **ctx: object) -> Decision:
        """Check and consume, all-or-nothing. ``cost=0`` only checks (as ``peek``).

        Raises:
            ConfigError: unknown policy, missing or unknown dimension, bad cost.
            BackendUnavailable: the store failed (and ``on_error`` is ``"raise"``).
        """
        hits = self._hits
        hit = hits.hit(policy, cost, ctx, lone=self._accounting.quiet)
        if hit.cached is not None:
            return hit.cached
        work = hit.call or hits.hit_op(hit)  # its lone call, or the operation
        return hits.hit_done(hit, await self._run(work, policy, not hit.plan.single_part))

    @must_await
    async def peek(self, policy: str, cost: int = 1, **ctx: object) -> Decision:
        """What a hit of ``cost`` would answer (remaining as of now); changes nothing."""
        return await self._run(self._hits.decide(policy, cost, ctx, CHECK), policy)

    @must_await
    async def hit_many(
        self, policy: str, contexts: Iterable[Mapping[str, object]], cost: int = 1
    ) -> list[Decision]:
        """Many hits in one batch, decided in order; every context is validated first."""
        hits, sent, op = self._hits.many(policy, contexts, cost)
        decided = await self._run(op, policy, True) if sent else []
        return self._hits.many_done(hits, sent, decided)

    @must_await
    async def acquire(
        self, policy: str, *, timeout: float | None = None, cost: int = 1, **ctx: object
    ) -> Decision:
        """Wait for the hit's turn (at most ``timeout`` seconds; None: as long as it takes),
        then consume (by name both); a process's denied callers of one key wait in line.
        Raises: CapExceeded, when the turn comes later than the timeout allows (at once)."""
        clock = self.clock or self.backend.clock
        hit, op = self._hits.acquire(policy, timeout, cost, ctx, clock)  # its deadline set
        async with self._turns.place(policy, hit.texts, hit.cost) as place:  # once denied
            decision = place.took(await self._run(op, policy, not hit.plan.single_part))
        return self._hits.hit_done(hit, decision)

    @overload
    @must_await
    async def refund(self, policy: Decision, /) -> Decision: ...

    @overload
    @must_await
    async def refund(self, policy: str, cost: int = 1, **ctx: object) -> Decision: ...

    @must_await
    async def refund(
        self,
        policy: str | Decision,
        cost: int | None = None,
        **ctx: object,
    ) -> Decision:
        """Give back what a hit consumed (e.g. the vendor call failed).

        ``refund(decision)`` gives back exactly what that hit took, in every rule, and only
        once. ``refund(policy, cost, **context)`` gives back the ``cost`` newest units of the
        context instead, whoever's they are: if another hit of that context came in between,
        its units go back and the refunding hit's stay, so a rolling window may then admit up
        to ``cost`` more than its limit before the older units leave it.

        Raises:
            ConfigError: a decision already refunded, or given with a cost or context; a
                refund by context of a policy that holds leases (:meth:`release` them).
        """
        started: list[bool] = []  # the try first: a Ctrl-C in it gives back what it took
        try:
            if not isinstance(policy, Decision):
                count = 1 if cost is None else cost
                return await self._run(self._hits.decide(policy, count, ctx, REFUND), policy)
            return await give_back(self, policy, refunding(self, policy, cost, ctx), started)
        except Interrupt:  # a Ctrl-C as it began: nothing went, it goes now
            if not started and isinstance(policy, Decision):
                await give_back_unsent(self, policy, refunding(self, policy, cost, ctx))
            raise

    def lease(self, policy: str, cost: int = 1, **ctx: object) -> AsyncLeaseBlock:
        """A lease of a policy with a concurrency rule (:meth:`take_lease`), given back when
        the block ends, however (:meth:`release`). ``async with guard.lease("llm",
        user="u1") as d:``, then act ``if d.allowed``."""
        return AsyncLeaseBlock(self, policy, cost, ctx)

    @must_await
    async def take_lease(self, policy: str, cost: int = 1, **ctx: object) -> Decision:
        """A lease, taken in one call with the policy's other rules (all-or-nothing); give
        it back with :meth:`release`, else it frees itself after the rule's ``lease``."""
        block = AsyncLeaseBlock(self, policy, cost, ctx)
        try:
            return await block.__aenter__()
        except BaseException:  # a Ctrl-C as the block's entry returned: given back
            await block.release_taken()
            raise

    @must_await
    async def release(self, decision: Decision, /) -> Decision:
        """Give back the leases ``decision`` took, once; its rate rules keep the call."""
        started: list[bool] = []
        try:
            return await give_back(self, decision, releasing(self, decision), started)
        except Interrupt:  # a Ctrl-C as it began: nothing went, it goes now
            if not started:
                await give_back_unsent(self, decision, releasing(self, decision))
            raise

    async def reset(
        self, policy: str, *, rules: Iterable[str | Rule] | None = None, **ctx: object
    ) -> tuple[str, ...]:
        """Forget the counts of the rules keyed by exactly the dimensions ``ctx`` names, for
        those values; with ``rules``, of those rules (each keyed by exactly the dimensions
        given). State that other contexts share is never touched unless named: resetting
        a recipient leaves a global rule's count alone, and resetting one (user, ip) does
        not free the ip for its other users. Returns the ids of the rules reset.

        Raises:
            ConfigError: no rule keyed by exactly those dimensions, an unknown rule or
                dimension, or one of several rules sharing a sliding log named alone.
            BackendUnavailable: the store failed, whatever ``on_error`` says.
        """
        op, ids = self._hits.reset(policy, rules, ctx)
        await self._run(op, policy)
        return ids

    async def set_limit(
        self,
        policy: str,
        rule: str | Rule,
        rate: str | Rate | None,
        *,
        ttl: float | timedelta | None = None,
        **ctx: object,
    ) -> None:
        """Decide one rule at another rate for one value of its partition (a recipient, a
        tenant): every key of the rule under that value, in every process, from its next
        hit; ``rate`` None exempts it (counted, never denying: as a shadow rule). Stored
        beside that value's states and read by the same call that decides.

        Args:
            rule: the rule of the policy named ``policy``: its id (its name) or the Rule.
            rate: a rate string, a :class:`Rate`, or None (exempt).
            ttl: seconds (or a timedelta) until the limit lapses; None: until cleared.
            ctx: the partition's value, e.g. ``recipient="+4917..."``.

        Raises:
            ConfigError: an unknown policy or rule, a context other than the partition, a
                rate the rule cannot take (its strategy's or the policy's bounds), a bad ttl.
        """
        plan = self._policies.plan(policy)
        call = limit_call(plan, rule, rate, ttl, ctx, self._now())
        await send(self.backend, [call], False)
        self._denials.forget(plan, None)

    async def clear_limit(self, policy: str, rule: str | Rule, **ctx: object) -> None:
        """The rule at its own rate again for that partition value (:meth:`set_limit`)."""
        plan = self._policies.plan(policy)
        call = limit_call(plan, rule, None, None, ctx, self._now(), clear=True)
        await send(self.backend, [call], False)
        self._denials.forget(plan, None)

    async def limits_for(self, policy: str, **ctx: object) -> dict[str, Rate | None]:
        """Every rule's rate by rule id as it applies to ``ctx`` (the partition values, or a
        hit's whole context) now: its per-key limit's, None where exempt, else its own."""
        plan = self._policies.plan(policy)
        replies = await send(self.backend, limits_calls(plan, ctx, self._now()), False)
        return limits_of(plan, replies, ctx)  # a tier by the key's own value is its rate

    async def aclose(self) -> None:
        """Close the backend (its connections), and every fallback backend."""
        await self.backend.aclose()
        for fallback in self._failover.backends(besides=self.backend):
            await fallback.aclose()

    async def __aenter__(self) -> AsyncGuard:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
