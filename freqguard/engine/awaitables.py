"""The async guard's answers, not yet awaited: coroutines that refuse to be a truth value.

``if guard.hit("sms", recipient=r):`` on an :class:`~freqguard.AsyncGuard`, its ``await``
forgotten, tests a coroutine object, which is always true: every message would count as
sent. A method decorated with :func:`must_await` returns a :class:`Pending` instead, which is a
coroutine to asyncio (``await``, ``create_task``, ``gather``, ``wait_for``) but raises
``TypeError`` where it is read as true or false. The sync guard's methods return their
answers themselves (``scripts/unasync.py`` drops the decorator), so its decisions stay truthy.
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

__all__ = ["Pending", "must_await"]

P = ParamSpec("P")
T = TypeVar("T")
_new = object.__new__


class Pending(Coroutine[Any, Any, T], Generic[T]):
    """What an AsyncGuard method that answers decisions returns: its coroutine, to await.

    Awaiting it awaits the coroutine itself (``__await__`` hands over the coroutine's own
    iterator), so no frame of ours runs per step; a task drives it through ``send`` and
    ``throw``, one call each. Dropped unawaited, the coroutine inside warns as any does
    ("coroutine 'AsyncGuard.hit' was never awaited").

    Raises:
        TypeError: read as a truth value (``if guard.hit(...):``, ``bool(...)``, ``not``),
            except by asyncio itself.
    """

    __slots__ = ("_coro",)

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro = coro

    def __await__(self) -> Generator[Any, None, T]:
        return self._coro.__await__()

    def send(self, value: Any) -> Any:
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: types.TracebackType | None = None) -> Any:
        if val is None and tb is None:  # the one-argument form: 3.12 deprecates the others
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)

    def close(self) -> None:
        self._coro.close()

    def __bool__(self) -> bool:
        caller = getattr(sys._getframe().f_back, "f_globals", {})
        if caller.get("__name__", "").startswith("asyncio."):
            # asyncio asks whether a task still has its coroutine (3.12's task repr: "if
            # task._coro:"): yes, as of any coroutine. Only the callers' code is refused.
            return True
        name = getattr(self._coro, "__name__", "hit")
        owner = getattr(self._coro, "__qualname__", f"AsyncGuard.{name}")
        answer = "decisions" if name.endswith("_many") else "decision"
        raise TypeError(
            f"{owner}(...) returns an awaitable, which is neither true nor false: "
            f"write `{answer} = await guard.{name}(...)`"
        )

    def __repr__(self) -> str:
        return f"<Pending {self._coro!r}>"

    if not TYPE_CHECKING:
        # The coroutine's own attributes (__qualname__, cr_frame, cr_running...), which
        # asyncio's task reprs and debug mode read; hidden from type checkers, so that
        # ``guard.hit(...).allowed``, its await forgotten, stays a type error.
        def __getattr__(self, name):
            if name == "_coro":  # not set yet (copy, pickle): no recursion
                raise AttributeError(name)
            return getattr(self._coro, name)


class _MustAwait(Generic[P, T]):
    """A method whose calls return a :class:`Pending`: a descriptor that binds as a function
    does, and that ``inspect.iscoroutinefunction`` still takes for a coroutine function
    (it has the coroutine function's code, name, defaults and annotations)."""

    def __init__(self, method: Callable[P, Coroutine[Any, Any, T]]) -> None:
        self._method = method
        functools.update_wrapper(self, method)
        self.__code__ = method.__code__
        self.__defaults__ = method.__defaults__
        self.__kwdefaults__ = method.__kwdefaults__
        if hasattr(inspect, "markcoroutinefunction"):  # Python 3.12+: say it outright too
            inspect.markcoroutinefunction(self)

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        return self if instance is None else types.MethodType(self, instance)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Pending[T]:
        pending: Pending[T] = _new(Pending)  # Pending(...) without its __init__'s frame:
        pending._coro = self._method(*args, **kwargs)  # a hit's hot path
        return pending


def must_await(method: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Pending[T]]:
    """Decorate an ``async def`` method whose answer is read as true or false (a
    :class:`~freqguard.Decision`): its calls return a :class:`Pending`, which refuses to
    be, so that a forgotten ``await`` raises at once instead of counting as allowed."""
    return _MustAwait(method)
