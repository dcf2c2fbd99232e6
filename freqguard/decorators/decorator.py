"""``@capped``: cap a function by keys taken from its own arguments.

::

    @capped("15/minute", key="msg.recipient")
    def send_sms(msg: Message) -> None: ...

    @capped("sms", key={"recipient": "msg.to", "content": "msg.body"}, on_exceeded="skip")
    async def send(msg: Message) -> None: ...

Built on wrapt: functions, methods, class methods and ``async def`` alike, with names,
docstrings and signatures kept. Sync or async is chosen once, at decoration time.

Each decorated function has a cap of its own, named ``capped.<module>.<qualname>``, or with
``.2``, ``.3``, ... appended, in decoration order, when another function of the process has
that name already (functions a factory makes share a qualname). ``name=`` picks the name:
functions given the same one share a cap, and a factory's functions keep the same cap in
every process whatever order they are made in. A rate that does not parse, or a policy
name the guard does not know, fails at decoration.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import weakref
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from functools import partial
from types import TracebackType
from typing import Any, Literal, ParamSpec, TypeVar, cast, overload

import wrapt

from freqguard.decision import Decision
from freqguard.decorators.adapters import as_async
from freqguard.decorators.call_keys import Arguments, CallKey, KeyArgument, check_fit
from freqguard.decorators.defaults import configure, default_async_guard, default_guard
from freqguard.decorators.generators import async_held, held
from freqguard.decorators.leases import check_context, check_exceeded, leased, refuse_block
from freqguard.decorators.naming import implicit_name, parse_target, unknown_policy
from freqguard.engine.shared import shared_out
from freqguard.errors import CapExceeded, ConfigError
from freqguard.guard import AsyncGuard, Guard
from freqguard.policy import Fallback, OnError, Policy, check_on_error
from freqguard.rates import parse_rates
from freqguard.rules import Rule, check_name, fit_name

__all__ = ["Capped", "capped", "configure"]

P = ParamSpec("P")
R = TypeVar("R")
OnExceeded = Literal["raise", "skip", "wait"] | Callable[[Decision], Any]
RuleSpec = str | Rule | Sequence[str | Rule]
# per guard, the dimensions of the policy registered on it (a guard's policy never changes)
Registered = weakref.WeakKeyDictionary[Guard | AsyncGuard, tuple[str, ...]]


class Capped:
    """The decorator (and context manager) that ``capped(...)`` returns."""

    def __init__(
        self,
        rule: RuleSpec,
        key: KeyArgument,
        guard: Guard | AsyncGuard | None,
        cost: int | Callable[..., int],
        on_exceeded: OnExceeded,
        timeout: float | None,
        context: Mapping[str, object] | None,
        name: str | None = None,
        on_error: OnError | None = None,
    ) -> None:
        self._rules, self._policy = parse_target(rule, guard)
        check_exceeded(on_exceeded, timeout, self._rules)
        check_context(context)
        self.guard, self.cost, self.on_exceeded = guard, cost, on_exceeded
        self.timeout, self.context = timeout, context
        if name is not None:
            check_name("policy name", name)
            if self._policy is not None:
                raise ConfigError(
                    f"name={name!r} names the cap made from rates; {self._policy!r} already "
                    "names a registered policy"
                )
        if on_error is not None:
            if self._policy is not None:
                raise ConfigError(
                    f"on_error={on_error!r} applies to the cap made from rates; set it on "
                    f"the registered policy {self._policy!r} instead (Policy(..., on_error=))"
                )
            check_on_error(on_error, "@capped")
            if isinstance(on_error, Fallback) and self._rules:  # refused here, not at a call
                shared_out(Policy(name or "capped", *self._rules_by(())), on_error.workers)
        self._on_error = on_error
        self._name = name
        self._key = CallKey(key)
        # the with-block form's registrations: per guard, the dimensions its policy has
        self._block_registered: Registered = weakref.WeakKeyDictionary()

    # -- configuration -------------------------------------------------------------------

    def _policy_for(
        self,
        guard: Guard | AsyncGuard,
        name: str | None,
        registered: Registered,
        ctx: Mapping[str, object],
    ) -> tuple[str, dict[str, object]]:
        """The policy to hit, registering the implicit one; and the context, renamed to fit."""
        if self._policy is not None:
            policy = guard.policies.get(self._policy)
            if policy is None:
                raise unknown_policy(self._policy, guard, self.guard is None)
            dims = policy.dimensions
            if len(dims) == 1 and len(ctx) == 1 and dims[0] not in ctx:
                ctx = {dims[0]: next(iter(ctx.values()))}  # key="msg.to" for a one-dimension policy
            return policy.name, dict(ctx)
        assert name is not None  # rules without a registered policy always have a name
        by = tuple(ctx)
        if registered.get(guard) != by:
            self._register(guard, name, by)
            registered[guard] = by
        return name, dict(ctx)

    def _register(self, guard: Guard | AsyncGuard, name: str, by: tuple[str, ...]) -> None:
        guard.add_policy(Policy(name, *self._rules_by(by), on_error=self._on_error))

    def _rules_by(self, by: tuple[str, ...]) -> list[Rule]:
        """The cap's rules, its rates keyed ``by`` the call's dimensions."""
        rules: list[Rule] = []
        for item in self._rules:
            if isinstance(item, Rule):
                rules.append(item)
            else:
                rules.extend(Rule(rate, by=by) for rate in parse_rates(item))
        return rules

    def _block_name(self, by: tuple[str, ...]) -> str:
        """A with-block's cap: its name, else one per rules and dimensions (different rules
        never meet under one name; equal ones in two blocks share a cap)."""
        if self._name is not None:
            return self._name
        digest = hashlib.blake2b(repr(self._rules).encode(), digest_size=4).hexdigest()
        return fit_name(f"capped.block.{'-'.join(by or ('global',))}.{digest}")

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        self._key.check(func)
        check_context(self.context, decorating=True)
        guard = self.guard if self.guard is not None or self._policy is None else default_guard()
        target = check_fit(func, guard, self._policy, self._key)  # a named policy's: known now
        if guard is not None and self._policy in guard.policies:  # its mode
            leased(guard, str(self._policy), self.on_exceeded)  # refused now, not later
        site = self._site(func)
        if inspect.iscoroutinefunction(target):  # chosen once, here
            return cast(Callable[P, R], self._wrap_async(cast(Any, func), site))
        if inspect.isasyncgenfunction(target):
            return cast(Callable[P, R], self._wrap_async_generator(func, site))
        generator = inspect.isgeneratorfunction(target)
        return cast(Callable[P, R], self._wrap_sync(func, site, generator))

    def _site(self, func: Callable[..., object]) -> _Site:
        name = self._name
        if name is None and self._policy is None:
            name = implicit_name(func)  # a cap of its own, whatever else shares its qualname
        site = _Site(name)
        dimensions = self._key.dimensions
        if self.guard is not None and name is not None and dimensions is not None:
            # register now: a clash with another policy of that name surfaces here
            self._register(self.guard, name, dimensions)
            site.registered[self.guard] = dimensions
        return site

    def _wrap_sync(self, func: Callable[..., Any], site: _Site, generator: bool) -> object:
        @wrapt.decorator
        def wrapper(
            wrapped: Callable[..., Any],
            instance: object,
            args: tuple[Any, ...],
            kwargs: dict[str, Any],
        ) -> Any:
            guard = self._sync_guard()
            name, ctx, cost = self._call(site, guard, wrapped, instance, args, kwargs)
            if leased(guard, name, self.on_exceeded) and generator:
                make = partial(wrapped, *args, **kwargs)
                return held(guard, name, cost, ctx, self._exceeded, make)
            if leased(guard, name, self.on_exceeded):  # held while the call runs
                with guard.lease(name, cost, **ctx) as lease:
                    if not lease.allowed:
                        return self._exceeded(lease)
                    return wrapped(*args, **kwargs)
            decision = self._ask(guard, name, ctx, cost)
            if not decision.allowed:
                return self._exceeded(decision)
            return wrapped(*args, **kwargs)

        return wrapper(func)

    def _wrap_async(self, func: Callable[..., Awaitable[Any]], site: _Site) -> object:
        @wrapt.decorator
        async def wrapper(
            wrapped: Callable[..., Awaitable[Any]],
            instance: object,
            args: tuple[Any, ...],
            kwargs: dict[str, Any],
        ) -> Any:
            guard = self._async_guard()
            name, ctx, cost = self._call(site, guard, wrapped, instance, args, kwargs)
            if leased(guard, name, self.on_exceeded):  # held while the call runs
                async with guard.lease(name, cost, **ctx) as lease:
                    if not lease.allowed:
                        return self._exceeded(lease)
                    return await wrapped(*args, **kwargs)
            decision = await self._ask(guard, name, ctx, cost)
            if not decision.allowed:
                return self._exceeded(decision)
            return await wrapped(*args, **kwargs)

        return wrapper(func)

    def _wrap_async_generator(self, func: Callable[..., Any], site: _Site) -> object:
        @wrapt.decorator
        def wrapper(
            wrapped: Callable[..., AsyncGenerator[Any, Any]],
            instance: object,
            args: tuple[Any, ...],
            kwargs: dict[str, Any],
        ) -> AsyncGenerator[Any, Any]:
            guard = self._async_guard()

            async def decide(stack: contextlib.AsyncExitStack[Any]) -> Decision:
                name, ctx, cost = self._call(site, guard, wrapped, instance, args, kwargs)
                if leased(guard, name, self.on_exceeded):
                    return await stack.enter_async_context(guard.lease(name, cost, **ctx))
                return await self._ask(guard, name, ctx, cost)

            return async_held(decide, self._exceeded, lambda: wrapped(*args, **kwargs))

        return wrapper(func)

    def _call(
        self,
        site: _Site,
        guard: Guard | AsyncGuard,
        wrapped: Callable[..., object],
        instance: object,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[str, dict[str, object], int]:
        """What one call of a decorated function asks the guard: policy, context and cost."""
        ctx = self._key.context(site.arguments, wrapped, instance, args, kwargs)
        policy, ctx = self._policy_for(guard, site.name, site.registered, ctx)
        cost = self.cost(*args, **kwargs) if callable(self.cost) else self.cost
        return policy, ctx, cost

    @overload
    def _ask(self, guard: Guard, name: str, ctx: dict[str, object], cost: int) -> Decision: ...

    @overload
    def _ask(
        self, guard: AsyncGuard, name: str, ctx: dict[str, object], cost: int
    ) -> Awaitable[Decision]: ...

    def _ask(
        self, guard: Guard | AsyncGuard, name: str, ctx: dict[str, object], cost: int
    ) -> Decision | Awaitable[Decision]:
        """The one guard call a call or a block makes: a wait for its turn, else a hit.

        A wait returns only once allowed (or raises), so callers need only look at a
        denied hit. The async guard's coroutine is returned for the caller to await.
        """
        if self.on_exceeded == "wait":
            return guard.acquire(name, timeout=self.timeout, cost=cost, **ctx)
        return guard.hit(name, cost, **ctx)

    def _exceeded(self, decision: Decision) -> Any:
        if self.on_exceeded == "skip":
            return None
        if callable(self.on_exceeded):
            return self.on_exceeded(decision)
        raise CapExceeded(decision)

    def _sync_guard(self) -> Guard:
        if isinstance(self.guard, AsyncGuard):
            raise ConfigError("a sync function needs a Guard, not an AsyncGuard")
        return self.guard if self.guard is not None else default_guard()

    def _async_guard(self) -> AsyncGuard:
        if isinstance(self.guard, AsyncGuard):
            return self.guard
        if isinstance(self.guard, Guard):
            return as_async(self.guard)  # never blocks the event loop
        return default_async_guard()

    # -- context manager -----------------------------------------------------------------

    def _block(self, guard: Guard | AsyncGuard) -> tuple[str, dict[str, object], int]:
        if self.on_exceeded == "skip" or callable(self.on_exceeded):
            raise ConfigError("a with-block cannot be skipped: use on_exceeded='raise' or 'wait'")
        ctx, needs = dict(self.context or {}), "as a context manager, capped(...) needs context="
        if self.context is None and self._policy is None:  # before a policy is made of it
            raise ConfigError(needs + "{dimension: value}")
        name = self._block_name(tuple(ctx)) if self._policy is None else None
        if name is not None:  # refused before a policy is made of its rules
            refuse_block(guard, name, self._rules)
        name, ctx = self._policy_for(guard, name, self._block_registered, ctx)
        if self.context is None and guard.policies[name].dimensions:  # a global one: none
            raise ConfigError(needs + "{dimension: value}")
        refuse_block(guard, name)
        return name, ctx, self.cost if isinstance(self.cost, int) else self.cost()

    def __enter__(self) -> Decision:
        guard = self._sync_guard()
        return _entered(self._ask(guard, *self._block(guard)))

    def __exit__(self, *exc: object) -> None:
        return None

    async def __aenter__(self) -> Decision:
        guard = self._async_guard()
        return _entered(await self._ask(guard, *self._block(guard)))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return self.__exit__(exc_type, exc, tb)


class _Site:
    """One decorated function's own state: its cap's name (None for a registered policy),
    the guards that cap is registered on, and its signatures."""

    __slots__ = ("arguments", "name", "registered")

    def __init__(self, name: str | None) -> None:
        self.name = name
        self.registered: Registered = weakref.WeakKeyDictionary()
        self.arguments = Arguments()


def _entered(decision: Decision) -> Decision:
    """A with-block runs only when allowed (it cannot be skipped)."""
    if not decision.allowed:
        raise CapExceeded(decision)
    return decision


def capped(
    rule: RuleSpec,
    key: KeyArgument = None,
    *,
    guard: Guard | AsyncGuard | None = None,
    cost: int | Callable[..., int] = 1,
    on_exceeded: OnExceeded = "raise",
    timeout: float | None = None,
    context: Mapping[str, object] | None = None,
    name: str | None = None,
    on_error: OnError | None = None,
) -> Capped:
    """Cap a function (or a ``with`` block) by keys derived from its arguments.

    Args:
        rule: a rate string (``"15/minute"``, several with ``;``), a :class:`Rule`, a list of
            them (they form one all-or-nothing policy), or the name of a policy on the guard.
        key: a parameter name (``"recipient"``), a dotted path into an argument
            (``"msg.recipient"``; the last segment names the dimension), a mapping of
            dimension to path or callable (``{"recipient": "msg.to", "content": "msg.body"}``),
            or a callable of the function's arguments returning a value or a mapping.
            None: one cap for all calls.
        guard: a Guard or AsyncGuard; default: the process-wide one (see :func:`configure`).
        cost: an integer, or a callable of the function's arguments returning one.
        on_exceeded: ``"raise"`` (:class:`CapExceeded`), ``"skip"`` (return None without
            calling), ``"wait"`` (acquire, at most ``timeout`` seconds), or a callable given
            the Decision whose result is returned instead.
        timeout: for ``"wait"`` (with another ``on_exceeded``, a ConfigError).
        context: for the context-manager form: the dimension values of the block.
        name: the name of the policy made from the rates; functions (or blocks) given the
            same name share one cap. Default: each decorated function its own
            (see the module docs); each block one per rules and dimensions.
        on_error: what a store failure answers for the cap made from rates (``"raise"``,
            ``"allow"``, ``"deny"`` or a fallback backend); default: the guard's.

    Raises:
        ConfigError: at decoration, for a rate that does not parse, a policy name the guard
            does not know, a bad name, key or mode, an AsyncGuard for a sync function, or
            (on an explicit guard) a different policy already registered under the name, or
            a key whose dimensions do not fit the policy named; at call time, for a key that
            cannot be resolved from the arguments.
    """
    return Capped(rule, key, guard, cost, on_exceeded, timeout, context, name, on_error)
