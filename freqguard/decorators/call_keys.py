"""The ``key=`` of ``@capped``: a cap's dimension values, read from a call's arguments.

A key is a parameter name (``"recipient"``), a dotted path into an argument
(``"msg.recipient"``: its last segment names the dimension), a mapping of dimension to a
path or a callable (``{"recipient": "msg.to", "content": "msg.body"}``), a callable of the
call's arguments returning a value or a mapping, or None (one cap for all calls). It is
parsed, and checked against the function's parameters, once, at decoration; each call only
reads it, without I/O.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, cast

from freqguard.errors import ConfigError, shown
from freqguard.guard import AsyncGuard, Guard

__all__ = ["Arguments", "CallKey", "KeyArgument", "Path", "check_fit", "function_of"]

KeyArgument = str | Mapping[str, str | Callable[..., object]] | Callable[..., object] | None
# reads a call's dimension values from (its arguments by name, args, kwargs)
Reader = Callable[[Mapping[str, object], tuple[Any, ...], dict[str, Any]], dict[str, object]]


class Path:
    """A dotted path into a call's arguments: ``"msg.recipient"``.

    Raises:
        ConfigError: when the text is not dotted identifiers.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.parts = text.split(".")
        if not all(part.isidentifier() for part in self.parts):
            raise ConfigError(
                f"key path {shown(text)} must be dotted identifiers like 'msg.recipient'"
            )

    def resolve(self, arguments: Mapping[str, object]) -> object:
        """The value at this path: attributes or mapping items, from the named argument; a
        property of the object's class before an item of the same name (a Starlette
        ``Request`` is a mapping over its ASGI scope: ``request.client`` is its
        ``Address``, not the scope's tuple)."""
        if self.parts[0] not in arguments:
            raise ConfigError(f"key path {self.text!r}: no argument named {self.parts[0]!r}")
        value = arguments[self.parts[0]]
        for part in self.parts[1:]:
            if isinstance(value, Mapping) and part in value and not _property(type(value), part):
                value = value[part]
            elif hasattr(value, part):
                value = getattr(value, part)
            else:
                raise ConfigError(f"key path {self.text!r}: {value!r} has no {part!r}")
        return value


@functools.lru_cache(maxsize=1024)
def _property(kind: type, name: str) -> bool:
    """Whether ``kind`` has a property ``name`` (read before a mapping item of that name)."""
    return isinstance(inspect.getattr_static(kind, name, None), property)


class Arguments:
    """A call's arguments by parameter name, each signature read once.

    One per decorated function. In wrapt's model a method's ``args`` lack the object it is
    bound to (``instance``): ``wrapped`` is then a method bound to it, or (a method called
    through its class, ``Svc.send(svc, msg)``) the function with it bound in a partial. So
    the function's own signature is bound with that object first, and a path into ``self``
    or ``cls`` reads it, as the check at decoration (on that signature) promised.
    """

    def __init__(self) -> None:
        self._signatures: dict[object, inspect.Signature] = {}

    def __call__(
        self,
        wrapped: Callable[..., object],
        instance: object,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Mapping[str, object]:
        """Bind ``args`` and ``kwargs`` to the decorated function's parameters, the object
        a method is bound to included, defaults applied."""
        target: object = wrapped
        if inspect.ismethod(wrapped):  # through an instance, or a class method
            target, args = wrapped.__func__, (wrapped.__self__, *args)
        elif instance is not None:  # through the class: wrapt took the instance from args
            target, args = getattr(wrapped, "__wrapped__", wrapped), (instance, *args)
        sig = self._signatures.get(target)
        if sig is None:
            sig = self._signatures[target] = inspect.signature(cast(Callable[..., object], target))
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments


class CallKey:
    """A parsed ``key=``: what it reads from a call, and which dimensions it yields.

    Args:
        key: the ``key=`` given to ``capped``.

    Raises:
        ConfigError: for a key of another type, or a path that is not dotted identifiers.
    """

    def __init__(self, key: KeyArgument) -> None:
        self._read = _reader(key)
        #: the dimensions the key yields, when known before any call (not for a callable)
        self.dimensions = _static_dimensions(key)
        #: the dotted paths among the key, checked against each decorated function
        self.paths = [key] if isinstance(key, str) else []
        if isinstance(key, Mapping):
            self.paths = [v for v in key.values() if isinstance(v, str)]

    def check(self, func: Callable[..., object]) -> None:
        """At decoration: every path must start at a parameter of ``func``."""
        params = inspect.signature(function_of(func)).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        for path in self.paths:
            first = path.split(".")[0]
            if first not in params and not takes_any:
                raise ConfigError(
                    f"@capped on {getattr(func, '__qualname__', func)!r}: key {shown(path)} names "
                    "no parameter "
                    f"(parameters: {', '.join(params) or 'none'})"
                )

    def context(
        self,
        arguments: Arguments,
        wrapped: Callable[..., object],
        instance: object,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> dict[str, object]:
        """The dimension values of one call (none without a key)."""
        if self._read is None:
            return {}
        return self._read(arguments(wrapped, instance, args, kwargs), args, kwargs)


def _static_dimensions(key: KeyArgument) -> tuple[str, ...] | None:
    if key is None:
        return ()
    if isinstance(key, str):
        return (key.split(".")[-1],)
    if isinstance(key, Mapping):
        return tuple(key)
    return None


def _reader(key: KeyArgument) -> Reader | None:
    if key is None:
        return None
    if isinstance(key, str):
        path = Path(key)
        dimension = path.parts[-1]
        return lambda arguments, args, kwargs: {dimension: path.resolve(arguments)}
    if isinstance(key, Mapping):
        for dimension, value in key.items():
            if not isinstance(dimension, str) or not (callable(value) or isinstance(value, str)):
                raise ConfigError(
                    "key= as a mapping takes dimension names to parameter paths ('msg.to') or "
                    "functions of the call's arguments, got "
                    f"{shown(dimension, 40)}: {shown(value, 40)}"
                )
        paths = {d: (v if callable(v) else Path(v)) for d, v in key.items()}

        def resolve(
            arguments: Mapping[str, object], args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> dict[str, object]:
            return {
                d: p.resolve(arguments) if isinstance(p, Path) else p(*args, **kwargs)
                for d, p in paths.items()
            }

        return resolve
    if callable(key):

        def call(
            arguments: Mapping[str, object], args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> dict[str, object]:
            value = key(*args, **kwargs)
            return dict(value) if isinstance(value, Mapping) else {"key": value}

        return call
    raise ConfigError(
        f"key must be a parameter name, a dotted path, a mapping or a callable, got {shown(key)}"
    )


def function_of(func: Callable[..., object]) -> Callable[..., object]:
    """The function a ``classmethod`` or ``staticmethod`` under ``@capped`` holds (it is
    what a call runs, bound as wrapt binds it); ``func`` itself otherwise."""
    if isinstance(func, (classmethod, staticmethod)):
        return func.__func__
    return func


def check_fit(
    func: Callable[..., object],
    guard: Guard | AsyncGuard | None,
    policy_name: str | None,
    key: CallKey,
) -> Callable[..., object]:
    """Refuse at decoration what every call of ``func`` would: an AsyncGuard for a sync
    function; a key whose dimensions (when known) are not those of the registered policy
    it names, and at most what its rules read besides (one value given to a one-dimension
    policy takes its name). Returns the function a call runs (:func:`function_of`).

    Raises:
        ConfigError: either, naming the fix.
    """
    named = getattr(func, "__name__", None) or repr(func)  # a partial has no name
    target = function_of(func)
    sync = not (inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target))
    if sync and isinstance(guard, AsyncGuard):
        raise ConfigError(
            f"@capped: the sync function {named!r} needs a Guard, not an "
            "AsyncGuard (make it async, or give a Guard: it serves async functions too)"
        )
    policy = None if guard is None or policy_name is None else guard.policies.get(policy_name)
    given = key.dimensions
    if policy is None or given is None:
        return target
    # a policy of priorities decides by the hit's priority: a key must give it
    wanted = (*policy.dimensions, *(("priority",) if policy.priorities else ()))
    one = len(wanted) == len(given) == 1
    if one or set(wanted) <= set(given) <= {*wanted, *policy.reads}:
        return target
    spelled = ", ".join(f"{d!r}: ..." for d in wanted)
    raise ConfigError(
        f"@capped on {named!r}: policy {policy.name!r} is keyed by "
        f"{', '.join(wanted) or 'nothing'}, the key gives {', '.join(given) or 'nothing'}: "
        f"write key={{{spelled}}} (each a parameter, a dotted path or a callable)"
    )
