"""``@capped`` and ``exempt`` for Django views: what they mark on a view or a class-based
view (read by the middleware, which decides a cap with the view's default limits), and the
wrapper that decides a cap the middleware has not (no middleware, a method's cap, or one
the middleware leaves to its view: named, not blocking, or for some methods).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponseBase
from django.views import View

from freqguard.decision import Decision
from freqguard.decorators.naming import implicit_name, numbered
from freqguard.errors import ConfigError, shown
from freqguard.integrations._django_leases import aanswered, answered
from freqguard.integrations._django_requests import (
    RequestNotes,
    agive_back,
    give_back,
    load_user,
    needs_user,
    noted,
    notes_of,
    request_info,
    taken,
    with_headers,
)
from freqguard.integrations._django_settings import their_key
from freqguard.integrations._django_state import NAMED, State, ViewCap, current
from freqguard.integrations._held import leasing, leasing_async
from freqguard.integrations._http import KeyFunc, view_methods
from freqguard.integrations._request import check_key
from freqguard.integrations._rule_items import check_cost, rule_items
from freqguard.policy import Policy
from freqguard.rules import Rule, check_name

__all__ = ["capped", "exempt"]

V = TypeVar("V")
_NO_RULE: Any = object()  # capped() given no rule: refused after django-ratelimit's names
Response = HttpResponseBase


def capped(
    rule: str | Rule | Policy | Sequence[str | Rule] = _NO_RULE,
    *,
    key: KeyFunc | None = None,
    cost: int = 1,
    name: str | None = None,
    block: bool = True,
    methods: Iterable[str] | None = None,
    **theirs: NoReturn,
) -> Callable[[V], V]:
    """Cap a view: a function view (sync or async), a class-based view (decorate the
    class, or a method with ``method_decorator``).

    With the middleware installed, the cap of a function view or a decorated class is
    decided with the view's default limits, in one hit before the view runs. A cap given a
    ``name``, ``block=False`` or ``methods``, and a method's cap (``method_decorator``), is
    decided when its view runs, on a policy of its own; if it refuses the request, what the
    middleware's hit took goes back.

    Args:
        rule: rates (``"5/minute; 100/day"``, or django-ratelimit's ``"5/m"``), Rules, a
            list of them, or a Policy (its rules and ``on_error``).
        key: the key function (default ``FREQGUARD_KEY``, else the peer address).
        cost: what one request costs, charged to the default limits too (one hit).
        name: a budget shared by every cap of this name (django-ratelimit's ``group``):
            its policy's name (default: the view's own, ``django.<route name>``).
        block: False decides without refusing (django-ratelimit's ``block=False``): the
            view runs, and reads the decision on the request (``request.limited``,
            ``request.freqguard.decision``); a denied hit counts nothing.
        methods: the HTTP methods capped (``["POST"]``; default all; GET brings HEAD).

    Raises:
        ConfigError: a rate that does not parse, a bad cost, name, block or method, a key
            that is not a key function, or a target that is neither a view function nor a
            class-based view.
    """
    _refuse_theirs(theirs)
    if rule is _NO_RULE:
        raise TypeError("capped() missing 1 required positional argument: 'rule'")
    on_error = None
    if isinstance(rule, Policy):
        items: tuple[Any, ...] = rule.rules
        on_error = rule.on_error
    else:
        items = rule_items(rule, "capped", page="docs/coming-from/django-ratelimit.md")
    if name is not None:
        check_name("policy name", name)
    check_cost(cost, items)
    if key is not None and not callable(key):
        raise ConfigError(
            f"key must be a key function (client_ip()), got {shown(key)}{their_key(key)}"
        )
    if key is not None:
        check_key(key, "capped")
    if not isinstance(block, bool):
        raise ConfigError(f"block must be True or False, got {shown(block)}")
    chosen = view_methods(methods)

    # method_decorator applies the decorator on every call: one cap a view class
    per_class: dict[type, ViewCap] = {}
    lock = threading.Lock()

    def made(alone: str) -> ViewCap:
        cap = ViewCap(items, key, cost, name, alone, on_error, block, chosen)
        if name is not None:
            NAMED.setdefault(name, cap)  # one budget, one set of rules (else refused)
        return cap

    def cap_for(target: Any) -> ViewCap:
        """A cap of its own for each view; a decorated method's, one for each view class
        calling it: named after that class (``Orders.post``), for a method it inherits
        too (``name="dispatch"``, a mixin's), as django-ratelimit's group is."""
        if not isinstance(target, functools.partial):
            return made(_alone(target))
        method = target.func  # bound to the view
        owner = type(getattr(method, "__self__", None))
        found = per_class.get(owner)
        if found is None:
            with lock:
                found = per_class.get(owner) or made(_alone_in(owner, method))
                per_class[owner] = found
        return found

    def apply(target: V) -> V:
        _check_target("capped", target)
        cap = cap_for(target)
        if isinstance(target, type):
            return _cap_class(target, cap)  # type: ignore[return-value]
        return _cap_view(target, cap)  # type: ignore[arg-type, return-value]

    return apply


def _refuse_theirs(given: Mapping[str, object]) -> None:
    """django-ratelimit's argument names, refused naming freqguard's.

    Raises:
        ConfigError: for one of them; TypeError for any other unknown name, as Python would.
    """
    for name, value in given.items():
        if name == "method":
            listed = [value] if isinstance(value, str) else value
            ours = f"methods={listed!r}"
            if isinstance(listed, (list, tuple)) and None in listed:  # ratelimit.ALL
                ours = "leave methods= out (every method)"
            raise ConfigError(f"django-ratelimit's method= is methods= here: {ours}")
        if name == "group":
            raise ConfigError(f"django-ratelimit's group= is name= here: name={shown(value)}")
        if name == "rate":
            raise ConfigError(
                f"django-ratelimit's rate= is the first argument here: capped({shown(value)})"
            )
        raise TypeError(f"capped() got an unexpected keyword argument {name!r}")


def _alone(target: Any) -> str:
    """The policy of a cap decided on its own: ``django.view.<module>.<qualname>``; of an
    ``as_view()``, its view class's (Django sets ``view_class`` on the function it makes,
    whose own name, ``View.as_view.<locals>.view``, names no view of the project)."""
    owner = getattr(target, "view_class", None)
    if isinstance(owner, type):
        return numbered(f"django.view.{owner.__module__}.{owner.__qualname__}")
    return implicit_name(target, prefix="django.view")


def _alone_in(owner: type, method: Any) -> str:
    """The policy of a method's cap on the view class ``owner``:
    ``django.view.<module>.<class>.<method>``, the same in every worker whichever view it
    served first (not the name of the function, which views inheriting it share)."""
    if owner is type(None):  # not a bound method: by the function
        return _alone(method)
    return numbered(f"django.view.{owner.__module__}.{owner.__qualname__}.{method.__name__}")


def exempt(target: V) -> V:
    """Exempt a view (function or class-based) from ``FREQGUARD_DEFAULT_LIMITS``; its own
    ``@capped`` still holds.

    Raises:
        ConfigError: for something neither a view function nor a class-based view.
    """
    _check_target("exempt", target)
    target._freqguard_exempt = True  # type: ignore[attr-defined]
    return target


def _check_target(method: str, target: object) -> None:
    if isinstance(target, type) and not issubclass(target, View):
        raise ConfigError(
            f"{method} takes a view function or a class-based view (a View), got {shown(target)}"
        )
    if not callable(target):
        raise ConfigError(
            f"{method} takes a view function or a class-based view, got {shown(target)}"
        )


def _request_in(args: tuple[Any, ...]) -> Any:
    """The request among a view's arguments: first, or after ``self`` (a method)."""
    for arg in args[:2]:
        if hasattr(arg, "META"):
            return arg
    raise ConfigError(f"@capped view called without a request: {shown(args)}")


def _cap_view(view: Callable[..., Any], cap: ViewCap) -> Callable[..., Any]:
    if iscoroutinefunction(view):

        @functools.wraps(view)
        async def awrapper(*args: Any, **kwargs: Any) -> Any:
            return await _arun_alone(cap, _request_in(args), lambda: view(*args, **kwargs))

        awrapper._freqguard_cap = cap  # type: ignore[attr-defined]
        return awrapper

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return _run_alone(cap, _request_in(args), lambda: view(*args, **kwargs))

    wrapper._freqguard_cap = cap  # type: ignore[attr-defined]
    return wrapper


def _cap_class(cls: type[View], cap: ViewCap) -> type[View]:
    """Cap every request a class-based view dispatches (its ``dispatch``)."""
    original: Callable[..., Any] = cls.dispatch
    if getattr(cls, "view_is_async", False):  # dispatch returns the handler's coroutine

        async def adispatch(self: View, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            run = functools.partial(original, self, request, *args, **kwargs)
            return await _arun_alone(cap, request, run)

        cls.dispatch = functools.wraps(original)(adispatch)  # type: ignore[method-assign,assignment]
    else:

        def dispatch(self: View, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            run = functools.partial(original, self, request, *args, **kwargs)
            return _run_alone(cap, request, run)

        cls.dispatch = functools.wraps(original)(dispatch)  # type: ignore[method-assign]
    cls._freqguard_cap = cap  # type: ignore[attr-defined]
    return cls


def _run_alone(cap: ViewCap, request: Any, view: Callable[[], Any]) -> Any:
    """A view whose cap the middleware has not decided: decided here, its leases (a
    concurrency rule) held until it has answered. A refusal gives back what earlier hits
    of the request took; a cap that does not block lets the view answer."""
    notes = notes_of(request)
    state = current()
    if _passes(cap, request, notes, state):
        return _own_headers(request, view())
    route, guard, held = state.alone_route(cap), state.guard(), list[Decision]()

    def respond() -> Any:  # decided inside answered's try: a lease taken goes back
        answer = state.decider().decide(leasing(guard, held), route, request_info(request))
        denied = noted(request, cap, answer)
        if denied is not None and (cap.block or answer.status != 429):
            give_back(notes)
            return denied
        taken(request, guard, answer)  # given back if a later throttle refuses the request
        return _own_headers(request, view())

    return answered(guard, held, respond, request)


async def _arun_alone(cap: ViewCap, request: Any, view: Callable[[], Awaitable[Any]]) -> Any:
    notes = notes_of(request)
    state = current()
    if _passes(cap, request, notes, state):
        return _own_headers(request, await view())
    route = state.alone_route(cap)
    if needs_user(route):
        await sync_to_async(load_user)(request)
    guard, held = state.aguard(), list[Decision]()
    answer = await state.adecider().adecide(
        leasing_async(guard, held), route, request_info(request)
    )
    denied = noted(request, cap, answer)
    if denied is not None and (cap.block or answer.status != 429):
        await agive_back(notes)
        return denied
    taken(request, guard, answer)

    async def respond() -> Any:
        return _own_headers(request, await view())

    return await aanswered(guard, held, respond, request)


def _passes(cap: ViewCap, request: Any, notes: RequestNotes, state: State) -> bool:
    """Whether ``cap`` leaves ``request`` undecided here (the middleware decided it, or
    freqguard is switched off, or the method is not capped); ``request.limited`` is set
    then too, as django-ratelimit sets it on every request its decorator sees."""
    if cap in notes.decided or not state.settings.enabled or not cap.applies(request):
        getattr(request, "_request", request).limited = notes.limited
        return True
    return False


def _own_headers(request: Any, found: Any) -> Any:
    """The rate-limit headers, when no middleware adds them."""
    notes = notes_of(request)
    if not notes.middleware and notes.decisions and isinstance(found, HttpResponseBase):
        return with_headers(current(), notes, found)
    return found
