"""Who may call the service: bearer tokens, the service's own origin only, JSON only, the
names it answers to in ``Host``, and the warning a service open without tokens deserves.

Every call under ``/v1/policies`` (a POST, PUT or DELETE, peeks included) passes
:meth:`Gate.check` before its body is read. A web page can make a browser send a form or a
``text/plain`` fetch anywhere without a CORS preflight, carrying the operator's network
position: refusing anything but ``application/json`` (which needs a preflight this service
never grants) and any ``Origin`` or ``Sec-Fetch-Site`` naming another site closes that.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request

from freqguard.errors import ConfigError
from freqguard.service.problems import Problem, shown

__all__ = [
    "HOSTS_ENV",
    "LOOPBACK_NAMES",
    "TOKENS_ENV",
    "Gate",
    "HostCheck",
    "hosts_from_env",
    "parse_tokens",
    "served_names",
    "startup_warnings",
    "tokens_from_env",
]

#: Bearer tokens, one per line; ``FREQGUARD_TOKENS_FILE``: a file of them, in the same form.
TOKENS_ENV = "FREQGUARD_TOKENS"
#: The names a worker answers to in ``Host`` (comma-separated; ``freqguard serve`` sets it).
HOSTS_ENV = "FREQGUARD_SERVE_HOSTS"
#: What a browser on this machine calls a service bound to loopback.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
#: A token: visible ASCII but the comma (what an Authorization header carries unchanged,
#: and no separator a list of tokens was once written with).
_TOKEN = re.compile(r"[\x21-\x2b\x2d-\x7e]+")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
_SAME = frozenset({"same-origin", "none"})  # Sec-Fetch-Site; "none": the user's own action


def _check(token: object, where: str, tail: str = "") -> None:
    """Refuse what is not a token, at ``where``, in words that never show it."""
    if isinstance(token, str) and _TOKEN.fullmatch(token) is not None:
        return
    if not isinstance(token, str) or not token:
        flaw = "nothing"
    elif "," in token:
        flaw = "a comma"
    elif any(c.isspace() for c in token):
        flaw = "a space inside it"
    else:
        flaw = "a character other than visible ASCII"
    raise ConfigError(
        f"{where} holds {flaw}; a token is one word of visible ASCII without commas{tail}"
    )


def parse_tokens(text: str, source: str) -> list[str]:
    """The tokens of ``text``: one a line, blank lines and the spaces around a token
    ignored.

    Raises:
        ConfigError: a line holding more than one word, a comma or a character other than
            visible ASCII, named by ``source`` and its line number (never by the token).
    """
    tokens = []
    for number, line in enumerate(text.split("\n"), 1):
        token = line.strip()
        if token:
            _check(token, f"{source}, line {number}:", ", one token a line")
            tokens.append(token)
    return tokens


def tokens_from_env() -> list[str]:
    """The tokens :data:`TOKENS_ENV` and the file ``FREQGUARD_TOKENS_FILE`` names hold.

    Raises:
        ConfigError: a file that cannot be read or holds no token, the variable set to no
            token (and no file), or a line that is not one token.
    """
    given = os.environ.get(TOKENS_ENV)
    tokens = parse_tokens(given or "", TOKENS_ENV)
    path = os.environ.get(f"{TOKENS_ENV}_FILE")
    if given is not None and not tokens and not path:  # a secret not mounted: never open
        raise ConfigError(
            f"{TOKENS_ENV} is set but holds no token: set means tokens are meant (one a "
            "line); fill it, or unset it for a service without tokens"
        )
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
            raise ConfigError(f"the token file {path}: cannot read it ({why})") from None
        found = parse_tokens(text, f"the token file {path}")
        if not found:  # a secret not mounted: never a service open to anyone
            raise ConfigError(
                f"the token file {path} holds no token: a file given means tokens are meant "
                "(one a line); fill it, or give no token file for a service without tokens"
            )
        tokens += found
    return tokens


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name: it may resolve to any address
        return False


def served_names(host: str, allowed: Sequence[str] = ()) -> tuple[str, ...] | None:
    """The names a service bound to ``host`` answers to in ``Host``: the loopback names for
    a loopback address, with ``allowed`` (a proxy's name); None (any name) beyond loopback
    unless ``allowed`` names some.

    A page on another site can point a name of its own at 127.0.0.1 (DNS rebinding): its
    requests then carry a matching ``Origin`` and ``Host``, so only the name tells them
    apart from the operator's own.

    Raises:
        ConfigError: an allowed name that is not a host name or an address.
    """
    names = []
    for name in allowed:
        bare = name.strip("[]")
        try:
            names.append(str(ipaddress.ip_address(bare)))
        except ValueError:
            if not _HOST_NAME.fullmatch(bare):
                raise ConfigError(
                    f"--allow-host takes a host name or an address, got {shown(name, 60)}"
                ) from None
            names.append(bare.lower())
    if _loopback(host):
        return (*LOOPBACK_NAMES, *names)
    return tuple(names) or None


def hosts_from_env() -> tuple[str, ...] | None:
    """The names :data:`HOSTS_ENV` lists (None: any)."""
    found = os.environ.get(HOSTS_ENV, "")
    return tuple(found.split(",")) if found else None


class HostCheck:
    """An ASGI app that answers only requests whose ``Host`` is one of ``names`` (a 421
    problem+json otherwise, for every route, the page and its reads included)."""

    def __init__(self, app: Any, names: Sequence[str]) -> None:
        self.app, self.names = app, frozenset(name.lower() for name in names)
        self._seen = functools.lru_cache(64)(self._answers)  # a Host's verdict, by its bytes

    def _answers(self, host: bytes, scheme: str) -> bool:
        found = _netloc(host.decode("latin-1"), scheme)
        return found is not None and found[0].lower() in self.names

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            host = next((v for k, v in scope["headers"] if k == b"host"), b"")
            # a client may send any Host: only short ones are kept, the cache stays small
            answers = self._seen if len(host) <= 300 else self._answers
            if not answers(host, scope.get("scheme", "http")):
                shown_host = shown(host.decode("latin-1"), 60)
                problem = Problem(
                    421,
                    f"this service does not answer to Host {shown_host}; it answers to "
                    f"{', '.join(sorted(self.names))} (freqguard serve --allow-host adds one)",
                )
                await problem.response(Request(scope)).__call__(scope, receive, send)
                return
        await self.app(scope, receive, send)


def startup_warnings(host: str, tokens: Sequence[str]) -> list[str]:
    """What to tell the operator as ``freqguard serve`` starts on ``host`` with ``tokens``."""
    if tokens or _loopback(host):
        return []
    return [
        f"freqguard serve: listening on {host} with no token: anyone who can reach this "
        "address can hit, reset and change limits. Give tokens (FREQGUARD_TOKENS or "
        "--token-file), or serve on 127.0.0.1 behind a proxy that authenticates."
    ]


def _netloc(host: str, scheme: str) -> tuple[str, int | None] | None:
    """A host[:port] as (host, port), the scheme's default port as None; None if bad."""
    try:
        parts = urlsplit(f"//{host}")
        port = parts.port
    except ValueError:
        return None
    if parts.hostname is None or parts.username is not None or parts.path:
        return None
    return parts.hostname, None if port == _DEFAULT_PORTS.get(scheme) else port


def _same_origin(origin: str, host: str) -> bool:
    """Whether ``Origin`` names the host the request was sent to (``Host``), by name and
    port: the service's own page. The scheme is not compared: behind a proxy that ends
    TLS, the page is https and the request reaches the service as http."""
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return False
    if parts.scheme not in _DEFAULT_PORTS or parts.path or parts.query:
        return False
    own = _netloc(host, parts.scheme)
    return own is not None and _netloc(parts.netloc, parts.scheme) == own


def _headers(request: Request) -> dict[bytes, bytes]:
    """The request's headers by their lowercase names, read once (the first of a name
    repeated, as Starlette's ``Headers.get`` answers)."""
    headers: dict[bytes, bytes] = dict(reversed(request.scope["headers"]))
    return headers


def _text(headers: dict[bytes, bytes], name: bytes) -> str | None:
    value = headers.get(name)
    return None if value is None else value.decode("latin-1")


class Gate:
    """The checks every call under ``/v1/policies`` passes before its body is read."""

    def __init__(self, tokens: Sequence[str]) -> None:
        for number, token in enumerate(tokens, 1):
            _check(token, f"token {number}")
        self._tokens = [token.encode() for token in tokens]

    def check(self, request: Request) -> None:
        """Raise the :class:`Problem` that refuses ``request``, if any: another site's
        (403), without a valid token (401), not JSON (415)."""
        headers = _headers(request)
        self._same_site(headers)
        if self._tokens and not self._authorized(headers):
            raise Problem(
                401, "a valid bearer token is required", headers={"www-authenticate": "Bearer"}
            )
        media = headers.get(b"content-type", b"").partition(b";")[0].strip().lower()
        if media != b"application/json":
            got = shown(media.decode("latin-1"), 60) if media else "none"
            raise Problem(
                415, f"a call takes a body of application/json only, got content type {got}"
            )

    @staticmethod
    def _same_site(headers: dict[bytes, bytes]) -> None:
        site, origin = _text(headers, b"sec-fetch-site"), _text(headers, b"origin")
        if site is not None and site.strip().lower() not in _SAME:
            refused = f"another site is refused (Sec-Fetch-Site: {shown(site, 20)})"
        elif origin is not None and not _same_origin(origin, _text(headers, b"host") or ""):
            refused = f"another origin is refused (Origin: {shown(origin, 60)})"
        else:
            return
        only = "only this service's own page may call it from a browser"
        raise Problem(403, f"a call from {refused}; {only}")

    def authorized(self, request: Request) -> bool:
        """Whether ``request`` may see what a call may: the service has no tokens, or it
        carries a valid one."""
        return not self._tokens or self._authorized(_headers(request))

    def digest(self, text: str) -> str:
        """``text`` as a digest keyed by the tokens (16 hex characters): the same in every
        worker that has them, and not to be reversed without one."""
        key = hashlib.blake2b(b"\n".join(sorted(self._tokens)), digest_size=32).digest()
        return hashlib.blake2b(text.encode(), key=key, digest_size=8).hexdigest()

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        scheme, _, given = (_text(headers, b"authorization") or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        offered = given.strip().encode()
        # every token compared, in constant time: neither which nor how much matched shows
        matched = [hmac.compare_digest(offered, token) for token in self._tokens]
        return any(matched)
