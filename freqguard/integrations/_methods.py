"""The HTTP methods a cap counts, checked once for every integration (a Starlette
``Limit``'s, Flask's and Django's ``capped(methods=...)``): a list of method names, none a
misspelling of a standard one, which would match no request and leave the route uncapped
without a word. Extension methods (WebDAV's, a cache's ``PURGE``) are a cap's to count."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from freqguard.errors import ConfigError, shown

__all__ = ["EXTENSIONS", "STANDARD", "check_methods", "view_methods"]

#: RFC 9110's methods and PATCH: a name resembling one is taken for a misspelling of it.
STANDARD = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
#: Extension methods a cap may count, never misspellings: IANA's HTTP Method Registry (WebDAV's,
#: CalDAV's, versioning's) and a cache's PURGE. Any other name is counted as written too,
#: unless it resembles a standard method.
EXTENSIONS = frozenset(
    [
        "ACL",
        "BASELINE-CONTROL",
        "BIND",
        "CHECKIN",
        "CHECKOUT",
        "COPY",
        "LABEL",
        "LINK",
        "LOCK",
        "MERGE",
        "MKACTIVITY",
        "MKCALENDAR",
        "MKCOL",
        "MKREDIRECTREF",
        "MKWORKSPACE",
        "MOVE",
        "ORDERPATCH",
        "PRI",
        "PROPFIND",
        "PROPPATCH",
        "PURGE",
        "QUERY",
        "REBIND",
        "REPORT",
        "SEARCH",
        "UNBIND",
        "UNCHECKOUT",
        "UNLINK",
        "UNLOCK",
        "UPDATE",
        "UPDATEREDIRECTREF",
        "VERSION-CONTROL",
    ]
)
#: A method's name: letters, words joined by ``-`` or ``_`` (``VERSION-CONTROL``); RFC 9110's
#: token allows more (``|``, ``+``, ``.``), which only a mistake (``"GET|POST"``) writes.
_NAME = re.compile(r"[A-Za-z]+(?:[-_][A-Za-z]+)*")


def _items(value: object) -> tuple[object, ...] | None:
    """``value``'s items if it is iterable (a dict's keys: its names), else None."""
    try:
        return tuple(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def check_methods(methods: Iterable[str] | None) -> frozenset[str] | None:
    """The HTTP methods a cap applies to, upper case (None: every method).

    Raises:
        ConfigError: not an iterable of method names (a bare string, ``"POST"``, would be
            its letters, matching no request), none at all, or a name resembling a
            standard method (``"POTS"``), named with the one meant.
    """
    if methods is None:
        return None
    given = None if isinstance(methods, (str, bytes)) else _items(methods)
    names = [m for m in given or () if isinstance(m, str) and _NAME.fullmatch(m)]
    if given is None or len(names) != len(given):
        theirs = bool(given) and all(m is None for m in given or ())  # django-ratelimit's ALL
        raise ConfigError(
            f"methods must be a list of HTTP methods (['POST']), got {shown(methods)}"
            + (": that is django-ratelimit's ALL; leave methods= out for every method" * theirs)
        )
    if not names:
        raise ConfigError("methods must name at least one HTTP method, got none (None: every)")
    chosen = frozenset(m.upper() for m in names)
    _check_spelling(chosen)
    return chosen


def view_methods(methods: Iterable[str] | None) -> frozenset[str] | None:
    """A view cap's methods (Flask's and Django's ``capped(methods=...)``): as given, upper
    case; GET brings HEAD (a GET without its body).

    Raises:
        ConfigError: what :func:`check_methods` refuses.
    """
    chosen = check_methods(methods)
    if chosen is None:
        return None
    return chosen | {"HEAD"} if "GET" in chosen else chosen


def _check_spelling(chosen: frozenset[str]) -> None:
    """A method resembling a standard one matches no request a client sends: the cap would
    never count, and every request reach the route uncapped.

    Raises:
        ConfigError: naming the method and the one it resembles.
    """
    for method in sorted(chosen):
        if method in STANDARD or method in EXTENSIONS:
            continue
        meant = difflib.get_close_matches(method, STANDARD, n=1, cutoff=0.6)
        if meant:
            raise ConfigError(
                f"methods: {method!r} is not an HTTP method: did you mean {meant[0]!r}? "
                "(it would match no request, leaving the route uncapped; an extension "
                f"method is counted as it is: {', '.join(sorted(EXTENSIONS)[:4])}...)"
            )
