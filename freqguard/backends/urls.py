"""Backends from URLs: ``memory://``, ``redis://``, ``rediss://``, ``unix://``,
``redis+cluster://host:port`` (and ``rediss+cluster://``).

Redis clients made here fail fast: ``socket_timeout`` and ``socket_connect_timeout`` default to
0.5 s (override them in the URL's query, e.g. ``?socket_timeout=2``), and a failed command is
not retried: a hit that timed out may or may not have been applied, and sending it again
could count it twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from freqguard.backends.memory import MemoryBackend
from freqguard.errors import ConfigError

if TYPE_CHECKING:
    from freqguard.backends.redis import AsyncRedisBackend, RedisBackend

__all__ = ["async_backend_from_url", "backend_from_url"]

DEFAULT_TIMEOUT = 0.5
_SCHEMES = "memory://, redis://, rediss://, unix://, redis+cluster://, rediss+cluster://"


def _scheme(url: object) -> str:
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(
            f"backend URL must look like scheme://..., one of {_SCHEMES}; got {url!r}"
        )
    scheme = urlsplit(url).scheme.lower()
    if scheme not in {"memory", "redis", "rediss", "unix", "redis+cluster", "rediss+cluster"}:
        raise ConfigError(f"unsupported backend URL scheme {scheme!r} in {url!r}; use {_SCHEMES}")
    return scheme


def _client_options(url: str) -> tuple[str, dict[str, Any]]:
    """The URL redis-py should see, and the fail-fast defaults it does not already set."""
    try:
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError:
        raise ConfigError(
            f"{url!r} needs the redis extra: pip install 'freqguard[redis]'"
        ) from None
    query = parse_qs(urlsplit(url).query)
    options: dict[str, Any] = {"retry": Retry(NoBackoff(), 0)}
    for name in ("socket_timeout", "socket_connect_timeout"):
        if name not in query:
            options[name] = DEFAULT_TIMEOUT
    return url.replace("+cluster://", "://", 1), options


def backend_from_url(url: str) -> MemoryBackend | RedisBackend:
    """A sync-capable backend for :class:`~freqguard.Guard`.

    Raises:
        ConfigError: for an unsupported scheme, or a Redis URL without the redis extra.
    """
    scheme = _scheme(url)
    if scheme == "memory":
        return MemoryBackend()
    target, options = _client_options(url)
    from redis import Redis
    from redis.cluster import RedisCluster

    from freqguard.backends.redis import RedisBackend

    if scheme.endswith("+cluster"):
        return RedisBackend(RedisCluster.from_url(target, **options))
    return RedisBackend(Redis.from_url(target, **options))


def async_backend_from_url(url: str) -> MemoryBackend | AsyncRedisBackend:
    """An asyncio backend for :class:`~freqguard.AsyncGuard` (see :func:`backend_from_url`)."""
    scheme = _scheme(url)
    if scheme == "memory":
        return MemoryBackend()
    target, options = _client_options(url)
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    from freqguard.backends.redis import AsyncRedisBackend

    options["retry"] = Retry(NoBackoff(), 0)
    if scheme.endswith("+cluster"):
        return AsyncRedisBackend(RedisCluster.from_url(target, **options))
    return AsyncRedisBackend(Redis.from_url(target, **options))
