"""The query options a Redis URL may carry, each checked where it is given (see
:mod:`freqguard.backends.urls`): what is allowed, and the clear error for what is not."""

from __future__ import annotations

import difflib
import inspect
import re
import ssl
from typing import Any, NoReturn
from urllib.parse import parse_qs

from freqguard.errors import ConfigError

DEFAULT_TIMEOUT = 0.5
MAX_SECONDS = 86400  # a timeout longer than a day is a typo, and past ~1e9 s sockets refuse it
SENTINEL_PORT = 26379
# The query options a Redis URL may carry: redis-py's connection options that a string can
# express. redis-py itself would pass any other name to its connection, to fail at the first
# call; and it reads any flag text but five as true.
_SECONDS = frozenset({"socket_timeout", "socket_connect_timeout", "wait_timeout"})
_INTEGERS = {  # (smallest, largest)
    "db": (0, 2**31 - 1),
    "max_connections": (1, 2**31 - 1),
    "socket_read_size": (1, 2**31 - 1),
    "health_check_interval": (0, MAX_SECONDS),  # 0: no health checks
    "protocol": (2, 3),
    "min_other_sentinels": (0, 1000),
    "wait_replicas": (0, 100),
    "bins": (1, 2**32),
}
_FLAGS = frozenset({"socket_keepalive", "retry_on_timeout", "ssl_check_hostname"})
#: How a backend's calls may reach the policy function (``RedisBackend(scripts=...)``).
SCRIPT_KINDS = ("auto", "functions", "eval")
# options that take one of a few words
_CHOICES = {"scripts": SCRIPT_KINDS, "ssl_cert_reqs": ("none", "optional", "required")}
# options that name ssl.VerifyFlags (comma-separated), which redis-py takes as a list
_VERIFY_FLAGS = frozenset({"ssl_include_verify_flags", "ssl_exclude_verify_flags"})
# freqguard's own options, for the backend and not the client: wait for replicas (WAIT),
# recipients' records shared in bins (RedisBackend's bins), and how calls reach the
# policy function (Redis Functions or EVAL scripts)
_BACKEND = frozenset({"wait_replicas", "wait_timeout", "bins", "scripts"})
# options renamed before a release, by their old names: never taken, never ignored
_RENAMED = {"buckets": "bins"}
_FLAG_VALUES = ("true", "false", "yes", "no", "1", "0")
_TEXTS = frozenset(
    {
        "client_name",
        "username",
        "password",
        "lib_name",
        "lib_version",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_ciphers",
        "sentinel_username",
        "sentinel_password",
    }
)
# the options whose values a message may show: every known one but the passwords
_SECRET = frozenset({"password", "ssl_password", "sentinel_password"})

#: Every option a URL's query may carry.
QUERY_OPTIONS = frozenset(
    _SECONDS | _INTEGERS.keys() | _FLAGS | _TEXTS | _CHOICES.keys() | _VERIFY_FLAGS | _BACKEND
)
_PLAIN = (
    _SECONDS | _INTEGERS.keys() | _FLAGS | _TEXTS | _CHOICES.keys() | _VERIFY_FLAGS | _BACKEND
) - _SECRET

# Options for the sentinels themselves (or for the Sentinel manager): a Sentinel URL's only.
_FOR_SENTINELS = frozenset({"sentinel_username", "sentinel_password", "min_other_sentinels"})
# The connection options the sentinels' own connections share with the servers'.
_SHARED_WITH_SENTINELS = frozenset({"socket_timeout", "socket_connect_timeout", "socket_keepalive"})


def _shown(url: str) -> str:
    """The URL as messages show it: its password masked (``user:***@``, ``password=***``),
    and the value of every option that is not a known one of no secret (a misspelt
    ``pasword=`` is where a value needs it most). An ``@`` past the address (a password
    cut short by a ``/``, ``?`` or ``#`` it holds, or an option's value) hides all but the
    scheme: what it ends may be any part of a password."""
    head, sep, rest = url.partition("://")
    end = min((rest.find(c) for c in "/?#" if c in rest), default=len(rest))
    if "@" in rest[end:] and not (head.lower() == "unix" and end == 0 and "?" not in rest):
        return f"{head}{sep}***"
    # to the last @ of the address: a user or a password may hold an @ unescaped
    url = re.sub(r"^([^:/?#]*://)([^/?#]*)@", _user_shown, url)
    # a value ends at the next & (or #): a secret's whole
    masked = re.sub(r"([?&])([^=&#]*)=([^&#]*)", _option_shown, url)
    # cut once masked (no secret's head is left): a URL of any length, a message's line
    return masked if len(masked) <= 160 else f"{masked[:140]}... ({len(masked)} characters)"


def _user_shown(found: re.Match[str]) -> str:
    """The user and password of a URL as messages show them: the user, the password
    masked; all masked when the user holds an ``@`` (a password may follow it)."""
    user, colon, _ = found[2].partition(":")
    return f"{found[1]}{'***' if '@' in user or not colon else user + ':***'}@"


def _option_shown(found: re.Match[str]) -> str:
    plain = found[2] in _PLAIN  # every option name is lower case: PASSWORD is unknown
    return f"{found[1]}{found[2]}={found[3] if plain else '***'}"


def _excerpt(text: str) -> str:
    return text if len(text) <= 24 else text[:20] + "..."


def _integer(url: str, name: str, text: str, low: int, high: int) -> int:
    # at most 10 digits before int(): no text of any length reaches Python's digit limit
    if re.fullmatch(r"[0-9]{1,10}", text) is None or not low <= int(text) <= high:
        raise ConfigError(
            f"{name} must be an integer >= {low} and <= {high}, got {_excerpt(text)!r} "
            f"(in {_shown(url)!r})"
        )
    return int(text)


def _seconds(url: str, name: str, text: str) -> float:
    number = re.fullmatch(r"[0-9]{1,6}(\.[0-9]{0,9})?|\.[0-9]{1,9}", text)
    if number is None or not 0 < float(text) <= MAX_SECONDS:
        raise ConfigError(
            f"{name} must be a number of seconds > 0 and <= {MAX_SECONDS}, "
            f"got {_excerpt(text)!r} (in {_shown(url)!r})"
        )
    return float(text)


def _port(url: str, text: str) -> int:
    return _integer(url, "port", text, 1, 65535)


def _check_port(url: str, netloc: str) -> None:
    if "@" not in netloc and "@" in url.partition("?")[0]:  # the address ended at a / or #
        raise ConfigError(
            f"the user or password in {_shown(url)!r} holds a '/' or '#': percent-encode "
            "it (%2F, %23)"
        )
    host = netloc.rpartition("@")[2]
    port = host.rpartition("]")[2] if host.startswith("[") else host
    if ":" in port:
        _port(url, port.partition(":")[2])


def _cut_password(url: str) -> None:
    """Refuse a user or password that holds an unencoded ``/``, ``?`` or ``#``: the
    address ends there, so the rest would be read as a path or options (or a fragment,
    dropped) and shown in the error. Told by an ``@`` past the address where no URL has
    one (the path, a Sentinel service's name among them: it writes ``%40``, a fragment, an
    unnamed option: ``?k9&Lm2@host``), or an address before it that is no ``host[:port]``
    list (``app:Zq7?...``).

    Raises:
        ConfigError: naming the fix, the URL masked (:func:`_shown`).
    """
    scheme, _, rest = url.partition("://")
    _cut_secret(url)
    if scheme.lower() == "unix":  # the path after the user's part may hold an @
        user = rest.partition("@/")[0] if "@/" in rest else ""
        cut = min((user.find(c) for c in "/?#" if c in user), default=-1)
        if cut >= 0:
            _refused(url, user[cut])
        return
    cut = min((rest.find(c) for c in "/?#" if c in rest), default=len(rest))
    user = rest[:cut].rpartition("@")[0]
    for bracket in "[]":  # Pythons differ: from 3.11 urlsplit refuses it, 3.10 takes it
        if bracket in user:
            _refused(url, bracket)
    if "@" not in rest[cut:]:
        return
    path, _, query = rest[cut:].partition("?")
    query, _, fragment = query.partition("#")
    unnamed = any("=" not in item.partition("@")[0] for item in query.split("&") if "@" in item)
    address = rest[:cut].rpartition("@")[2]  # past a user's part, if any
    hosts = address.split(",") if address else []  # none: the default host
    if "@" in path or "@" in fragment or unnamed or not all(map(_host, hosts)):
        # a Sentinel service named with an @ reads as a password's tail: it writes %40
        sentinel = scheme.lower().endswith("+sentinel") and "@" in path.partition("?")[0]
        _refused(url, rest[cut], "; a service name's '@' is written %40 too" * sentinel)


def _cut_secret(url: str) -> None:
    """Refuse a password option (``password=``...) whose value an unencoded ``&`` or ``#``
    ends: the rest would be read as an option of its own, shown in the error, or as a
    fragment, dropped (a password cut short, silently).

    Raises:
        ConfigError: naming the fix, the URL masked.
    """
    query, hashed, _ = url.partition("?")[2].partition("#")
    items = query.split("&")
    for item, after in zip(items, [*items[1:], None], strict=True):
        if item.partition("=")[0] not in _SECRET:
            continue
        shown = f"{url.partition('?')[0]}?***"  # its rest may be anywhere after the ?
        if after is not None and "=" not in after:  # a bare word: the password's rest
            _refused(shown, "&")
        if after is None and hashed:
            _refused(shown, "#")


def _refused(url: str, char: str, tail: str = "") -> NoReturn:
    """The refusal of a user or password (an option's too) that holds ``char`` unencoded."""
    code = {"/": "%2F", "?": "%3F", "#": "%23", "&": "%26", "[": "%5B", "]": "%5D"}[char]
    raise ConfigError(
        f"a user or password in {_shown(url)!r} holds {char!r} unencoded, which a URL reads "
        f"otherwise: percent-encode it ({code}; '@' is %40){tail}"
    )


def _host(text: str) -> bool:
    """Whether ``text`` may be one ``host[:port]`` (``[v6%zone]:port`` for IPv6), the port
    digits."""
    return re.fullmatch(r"(\[[0-9A-Za-z:.%]+\]|[^:\[\]]+)(:[0-9]+)?", text) is not None


def _db(url: str, scheme: str, query: dict[str, Any], text: str | None) -> None:
    """The database from the path (``text``) into ``query``: given once, an integer, and 0 on
    a cluster (it has no other)."""
    if text is not None:
        if "db" in query:
            raise ConfigError(f"db is given twice, as the path and ?db= (in {_shown(url)!r})")
        query["db"] = _integer(url, "db", text, *_INTEGERS["db"])
    if query.get("db", 0) != 0 and scheme.endswith("+cluster"):
        raise ConfigError(f"a Redis Cluster has only db 0, got {query['db']} (in {_shown(url)!r})")


def _option(url: str, name: str, text: str) -> Any:
    """One query option's value, typed as redis-py takes it.

    Raises:
        ConfigError: naming the option, its value and what is allowed.
    """
    if name in _SECONDS:
        return _seconds(url, name, text)
    if name in _INTEGERS:
        return _integer(url, name, text, *_INTEGERS[name])
    if name in _CHOICES:
        if text not in _CHOICES[name]:
            raise ConfigError(
                f"{name} must be one of {', '.join(_CHOICES[name])}, "
                f"got {_excerpt(text)!r} (in {_shown(url)!r})"
            )
        return text
    if name in _VERIFY_FLAGS:
        return _verify_flags(url, name, text)
    if name in _FLAGS:
        if text.lower() not in _FLAG_VALUES:
            raise ConfigError(
                f"{name} must be one of {', '.join(_FLAG_VALUES)}, "
                f"got {_excerpt(text)!r} (in {_shown(url)!r})"
            )
        return text.lower() in ("true", "yes", "1")
    if name in _RENAMED:
        raise ConfigError(
            f"unknown option {name!r}: it is called {_RENAMED[name]!r} now "
            f"(?{_RENAMED[name]}={_excerpt(text)}), in {_shown(url)!r}"
        )
    if name not in _TEXTS:
        names = sorted(
            _SECONDS | _INTEGERS.keys() | _FLAGS | _TEXTS | _CHOICES.keys() | _VERIFY_FLAGS
        )
        close = difflib.get_close_matches(name[:64], names, n=1)  # bounded: any URL
        meant = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"unknown option {name!r}{meant} in {_shown(url)!r}; known: {', '.join(names)}"
        )
    return text


def _verify_flags(url: str, name: str, text: str) -> list[ssl.VerifyFlags]:
    """``VERIFY_X509_STRICT,VERIFY_X509_PARTIAL_CHAIN`` as the list of flags redis-py
    takes (a URL's text reached it as a string, which no TLS connection could use)."""
    try:
        from redis.connection import SSLConnection

        taken = name in inspect.signature(SSLConnection).parameters
    except ModuleNotFoundError:  # checked for a backend, which needs it anyway
        taken = True
    if not taken:
        raise ConfigError(f"{name} needs a newer redis-py than this one (in {_shown(url)!r})")
    flags = []
    for word in text.strip("[]").split(","):
        word = word.strip()
        if word not in ssl.VerifyFlags.__members__:
            raise ConfigError(
                f"{name} takes names of ssl.VerifyFlags, comma-separated (VERIFY_X509_STRICT,"
                f" ...), got {_excerpt(word)!r} (in {_shown(url)!r})"
            )
        flags.append(ssl.VerifyFlags[word])
    return flags


def _options(url: str, scheme: str, text: str) -> dict[str, Any]:
    """Every query option, checked where the URL is given: redis-py would take a bad number,
    an unknown name or a misspelt flag here and fail (or misbehave) only at the first call.

    Returns:
        The typed values, by option name.

    Raises:
        ConfigError: naming the option, its value and what is allowed.
    """
    query: dict[str, Any] = {}
    for name, values in parse_qs(text, keep_blank_values=True).items():
        if len(values) > 1:
            raise ConfigError(f"{name} is given twice (in {_shown(url)!r})")
        query[name] = _option(url, name, values[0])
        if name.startswith("ssl_") and not scheme.startswith("rediss"):
            raise ConfigError(f"{name!r} needs rediss:// (TLS), in {_shown(url)!r}")
        if name == "socket_keepalive" and scheme == "unix":
            raise ConfigError(f"{name!r} needs a TCP connection, not unix://, in {_shown(url)!r}")
        if name in _FOR_SENTINELS and not scheme.endswith("+sentinel"):
            raise ConfigError(f"{name!r} needs a redis+sentinel:// URL, in {_shown(url)!r}")
    return query


def _fail_fast(query: dict[str, Any]) -> dict[str, Any]:
    """The socket timeouts the URL left out, at their fail-fast default."""
    return {
        name: DEFAULT_TIMEOUT
        for name in ("socket_connect_timeout", "socket_timeout")
        if name not in query
    }


def _backend_options(url: str, query: dict[str, Any]) -> dict[str, Any]:
    """freqguard's own options, taken out of ``query``: a WAIT for replicas must end before
    the socket gives up, or every write would fail as a timeout."""
    own = {name: query.pop(name) for name in sorted(_BACKEND) if name in query}
    if "wait_timeout" in own and not own.get("wait_replicas"):
        raise ConfigError(f"wait_timeout needs wait_replicas >= 1 (in {_shown(url)!r})")
    socket = query.get("socket_timeout", DEFAULT_TIMEOUT)
    if own.get("wait_replicas") and own.get("wait_timeout", 0.1) >= socket:
        raise ConfigError(
            f"wait_timeout ({own.get('wait_timeout', 0.1)} s) must be shorter than "
            f"socket_timeout ({socket} s), in {_shown(url)!r}"
        )
    return own
