"""A request as key functions see it, and the error a key function raises to refuse one."""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from freqguard.errors import ConfigError, FreqGuardError, shown
from freqguard.integrations._raw import elsewhere
from freqguard.rates import Rate
from freqguard.rules import Rule

__all__ = [
    "KEY_MAKERS",
    "BadRequest",
    "KeyFunc",
    "RequestInfo",
    "check_key",
    "context_of",
    "declared",
    "dimensions_of",
    "header",
    "path_param",
    "refuse_empty",
]


class Address(str):
    """A peer's address, as a key function reads ``request.client``: a ``str``, whose
    ``.host`` is itself (Starlette's ``request.client.host``, carried over, keys alike)."""

    __slots__ = ()

    @property
    def host(self) -> str:
        return str(self)


class Headers(dict[str, str]):
    """A request's headers by lower-case name, looked up in any case, as the frameworks'
    own are (Starlette's, werkzeug's, Django's): ``request.headers.get("X-API-Key")``."""

    __slots__ = ()

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower() if isinstance(name, str) else name)

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name.lower() if isinstance(name, str) else name)

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower() if isinstance(name, str) else name, default)


class RequestInfo:
    """The parts of a request that key functions and route matching need; ``raw`` is the
    framework's own (the ASGI scope under Starlette and FastAPI, the WSGI environ under WSGI
    and Flask, Django's ``HttpRequest``, DRF's ``Request`` under a DRF throttle).

    ``headers`` (lower-case names, looked up in any case; the lines of a repeated header
    joined with ", ") and :meth:`header_lines` are decoded on first use: most keys never
    read them.
    """

    __slots__ = (
        "_joined",
        "_lines",
        "_read_headers",
        "client",
        "method",
        "path",
        "path_params",
        "raw",
    )

    def __init__(
        self,
        method: str,
        path: str,
        read_headers: Callable[[], dict[str, list[str]]],
        client: str | None,
        path_params: Mapping[str, str] | None = None,
        raw: Any = None,
    ) -> None:
        self.method = method
        self.path = path
        self._read_headers = read_headers  # lower-case name -> its lines, in order
        self._lines: dict[str, list[str]] | None = None
        self._joined: Headers | None = None
        self.client = None if client is None else Address(client)  # the peer's address
        self.path_params: Mapping[str, str] = path_params or {}
        self.raw = raw  # the framework's own: an ASGI scope, a WSGI environ, a Django request

    def header_lines(self, name: str) -> list[str]:
        """The lines of header ``name`` (lower case), in the order received.

        A WSGI server has already joined repeated lines into one, with commas.
        """
        if self._lines is None:
            self._lines = self._read_headers()
        return self._lines.get(name.lower(), [])

    @property
    def headers(self) -> Mapping[str, str]:
        if self._joined is None:
            if self._lines is None:
                self._lines = self._read_headers()
            self._joined = Headers((n, ", ".join(lines)) for n, lines in self._lines.items())
        return self._joined

    if not TYPE_CHECKING:  # at run time only: mypy still names a missing attribute

        def __getattr__(self, name: str) -> Any:
            """A framework request's attribute (``state``, ``url``): named with where it is."""
            if name.startswith("__"):  # copy, pickle and the like probe for dunders
                raise AttributeError(name)
            if hasattr(type(self), name):  # a property that raised AttributeError: again
                return object.__getattribute__(self, name)
            raise AttributeError(elsewhere(name, self.raw))


class BadRequest(FreqGuardError):
    """A key function cannot key this request without letting its sender pick the key.

    The integrations answer 400 with an RFC 9457 problem body giving the message.
    """


class SkipRequest(FreqGuardError):
    """Raised by a key function to leave this request uncapped by its limit (an admin, a
    health check: Flask-Limiter's ``exempt_when``; ``header(..., missing="skip")`` raises
    it): the limit decides nothing for it and sends no rate-limit headers."""


KeyFunc = Callable[[RequestInfo], object]
_log = logging.getLogger("freqguard")


def context_of(key: KeyFunc, request: RequestInfo) -> dict[str, object]:
    """What ``key`` gives for ``request``, as a context: a mapping as it is (never written
    to), one value as the dimension ``key``.

    Raises:
        BadRequest: a value is None (the request lacks what the route is keyed by).
        ConfigError: a value is neither a str nor an int, or a dimension name no str: the
            key function is wrong for every request like it, so the framework answers as
            for a key function that raises (a 500, logged).
    """
    value = key(request)
    single = False
    if type(value) is dict:  # the usual case, without the ABC check
        context: dict[str, object] = value
    elif isinstance(value, Mapping):
        context = dict(value)
    else:
        context, single = {"key": value}, True
    for dimension, item in context.items():
        if type(item) is str and type(dimension) is str:  # the usual case, at once
            continue
        if item is None or not _keys(item) or not isinstance(dimension, str):
            _refuse(key, context, None if single else dimension, item)
    return context


def refuse_empty(key: KeyFunc, items: Sequence[Rate | Rule]) -> None:
    """Refuse a key function's empty mapping where rules take the key's dimensions (a
    rate, or a Rule keyed by nothing): keyed by none, they would be one budget for every
    client. A Policy's rules (``items`` empty) are its own: an empty mapping is right for
    one keyed by nothing.

    Raises:
        ConfigError: naming the key function and both fixes.
    """
    if any(isinstance(item, Rate) or not item.by for item in items):
        raise ConfigError(
            f"the key function {_named(key)} answered an empty mapping: the route's rates "
            "take the key's dimensions, so every client would share one budget; answer a "
            "value ({'user': ...}); for one budget for all on purpose, answer one constant "
            "(key=lambda request: 'all'), or give the route a Policy keyed by nothing "
            "(Policy('everyone', Rule('100/minute')))"
        )


def _keys(value: object) -> bool:
    """Whether ``value`` is a dimension value: a str or an int (not a bool)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _refuse(
    key: KeyFunc, context: Mapping[str, object], dimension: object, value: object
) -> NoReturn:
    """The error for one value a key function gave (``dimension`` None: its only value)."""
    if dimension is not None and not isinstance(dimension, str):
        raise ConfigError(
            f"the key function {_named(key)} answered a mapping with the dimension name "
            f"{_short(dimension)} ({_kind(dimension)}): dimension names are str"
        )
    if value is None:
        _absent(key, context)
    where = "" if dimension is None else f"for {dimension!r}: "
    raise ConfigError(
        f"the key function {_named(key)} answered {where}{_kind(value)}, {_short(value)}: a key "
        "function answers a str or an int (each value its own budget), None (a 400: the "
        "request has no value), or a mapping of dimension names to those; turn it into "
        "one, as str(...) or '/'.join(...) does"
    )


def _named(key: KeyFunc) -> str:
    return str(getattr(key, "__qualname__", None) or _short(key))


def _kind(value: object) -> str:
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


def _short(value: object) -> str:
    """``value``'s repr, cut short: a key function may answer anything, of any size."""
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


_warned: set[int] = set()  # the key functions (ids) already logged as answering None


def _absent(key: KeyFunc, context: Mapping[str, object]) -> NoReturn:
    """A key function answered None for a dimension: the request lacks what the route is
    keyed by (a 400), which the developer is told once, a key function."""
    name = next(dimension for dimension, value in context.items() if value is None)
    if id(key) not in _warned and len(_warned) < 1024:  # by id: a key may not hash
        _warned.add(id(key))
        _log.warning(
            "freqguard: the key function %s answered None for %r: such requests are "
            "refused with 400; answer a value for every request, or key by header(...) "
            "with missing='share', 'skip' or another key function to choose otherwise",
            getattr(key, "__qualname__", key),
            name,
        )
    raise BadRequest(f"this request has no value for {name!r}, which the route is keyed by")


#: The functions that make key functions (``client_ip``, ``header``, ``path_param``): given
#: as a key themselves, uncalled, they are refused naming the call.
KEY_MAKERS: list[Callable[..., KeyFunc]] = []


def declared(key: KeyFunc, *dimensions: str) -> KeyFunc:
    """``key``, saying the dimensions it gives (``client_ip()``'s ``client``), so that a
    route's rules can be checked against them when the route is made."""
    key.dimensions = dimensions  # type: ignore[attr-defined]
    return key


def dimensions_of(key: KeyFunc) -> tuple[str, ...] | None:
    """The dimensions ``key`` says it gives (:func:`declared`), or None: known only from a
    request."""
    found = getattr(key, "dimensions", None)
    return found if isinstance(found, tuple) else None


def check_key(key: object, where: str) -> KeyFunc:
    """``key``, if it is a key function: a callable that takes the request.

    Raises:
        ConfigError: something else, or a callable that cannot take one argument
            (Flask-Limiter's ``key_func`` takes none: it reads ``flask.request``), named
            with the fix, instead of a 500 at every request.
    """
    if not callable(key):
        raise ConfigError(f"{where}: key must be a key function (client_ip()), got {shown(key)}")
    if any(key is maker for maker in KEY_MAKERS):
        name = getattr(key, "__name__", "")
        raise ConfigError(f"{where}: key={name} makes a key function: call it, key={name}(...)")
    if inspect.iscoroutinefunction(key) or inspect.iscoroutinefunction(
        getattr(key, "__call__", None)  # noqa: B004 (an instance's own __call__)
    ):
        raise ConfigError(
            f"{where}: the key function {getattr(key, '__name__', key)!r} is async: a key "
            "function answers at once, from the request (read what it awaits in a "
            "middleware before, or key by header(...))"
        )
    try:
        _takes_one(key)
    except TypeError:
        raise ConfigError(
            f"{where}: the key function {getattr(key, '__name__', key)!r} must take the "
            "request (a RequestInfo: .headers, .client, .path_params...): write "
            "key=lambda request: request.headers.get('x-user'), or header('X-User')"
            f"{_whose(key)}"
        ) from None
    except ValueError:  # no signature to read (a builtin): called as it is
        pass
    return key


def _whose(key: Callable[..., object]) -> str:
    """Whose habit a key function of the wrong arity may be: Flask-Limiter's ``key_func``
    takes nothing, django-ratelimit's key callable ``(group, request)``."""
    for given, whose in (((), "Flask-Limiter's key_func takes none"), ((None, None), _GROUP)):
        try:
            inspect.signature(key).bind(*given)
        except (TypeError, ValueError):
            continue
        return f" ({whose})"
    return ""


_GROUP = "django-ratelimit's key callable takes (group, request): drop the group"


def _takes_one(key: Callable[..., object]) -> None:
    """Raise TypeError unless ``key`` takes one positional argument: by its own signature
    (a ``functools.wraps`` wrapper's, which is what is called), else the one it wraps."""
    try:
        inspect.signature(key, follow_wrapped=False).bind(None)
    except TypeError:
        inspect.signature(key).bind(None)


def header(name: str, *, missing: str | KeyFunc = "deny") -> KeyFunc:
    """The value of one request header, as dimension ``name`` (lower case, ``-`` as ``_``).

    ``missing`` says what a request without the header gets, a choice to make on purpose
    (keyed on ``""``, every anonymous client would share one budget):

    * ``"deny"`` (the default): refused with 400, naming the header;
    * ``"share"``: keyed on ``""``: all requests without it share one budget;
    * ``"skip"``: not capped by this limit (nor given its headers);
    * a key function (``client_ip()``): keyed on what it gives instead, prefixed (a NUL
      first, which no header value holds) so that it never meets a header's value.

    A request carrying the header on several lines raises :class:`BadRequest` (answered
    400): frameworks disagree on which line the application reads (Starlette the first,
    a raw ASGI app often the last), and a key on any one of them, or on all joined, lets a
    client keep the value the application uses and rotate the key with another line. Under
    WSGI the server has already joined the lines into one value with commas; that value is
    all a WSGI application can read, and it is the key.

    Raises:
        ConfigError: ``name`` is no header name (a token: RFC 9110), or ``missing`` is none
            of those.
    """
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        raise ConfigError(
            f"header(name) takes a header's name (letters, digits and !#$%&'*+-.^_`|~, as "
            f"HTTP writes one: 'X-User'), got {shown(name, 60)}"
        )
    lower = name.lower()
    dimension = re.sub(r"\W", "_", lower)
    if callable(missing):  # a key function as any: one argument, not async, called
        check_key(missing, f"header({name!r}, missing=...)")
    elif missing not in ("deny", "share", "skip"):
        raise ConfigError(
            f"header({name!r}, missing=...) takes 'deny', 'share', 'skip' or a key function "
            f"(client_ip()), got {missing!r}"
        )

    def absent(request: RequestInfo) -> object:
        if missing == "share":
            return ""
        if missing == "skip":
            raise SkipRequest(name)
        if callable(missing):
            found = context_of(missing, request)
            # NUL never comes in a header value: these keys never meet one
            return "\0" + ":".join(str(value) for value in found.values())
        raise BadRequest(f"header {name!r} is required here")

    def key(request: RequestInfo) -> dict[str, object]:
        lines = request.header_lines(lower)
        if len(lines) > 1:
            raise BadRequest(f"header {name!r} was sent {len(lines)} times; send it once")
        return {dimension: lines[0] if lines else absent(request)}

    return declared(key, dimension)


def path_param(name: str) -> KeyFunc:
    """A parameter of the matched route pattern (``/users/{user_id}``)."""

    def key(request: RequestInfo) -> dict[str, object]:
        if name not in request.path_params:
            raise ConfigError(f"path_param({name!r}): the route pattern has no such parameter")
        return {name: request.path_params[name]}

    key.path_param = name  # type: ignore[attr-defined]  # a Limit's pattern must name it
    return declared(key, name)


KEY_MAKERS.extend([header, path_param])
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
