"""Guard and AsyncGuard: the engine every operation goes through.

Both drive the same I/O-free operations (``freqguard.core``); they differ only in how a batch
of script calls is sent and how a wait is made.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import TypeVar, overload

from freqguard.backends.base import AsyncBackend, SyncBackend
from freqguard.backends.memory import MemoryBackend
from freqguard.bounds import check_time
from freqguard.clock import Clock
from freqguard.core import Op, PolicyPlan, Sleep, acquire_op, decide_op, many_op, refund_op
from freqguard.decision import Decision, Receipt
from freqguard.errors import BackendUnavailable, ConfigError
from freqguard.policy import Policy
from freqguard.rules import check_name
from freqguard.script import CHECK, HIT, REFUND, RESET

__all__ = ["AsyncGuard", "Guard"]

T = TypeVar("T")


def _check_backend(guard: str, backend: object, methods: tuple[str, ...]) -> None:
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
        got = repr(backend)
        other = "AsyncGuard" if guard == "Guard" else "Guard"
        twins = ("aexecute", "aexecute_many") if guard == "Guard" else ("execute", "execute_many")
        if all(callable(getattr(backend, name, None)) for name in twins):
            got += f": {type(backend).__name__} serves {other}, not {guard}"
    kind = "a sync" if guard == "Guard" else "an async"
    raise TypeError(
        f"{guard} needs {kind} backend (with {', '.join(methods)} and clock) as its first "
        f"argument, got {got}"
    )


class _GuardBase:
    """Policies, clock and validation: everything but I/O."""

    def __init__(self, policies: Iterable[Policy], clock: Clock | None, prefix: str) -> None:
        if isinstance(policies, Policy):
            raise TypeError(
                f"policies takes a list of policies: pass policies=[policy], got {policies!r}"
            )
        self.clock = clock
        self.prefix = check_name("key prefix", prefix)
        self._plans: dict[str, PolicyPlan] = {}
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
        self._plans[policy.name] = PolicyPlan(policy, self.prefix)

    @property
    def policies(self) -> Mapping[str, Policy]:
        """The registered policies by name."""
        return {name: plan.policy for name, plan in self._plans.items()}

    def _plan(self, policy: str) -> PolicyPlan:
        plan = self._plans.get(policy)
        if plan is None:
            known = ", ".join(sorted(self._plans)) or "none"
            raise ConfigError(f"unknown policy {policy!r} (registered: {known})")
        return plan

    def _now(self) -> int | None:
        return None if self.clock is None else check_time(self.clock.now_us())

    def _decide(
        self, policy: str, cost: object, ctx: Mapping[str, object], mode: int
    ) -> Op[Decision]:
        plan = self._plan(policy)
        checked = plan.check_cost(cost, upper=mode == HIT)
        return decide_op(plan, plan.texts(ctx), checked, mode, self._now())

    def _many(
        self, policy: str, contexts: Iterable[Mapping[str, object]], cost: object
    ) -> Op[list[Decision]]:
        plan = self._plan(policy)
        checked = plan.check_cost(cost)
        texts = [plan.texts(ctx) for ctx in contexts]  # all validated before anything is sent
        return many_op(plan, texts, checked, self._now)

    def _acquire(
        self,
        policy: str,
        timeout: float | None,
        cost: object,
        ctx: Mapping[str, object],
        clock: Clock,
    ) -> Op[Decision]:
        plan = self._plan(policy)
        checked = plan.check_cost(cost)
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0 <= timeout < float("inf")
        ):
            raise ConfigError(f"timeout must be None or finite seconds >= 0, got {timeout!r}")
        return acquire_op(plan, plan.texts(ctx), checked, timeout, self._now, clock)

    def _refund(
        self, target: str | Decision, cost: int | None, ctx: Mapping[str, object]
    ) -> Op[Decision] | Decision:
        """A refund by context (the newest units) or of one decision (exactly its own); a
        decision that consumed nothing is answered as it is."""
        if not isinstance(target, Decision):
            return self._decide(target, 1 if cost is None else cost, ctx, REFUND)
        if cost is not None or ctx:
            raise ConfigError(
                "refund(decision) takes no cost or context: it gives back exactly what that "
                "hit took; use refund(policy, cost, **context) to give back the newest units"
            )
        receipt = target.receipt
        if receipt is None:
            return target
        with _CLAIM:  # two refunds of one decision at once: only one goes through
            if receipt.spent:
                raise ConfigError(f"this decision of policy {target.policy!r} was already refunded")
            receipt.spent = True
        try:
            return refund_op(self._plan(target.policy), receipt, self._now())
        except BaseException:
            _unspend(receipt)
            raise


_CLAIM = threading.Lock()


def _unspend(receipt: Receipt | None) -> None:
    """A refund that failed gives its receipt back, so that it can be tried again."""
    if receipt is not None:
        receipt.spent = False


class Guard(_GuardBase):
    """The synchronous engine.

    Args:
        backend: where state lives (default: a new :class:`MemoryBackend`).
        policies: the policies to register.
        clock: pins time for every backend (tests, replays); default: the backend's own time.
        prefix: the key prefix.

    Raises:
        TypeError: ``backend`` is not a sync backend (an async-only one, or policies given
            where the backend goes: write ``policies=[...]``).
        ConfigError: a bad policy or prefix.
    """

    def __init__(
        self,
        backend: SyncBackend | None = None,
        policies: Iterable[Policy] = (),
        clock: Clock | None = None,
        *,
        prefix: str = "fg",
    ) -> None:
        if backend is not None:
            _check_backend("Guard", backend, ("execute", "execute_many", "close"))
        super().__init__(policies, clock, prefix)
        self.backend: SyncBackend = backend if backend is not None else MemoryBackend()

    def _run(self, op: Op[T]) -> T:
        execute_many = self.backend.execute_many
        try:
            step = next(op)
            while True:
                if isinstance(step, Sleep):
                    (self.clock or self.backend.clock).sleep(step.seconds)
                    step = op.send([])
                    continue
                try:
                    replies = execute_many(step)
                except BackendUnavailable as exc:  # the operation may undo what it did
                    step = op.throw(exc)
                else:
                    step = op.send(replies)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def hit(self, policy: str, cost: int = 1, **ctx: object) -> Decision:
        """Check and consume, all-or-nothing. ``cost=0`` only checks (as ``peek``).

        Raises:
            ConfigError: unknown policy, missing or unknown dimension, bad cost.
            BackendUnavailable: the store failed.
        """
        plan = self._plan(policy)
        if plan.single_slot:  # the common case, without the generator machinery
            texts, checked = plan.texts(ctx), plan.check_cost(cost)
            call = plan.call(texts, self._now(), checked, HIT)
            return plan.decide([self.backend.execute(call)], texts, checked, HIT)
        return self._run(self._decide(policy, cost, ctx, HIT))

    def peek(self, policy: str, **ctx: object) -> Decision:
        """What a hit of cost 1 would answer (remaining as of now); changes nothing."""
        return self._run(self._decide(policy, 1, ctx, CHECK))

    def hit_many(
        self, policy: str, contexts: Iterable[Mapping[str, object]], cost: int = 1
    ) -> list[Decision]:
        """Many hits in one batch, decided in order; every context is validated first."""
        return self._run(self._many(policy, contexts, cost))

    def acquire(
        self, policy: str, timeout: float | None = None, cost: int = 1, **ctx: object
    ) -> Decision:
        """Wait for the hit's turn (at most ``timeout`` seconds), then consume.

        Raises:
            CapExceeded: when the turn comes later than the timeout allows (at once, no wait).
        """
        clock = self.clock or self.backend.clock
        return self._run(self._acquire(policy, timeout, cost, ctx, clock))

    @overload
    def refund(self, policy: Decision, /) -> Decision: ...

    @overload
    def refund(self, policy: str, cost: int = 1, **ctx: object) -> Decision: ...

    def refund(self, policy: str | Decision, cost: int | None = None, **ctx: object) -> Decision:
        """Give back what a hit consumed (e.g. the vendor call failed).

        ``refund(decision)`` gives back exactly what that hit took, in every rule, and only
        once. ``refund(policy, cost, **context)`` gives back the ``cost`` newest units of the
        context instead, whoever's they are: if another hit of that context came in between,
        its units go back and the refunding hit's stay, so a rolling window may then admit up
        to ``cost`` more than its limit before the older units leave it.

        Raises:
            ConfigError: a decision already refunded, or given with a cost or context.
        """
        op = self._refund(policy, cost, ctx)
        if isinstance(op, Decision):
            return op
        try:
            return self._run(op)
        except BaseException:
            _unspend(policy.receipt if isinstance(policy, Decision) else None)
            raise

    def reset(self, policy: str, **ctx: object) -> None:
        """Forget every rule's state for this context."""
        self._run(self._decide(policy, 1, ctx, RESET))

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncGuard(_GuardBase):
    """The asyncio engine; the same operations as :class:`Guard`, awaited.

    Takes the same arguments as :class:`Guard`, with an async backend (``MemoryBackend``,
    ``AsyncRedisBackend``, ``async_backend_from_url(...)``); a sync-only one is a TypeError.
    """

    def __init__(
        self,
        backend: AsyncBackend | None = None,
        policies: Iterable[Policy] = (),
        clock: Clock | None = None,
        *,
        prefix: str = "fg",
    ) -> None:
        if backend is not None:
            _check_backend("AsyncGuard", backend, ("aexecute", "aexecute_many", "aclose"))
        super().__init__(policies, clock, prefix)
        self.backend: AsyncBackend = backend if backend is not None else MemoryBackend()

    async def _run(self, op: Op[T]) -> T:
        execute_many = self.backend.aexecute_many
        try:
            step = next(op)
            while True:
                if isinstance(step, Sleep):
                    await (self.clock or self.backend.clock).asleep(step.seconds)
                    step = op.send([])
                    continue
                try:
                    replies = await execute_many(step)
                except BackendUnavailable as exc:  # the operation may undo what it did
                    step = op.throw(exc)
                else:
                    step = op.send(replies)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def hit(self, policy: str, cost: int = 1, **ctx: object) -> Decision:
        """See :meth:`Guard.hit`."""
        plan = self._plan(policy)
        if plan.single_slot:
            texts, checked = plan.texts(ctx), plan.check_cost(cost)
            call = plan.call(texts, self._now(), checked, HIT)
            return plan.decide([await self.backend.aexecute(call)], texts, checked, HIT)
        return await self._run(self._decide(policy, cost, ctx, HIT))

    async def peek(self, policy: str, **ctx: object) -> Decision:
        """See :meth:`Guard.peek`."""
        return await self._run(self._decide(policy, 1, ctx, CHECK))

    async def hit_many(
        self, policy: str, contexts: Iterable[Mapping[str, object]], cost: int = 1
    ) -> list[Decision]:
        """See :meth:`Guard.hit_many`."""
        return await self._run(self._many(policy, contexts, cost))

    async def acquire(
        self, policy: str, timeout: float | None = None, cost: int = 1, **ctx: object
    ) -> Decision:
        """See :meth:`Guard.acquire`."""
        clock = self.clock or self.backend.clock
        return await self._run(self._acquire(policy, timeout, cost, ctx, clock))

    @overload
    async def refund(self, policy: Decision, /) -> Decision: ...

    @overload
    async def refund(self, policy: str, cost: int = 1, **ctx: object) -> Decision: ...

    async def refund(
        self, policy: str | Decision, cost: int | None = None, **ctx: object
    ) -> Decision:
        """See :meth:`Guard.refund`."""
        op = self._refund(policy, cost, ctx)
        if isinstance(op, Decision):
            return op
        try:
            return await self._run(op)
        except BaseException:
            _unspend(policy.receipt if isinstance(policy, Decision) else None)
            raise

    async def reset(self, policy: str, **ctx: object) -> None:
        """See :meth:`Guard.reset`."""
        await self._run(self._decide(policy, 1, ctx, RESET))

    async def aclose(self) -> None:
        await self.backend.aclose()

    async def __aenter__(self) -> AsyncGuard:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
