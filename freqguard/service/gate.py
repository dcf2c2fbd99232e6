"""Who may call the service: bearer tokens (their format, in a file or the environment),
writes from the service's own origin only, in JSON only, and the warning a service open to
the network without tokens deserves.

Every call under ``/v1/policies`` is a POST, PUT or DELETE, peeks and lookups included, and
each passes :meth:`Gate.check` before its body is read. A web page can make a browser send
a form or a ``text/plain`` fetch to any address without asking (no CORS preflight), and the
browser then sends the operator's network position with it: refusing anything but
``application/json`` (which a cross-site page cannot send without a preflight this service
never grants) and any ``Origin`` or ``Sec-Fetch-Site`` that names another site closes that.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.requests import Request

from freqguard.errors import ConfigError
from freqguard.service.problems import Problem, shown

__all__ = ["TOKENS_ENV", "Gate", "parse_tokens", "startup_warnings", "tokens_from_env"]

#: Bearer tokens, one per line; ``FREQGUARD_TOKENS_FILE``: a file of them, in the same form.
TOKENS_ENV = "FREQGUARD_TOKENS"
#: A token: visible ASCII but the comma (what an Authorization header carries unchanged,
#: and no separator a list of tokens was once written with).
_TOKEN = re.compile(r"[\x21-\x2b\x2d-\x7e]+")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SAME = frozenset({"same-origin", "none"})  # Sec-Fetch-Site; "none": the user's own action


def _flaw(token: str) -> str:
    """What makes ``token`` no token, in words that never show it."""
    if "," in token:
        return "a comma"
    if any(c.isspace() for c in token):
        return "a space inside it"
    return "a character other than visible ASCII"


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
        if token and _TOKEN.fullmatch(token) is None:
            raise ConfigError(
                f"{source}, line {number}: holds {_flaw(token)}; a token is one word of "
                "visible ASCII without commas, one token a line"
            )
        if token:
            tokens.append(token)
    return tokens


def tokens_from_env() -> list[str]:
    """The tokens :data:`TOKENS_ENV` and the file ``FREQGUARD_TOKENS_FILE`` names hold.

    Raises:
        ConfigError: a file that cannot be read, or a line that is not one token.
    """
    tokens = parse_tokens(os.environ.get(TOKENS_ENV, ""), TOKENS_ENV)
    path = os.environ.get(f"{TOKENS_ENV}_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as file:
                text = file.read()
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
            raise ConfigError(f"the token file {path}: cannot read it ({why})") from None
        tokens += parse_tokens(text, f"the token file {path}")
    return tokens


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name: it may resolve to any address
        return False


def startup_warnings(host: str, tokens: Sequence[str]) -> list[str]:
    """What to tell the operator as ``freqguard serve`` starts on ``host`` with ``tokens``:
    a service reachable beyond this machine with no token lets anyone who can reach it
    count, reset and change limits."""
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


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


class Gate:
    """The checks every call under ``/v1/policies`` passes before its body is read."""

    def __init__(self, tokens: Sequence[str]) -> None:
        for number, token in enumerate(tokens, 1):
            if not isinstance(token, str) or _TOKEN.fullmatch(token) is None:
                flaw = _flaw(token) if isinstance(token, str) and token else "nothing"
                raise ConfigError(
                    f"token {number} holds {flaw}; a token is one word of visible ASCII "
                    "without commas"
                )
        self._tokens = [token.encode() for token in tokens]

    def check(self, request: Request) -> None:
        """Raise the :class:`Problem` that refuses ``request``, if any: another site's
        (403), without a valid token (401), not JSON (415)."""
        self._same_site(request)
        if self._tokens and not self._authorized(request):
            raise Problem(
                401, "a valid bearer token is required", headers={"www-authenticate": "Bearer"}
            )
        media = _media_type(request)
        if media != "application/json":
            got = shown(media, 60) if media else "none"
            raise Problem(
                415, f"a call takes a body of application/json only, got content type {got}"
            )

    @staticmethod
    def _same_site(request: Request) -> None:
        site = request.headers.get("sec-fetch-site")
        if site is not None and site.strip().lower() not in _SAME:
            raise Problem(
                403,
                f"a call from another site is refused (Sec-Fetch-Site: {shown(site, 20)}); "
                "only this service's own page may call it from a browser",
            )
        origin = request.headers.get("origin")
        if origin is not None and not _same_origin(origin, request.headers.get("host", "")):
            raise Problem(
                403,
                f"a call from another origin is refused (Origin: {shown(origin, 60)}); "
                "only this service's own page may call it from a browser",
            )

    def _authorized(self, request: Request) -> bool:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        offered = given.strip().encode()
        # every token compared, in constant time: neither which nor how much matched shows
        matched = [hmac.compare_digest(offered, token) for token in self._tokens]
        return any(matched)
