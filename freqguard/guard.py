"""Guard and AsyncGuard: the engine every operation goes through.

Both drive the same I/O-free operations (``freqguard.core``); they differ only in how a batch
of script calls is sent and how a wait is made.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar, overload

from freqguard._guard_base import DEFAULT_BREAKER, GuardBase, check_backend, maybe_applied, unspend
from freqguard.backends.base import AsyncBackend, Reply, ScriptCall, SyncBackend
from freqguard.backends.memory import MemoryBackend
from freqguard.clock import Clock
from freqguard.core import Op, Sleep, undo
from freqguard.decision import Decision
from freqguard.denycache import DenyCache
from freqguard.errors import BackendUnavailable
from freqguard.failure import Breaker, Elsewhere
from freqguard.observe import Observer
from freqguard.policy import OnError, Policy
from freqguard.script import CHECK, RESET

__all__ = ["AsyncGuard", "Guard"]

T = TypeVar("T")
_log = logging.getLogger("freqguard")


class Guard(GuardBase):
    """The synchronous engine.

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
        TypeError: ``backend`` is not a sync backend (an async-only one, or policies given
            where the backend goes: write ``policies=[...]``).
        ConfigError: a bad policy, prefix, on_error or deny_cache.
    """

    _methods = ("execute", "execute_many", "close")

    def __init__(
        self,
        backend: SyncBackend | None = None,
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
            check_backend("Guard", backend, self._methods)
        self.backend: SyncBackend = backend if backend is not None else MemoryBackend()
        breaker = Breaker() if breaker is DEFAULT_BREAKER else breaker
        args = (policies, clock, prefix, on_error, deny_cache, observers, breaker)
        super().__init__(self.backend, *args)

    def _run(self, op: Op[T], policy: str) -> T:
        execute_many = self.backend.execute_many
        try:
            step = next(op)
            while True:
                if type(step) is list:
                    try:
                        sent = self._admitted(policy, step)  # the breaker's say
                        try:
                            outcome: list[Reply] | BackendUnavailable = execute_many(sent)
                        except BackendUnavailable as exc:
                            outcome = exc
                        replies = self._finished(policy, step, sent, outcome)
                    except BackendUnavailable as exc:  # the operation may undo what it did
                        step = op.throw(exc)
                        continue
                elif isinstance(step, Elsewhere):
                    try:
                        replies = step.backend.execute_many(step.calls)
                    except BackendUnavailable as exc:
                        step = op.throw(exc)
                        continue
                else:
                    assert isinstance(step, Sleep)
                    (self.clock or self.backend.clock).sleep(step.seconds)
                    replies = []
                step = op.send(replies)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def hit(self, policy: str, cost: int = 1, **ctx: object) -> Decision:
        """Check and consume, all-or-nothing. ``cost=0`` only checks (as ``peek``).

        Raises:
            ConfigError: unknown policy, missing or unknown dimension, bad cost.
            BackendUnavailable: the store failed (and ``on_error`` is ``"raise"``).
        """
        plan = self._lookup(policy)
        if self._one_call(plan):
            # decide_op's one-call case, sent without its generator: worth ~10% of an
            # in-memory hit (benchmarks/README.md, "Guard.hit's one-call path")
            call = self._first_call(plan, cost, ctx)
            try:
                reply = self.backend.execute(call)
            except BackendUnavailable as exc:
                self._store_failed(exc, policy, [call])
                raise
            return self._first_reply(plan, call, reply)
        hit = self._hit(policy, cost, ctx)
        if hit.cached is not None:
            return hit.cached
        return self._hit_done(hit, self._run(self._hit_op(hit), policy))

    def peek(self, policy: str, **ctx: object) -> Decision:
        """What a hit of cost 1 would answer (remaining as of now); changes nothing."""
        return self._run(self._decide(policy, 1, ctx, CHECK), policy)

    def hit_many(
        self, policy: str, contexts: Iterable[Mapping[str, object]], cost: int = 1
    ) -> list[Decision]:
        """Many hits in one batch, decided in order; every context is validated first."""
        hits, sent, op = self._many(policy, contexts, cost)
        return self._many_done(hits, sent, self._run(op, policy) if sent else [])

    def acquire(
        self, policy: str, timeout: float | None = None, cost: int = 1, **ctx: object
    ) -> Decision:
        """Wait for the hit's turn (at most ``timeout`` seconds), then consume.

        Raises:
            CapExceeded: when the turn comes later than the timeout allows (at once, no wait).
        """
        clock = self.clock or self.backend.clock
        hit, op = self._acquire(policy, timeout, cost, ctx, clock)
        return self._hit_done(hit, self._run(op, policy))

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
            return self._run(op, op_policy(policy))
        except BaseException as exc:
            if not maybe_applied(exc):
                unspend(policy.receipt if isinstance(policy, Decision) else None)
            raise

    def reset(self, policy: str, **ctx: object) -> None:
        """Forget every rule's state for this context."""
        self._run(self._decide(policy, 1, ctx, RESET), policy)

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncGuard(GuardBase):
    """The asyncio engine; the same operations as :class:`Guard`, awaited.

    Takes the same arguments as :class:`Guard`, with an async backend (``MemoryBackend``,
    ``AsyncRedisBackend``, ``async_backend_from_url(...)``); a sync-only one is a TypeError.
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
        breaker = Breaker() if breaker is DEFAULT_BREAKER else breaker
        args = (policies, clock, prefix, on_error, deny_cache, observers, breaker)
        super().__init__(self.backend, *args)

    async def _run(self, op: Op[T], policy: str, whole: bool = False) -> T:
        """Drive ``op``. When the caller is cancelled, what the operation took is given back
        before the cancellation goes on (:meth:`_unwind`); with ``whole`` (an operation that
        writes in more than one call, or a batch) its call under way is first let finish, so
        that what that call took is known and goes back too."""
        try:
            step = next(op)
            while True:
                try:
                    replies = await self._step(step, policy, whole)
                except BackendUnavailable as exc:  # the operation may undo what it did
                    step = op.throw(exc)
                    continue
                except asyncio.CancelledError as cancelled:
                    await self._unwind(op, cancelled)
                    raise
                step = op.send(replies)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _step(self, step: object, policy: str, whole: bool) -> list[Reply]:
        """One step of an operation: its calls sent (the breaker's say, the observers told),
        or sent to the fallback, or a wait."""
        if type(step) is list:
            sent = self._admitted(policy, step)
            try:
                outcome: list[Reply] | BackendUnavailable = await _send(self.backend, sent, whole)
            except BackendUnavailable as exc:
                outcome = exc
            return self._finished(policy, step, sent, outcome)
        if isinstance(step, Elsewhere):
            return await _send(step.backend, step.calls, whole)
        assert isinstance(step, Sleep)
        await (self.clock or self.backend.clock).asleep(step.seconds)
        return []

    async def _unwind(self, op: Op[T], cancelled: asyncio.CancelledError) -> None:
        """The caller was cancelled: what the call under way took (when it finished and said)
        and what the operation took before (``op`` gives it back when the cancellation is
        thrown into it) goes back to the store, each call let finish."""
        try:
            if isinstance(cancelled, _Interrupted):
                given = undo(cancelled.calls, cancelled.replies)
                if given:
                    await _send(cancelled.backend, given, True)
            step = op.throw(cancelled)
            while isinstance(step, (list, Elsewhere)):
                if isinstance(step, Elsewhere):
                    step = op.send(await _send(step.backend, step.calls, True))
                else:
                    step = op.send(await _send(self.backend, step, True))
        except (asyncio.CancelledError, StopIteration):
            return
        except Exception:  # the store failed meanwhile: the units stay taken, the strict side
            _log.warning("freqguard: a cancelled operation could not give back what it took")
            op.close()

    async def hit(self, policy: str, cost: int = 1, **ctx: object) -> Decision:
        """See :meth:`Guard.hit`."""
        plan = self._lookup(policy)
        if self._one_call(plan):  # as Guard.hit
            call = self._first_call(plan, cost, ctx)
            try:
                reply = await self.backend.aexecute(call)
            except BackendUnavailable as exc:
                self._store_failed(exc, policy, [call])
                raise
            return self._first_reply(plan, call, reply)
        hit = self._hit(policy, cost, ctx)
        if hit.cached is not None:
            return hit.cached
        whole = not hit.plan.single_slot
        return self._hit_done(hit, await self._run(self._hit_op(hit), policy, whole))

    async def peek(self, policy: str, **ctx: object) -> Decision:
        """See :meth:`Guard.peek`."""
        return await self._run(self._decide(policy, 1, ctx, CHECK), policy)

    async def hit_many(
        self, policy: str, contexts: Iterable[Mapping[str, object]], cost: int = 1
    ) -> list[Decision]:
        """See :meth:`Guard.hit_many`."""
        hits, sent, op = self._many(policy, contexts, cost)
        return self._many_done(hits, sent, await self._run(op, policy, True) if sent else [])

    async def acquire(
        self, policy: str, timeout: float | None = None, cost: int = 1, **ctx: object
    ) -> Decision:
        """See :meth:`Guard.acquire`."""
        clock = self.clock or self.backend.clock
        hit, op = self._acquire(policy, timeout, cost, ctx, clock)
        return self._hit_done(hit, await self._run(op, policy, not hit.plan.single_slot))

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
            return await self._run(op, op_policy(policy))
        except BaseException as exc:
            if not maybe_applied(exc):
                unspend(policy.receipt if isinstance(policy, Decision) else None)
            raise

    async def reset(self, policy: str, **ctx: object) -> None:
        """See :meth:`Guard.reset`."""
        await self._run(self._decide(policy, 1, ctx, RESET), policy)

    async def aclose(self) -> None:
        await self.backend.aclose()

    async def __aenter__(self) -> AsyncGuard:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def op_policy(target: str | Decision) -> str:
    return target.policy if isinstance(target, Decision) else target


class _Interrupted(asyncio.CancelledError):
    """A cancellation that came while ``calls`` were out on ``backend``, which answered them
    after it: ``replies``."""

    def __init__(self, backend: Any, calls: list[ScriptCall], replies: list[Reply]) -> None:
        super().__init__()
        self.backend, self.calls, self.replies = backend, calls, replies


async def _send(backend: Any, calls: list[ScriptCall], whole: bool) -> list[Reply]:
    """``backend.aexecute_many(calls)``; with ``whole``, let finish when the caller is
    cancelled, which is then an :class:`_Interrupted` with the replies (or, when the calls
    failed too, the cancellation as it came: what they did is not known)."""
    if not whole:
        return await backend.aexecute_many(calls)  # type: ignore[no-any-return]
    task = asyncio.ensure_future(backend.aexecute_many(calls))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError as cancelled:
        try:
            replies = await task
        except Exception:
            raise cancelled from None
        raise _Interrupted(backend, calls, replies) from None
