"""Backends from URLs: ``memory://``, ``redis://``, ``rediss://``, ``unix://``,
``redis+cluster://host:port`` (and ``rediss+cluster://``).

Redis clients made here fail fast: ``socket_timeout`` and ``socket_connect_timeout`` default to
0.5 s (override them in the URL's query, e.g. ``?socket_timeout=2``), and a failed command is
not retried: a hit that timed out may or may not have been applied, and sending it again
could count it twice.

Every part of a URL is checked where it is given, so a bad one is a
:class:`~freqguard.ConfigError` naming the option, its value and what is allowed, never a
failure at the first call: the port (1-65535), the database (the path ``/3`` or ``?db=3``; only
0 on a cluster), and the query options redis-py reads (timeouts in seconds, > 0 and at most a
day; ``max_connections`` and ``socket_read_size`` >= 1; ``health_check_interval`` >= 0;
``protocol`` 2 or 3; flags as true/false/yes/no/1/0; TLS options with ``rediss://`` only).
An option redis-py would not understand is refused by name.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from freqguard.backends.memory import MemoryBackend
from freqguard.errors import ConfigError

if TYPE_CHECKING:
    from freqguard.backends.redis import AsyncRedisBackend, RedisBackend

__all__ = ["async_backend_from_url", "backend_from_url"]

DEFAULT_TIMEOUT = 0.5
MAX_SECONDS = 86400  # a timeout longer than a day is a typo, and past ~1e9 s sockets refuse it

# The query options a Redis URL may carry: redis-py's connection options that a string can
# express. redis-py itself would pass any other name to its connection, to fail at the first
# call; and it reads any flag text but five as true.
_SECONDS = frozenset({"socket_timeout", "socket_connect_timeout"})
_INTEGERS = {  # (smallest, largest)
    "db": (0, 2**31 - 1),
    "max_connections": (1, 2**31 - 1),
    "socket_read_size": (1, 2**31 - 1),
    "health_check_interval": (0, MAX_SECONDS),  # 0: no health checks
    "protocol": (2, 3),
}
_FLAGS = frozenset({"socket_keepalive", "retry_on_timeout", "ssl_check_hostname"})
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
        "ssl_cert_reqs",
        "ssl_password",
        "ssl_ciphers",
        "ssl_include_verify_flags",
        "ssl_exclude_verify_flags",
    }
)
_SCHEMES = "memory://, redis://, rediss://, unix://, redis+cluster://, rediss+cluster://"


def _scheme(url: object) -> str:
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(
            f"backend URL must look like scheme://..., one of {_SCHEMES}; got {url!r}"
        )
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:  # an unclosed "[" (IPv6)
        raise ConfigError(f"cannot read backend URL {_shown(url)!r}: {exc}") from None
    if scheme not in {"memory", "redis", "rediss", "unix", "redis+cluster", "rediss+cluster"}:
        raise ConfigError(
            f"unsupported backend URL scheme {scheme!r} in {_shown(url)!r}; use {_SCHEMES}"
        )
    return scheme


def _shown(url: str) -> str:
    """The URL as messages show it: its password masked (``user:***@``, ``password=***``)."""
    url = re.sub(r"^([^:/]*://[^/@:]*):[^/@]*@", r"\1:***@", url)
    return re.sub(r"([?&](?:ssl_)?password=)[^&]*", r"\1***", url)


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


def _seconds(url: str, name: str, text: str) -> None:
    number = re.fullmatch(r"[0-9]{1,6}(\.[0-9]{0,9})?|\.[0-9]{1,9}", text)
    if number is None or not 0 < float(text) <= MAX_SECONDS:
        raise ConfigError(
            f"{name} must be a number of seconds > 0 and <= {MAX_SECONDS}, "
            f"got {_excerpt(text)!r} (in {_shown(url)!r})"
        )


def _check_port(url: str, netloc: str) -> None:
    host = netloc.rpartition("@")[2]
    port = host.rpartition("]")[2] if host.startswith("[") else host
    if ":" in port:
        _integer(url, "port", port.partition(":")[2], 1, 65535)


def _check_db(url: str, scheme: str, query: dict[str, list[str]], path: str) -> None:
    """The database, from the path (``/3``) or the query (``?db=3``): one of them, an integer,
    and 0 on a cluster (it has no other)."""
    text = query.get("db", [None])[0]
    if scheme != "unix" and path not in ("", "/"):
        if text is not None:
            raise ConfigError(f"db is given twice, as the path and ?db= (in {_shown(url)!r})")
        if re.fullmatch(r"/[0-9]+", path) is None:
            raise ConfigError(
                f"the path of a {scheme}:// URL is the database number (/0, /1, ...), "
                f"got {_excerpt(path)!r} (in {_shown(url)!r})"
            )
        text = path[1:]
    if text is None:
        return
    db = _integer(url, "db", text, 0, 2**31 - 1)
    if db != 0 and scheme.endswith("+cluster"):
        raise ConfigError(f"a Redis Cluster has only db 0, got {db} (in {_shown(url)!r})")


def _check_options(url: str, scheme: str) -> dict[str, list[str]]:
    """Check every query option where the URL is given: redis-py would take a bad number,
    an unknown name or a misspelt flag here and fail (or misbehave) only at the first call.

    Returns:
        The query, by option name.

    Raises:
        ConfigError: naming the option, its value and what is allowed.
    """
    parts = urlsplit(url)
    query = parse_qs(parts.query, keep_blank_values=True)
    for name, values in query.items():
        if len(values) > 1:
            raise ConfigError(f"{name} is given twice (in {_shown(url)!r})")
        text = values[0]
        if name in _SECONDS:
            _seconds(url, name, text)
        elif name in _INTEGERS:
            _integer(url, name, text, *_INTEGERS[name])
        elif name in _FLAGS:
            if text.lower() not in _FLAG_VALUES:
                raise ConfigError(
                    f"{name} must be one of {', '.join(_FLAG_VALUES)}, "
                    f"got {_excerpt(text)!r} (in {_shown(url)!r})"
                )
        elif name not in _TEXTS:
            known = ", ".join(sorted(_SECONDS | _INTEGERS.keys() | _FLAGS | _TEXTS))
            raise ConfigError(f"unknown option {name!r} in {_shown(url)!r}; known: {known}")
        if name.startswith("ssl_") and not scheme.startswith("rediss"):
            raise ConfigError(f"{name!r} needs rediss:// (TLS), in {_shown(url)!r}")
        if name == "socket_keepalive" and scheme == "unix":
            raise ConfigError(f"{name!r} needs a TCP connection, not unix://, in {_shown(url)!r}")
    if scheme != "unix":
        _check_port(url, parts.netloc)
    _check_db(url, scheme, query, parts.path)
    return query


def _client_options(url: str, scheme: str) -> tuple[str, dict[str, Any]]:
    """The URL redis-py should see, and the fail-fast defaults it does not already set.

    Raises:
        ConfigError: a bad option (see :func:`_check_options`), or no redis extra.
    """
    try:
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError:
        raise ConfigError(
            f"{_shown(url)!r} needs the redis extra: pip install 'freqguard[redis]'"
        ) from None
    query = _check_options(url, scheme)
    options: dict[str, Any] = {"retry": Retry(NoBackoff(), 0)}
    for name in ("socket_timeout", "socket_connect_timeout"):
        if name not in query:
            options[name] = DEFAULT_TIMEOUT
    return url.replace("+cluster://", "://", 1), options


def backend_from_url(url: str) -> MemoryBackend | RedisBackend:
    """A sync-capable backend for :class:`~freqguard.Guard`.

    Raises:
        ConfigError: an unsupported scheme, a bad option (see the module docstring), or a
            Redis URL without the redis extra.
        BackendUnavailable: a cluster URL whose nodes cannot be reached, or whose slots are
            not all served (redis-py's cluster client learns its slots as it is made).
    """
    scheme = _scheme(url)
    if scheme == "memory":
        return MemoryBackend()
    target, options = _client_options(url, scheme)
    from redis import Redis
    from redis.cluster import RedisCluster

    from freqguard.backends.redis import RedisBackend, _boundary

    if scheme.endswith("+cluster"):
        with _boundary(None):  # redis-py's sync cluster client connects as it is made
            return RedisBackend(RedisCluster.from_url(target, **options))
    return RedisBackend(Redis.from_url(target, **options))


def async_backend_from_url(url: str) -> MemoryBackend | AsyncRedisBackend:
    """An asyncio backend for :class:`~freqguard.AsyncGuard` (see :func:`backend_from_url`)."""
    scheme = _scheme(url)
    if scheme == "memory":
        return MemoryBackend()
    target, options = _client_options(url, scheme)
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    from freqguard.backends.redis import AsyncRedisBackend

    options["retry"] = Retry(NoBackoff(), 0)
    if scheme.endswith("+cluster"):
        return AsyncRedisBackend(RedisCluster.from_url(target, **options))
    return AsyncRedisBackend(Redis.from_url(target, **options))
