"""Backends from URLs: ``memory://``, ``redis://``, ``rediss://``, ``unix://``,
``redis+cluster://host:port[,host:port...]`` (and ``rediss+cluster://``; each node one the
client may learn the cluster from, as limits writes it), and
``redis+sentinel://host:port[,host:port...]/service_name[/db]`` (and ``rediss+sentinel://``).

Redis clients made here fail fast: ``socket_timeout`` and ``socket_connect_timeout`` default to
0.5 s (override them in the URL's query, e.g. ``?socket_timeout=2``), and a failed command is
not retried: a hit that timed out may or may not have been applied, and sending it again
could count it twice. TLS on one side only cannot be seen in a URL, so the failure names it:
``rediss://`` at a plain server (the handshake times out) and ``redis://`` at a TLS-only one
(the connection is dropped as it is set up) raise a BackendUnavailable that says so.

Every part of a URL is checked where it is given, so a bad one is a
:class:`~freqguard.ConfigError` naming the option, its value and what is allowed, never a
failure at the first call: the port (1-65535), the database (the path ``/3`` or ``?db=3``; only
0 on a cluster), and the query options redis-py reads (timeouts in seconds, > 0 and at most a
day; ``max_connections`` and ``socket_read_size`` >= 1; ``health_check_interval`` >= 0;
``protocol`` 2 or 3; flags as true/false/yes/no/1/0; TLS options with ``rediss`` only).
An option redis-py would not understand is refused by name. Three options are freqguard's
own, for the backend: ``wait_replicas=N`` (0-100) and ``wait_timeout`` (seconds, shorter
than ``socket_timeout``) make each write wait for N replicas, and ``bins=N`` (1 to 2^32)
shares records in bins (see ``RedisBackend``).

A Sentinel URL lists the sentinels (port 26379 when left out) and names the monitored
service; the client asks the sentinels where the service's master is whenever it connects,
so it follows a failover. The user and password in the URL (or ``?password=``) are the Redis
servers'; ``sentinel_username`` / ``sentinel_password`` are the sentinels' own, and
``min_other_sentinels=N`` trusts only a sentinel that sees N others. ``rediss+sentinel://``
speaks TLS to both. The URL is parsed once (:func:`parse_url`, no I/O); the sync and async
makers differ only in the redis-py classes they build from it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn
from urllib.parse import unquote, urlsplit

from freqguard.backends._url_options import (
    _SHARED_WITH_SENTINELS,
    QUERY_OPTIONS,
    SENTINEL_PORT,
    _backend_options,
    _check_port,
    _cut_password,
    _db,
    _excerpt,
    _fail_fast,
    _options,
    _port,
    _shown,
)
from freqguard.backends.memory import MemoryBackend
from freqguard.errors import ConfigError, install, shown

if TYPE_CHECKING:
    from freqguard.backends.redis import AsyncRedisBackend, RedisBackend

__all__ = ["async_backend_from_url", "backend_from_url"]


_SCHEMES = (
    "memory",
    "redis",
    "rediss",
    "unix",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
)
_LISTED = ", ".join(f"{scheme}://" for scheme in _SCHEMES)
_SENTINEL_FORM = "redis+sentinel://host:port[,host:port]/service_name[/db]"
#: a cluster node's name, default port and URL form, for :func:`_address`
_CLUSTER_NODE = ("a cluster node", 6379, "redis+cluster://host:port[,host:port]")


@dataclass(frozen=True)
class Target:
    """What a backend URL asks for, checked (see :func:`parse_url`); no client made yet.

    Attributes:
        kind: ``"memory"``, ``"redis"`` (standalone, also ``unix://``), ``"cluster"`` or
            ``"sentinel"``.
        url: what redis-py's ``from_url`` reads (``"redis"`` and ``"cluster"``).
        options: keyword arguments for the client beyond ``url`` (the fail-fast timeouts; for
            a Sentinel URL every connection option, typed), without ``retry``.
        sentinels: the sentinels' (host, port), in the URL's order.
        service: the name the sentinels monitor the master under.
        sentinel_options: keyword arguments for each sentinel's own connection.
        min_other_sentinels: trust only a sentinel that sees this many others.
        backend: keyword arguments for the backend (``wait_replicas``, ``wait_timeout``,
            ``bins``).
        nodes: a cluster URL's nodes after the first, (host, port): more to learn the
            cluster from, should the first be down.
    """

    kind: str
    url: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    sentinels: tuple[tuple[str, int], ...] = ()
    service: str = ""
    sentinel_options: dict[str, Any] = field(default_factory=dict)
    min_other_sentinels: int = 0
    backend: dict[str, Any] = field(default_factory=dict)
    nodes: tuple[tuple[str, int], ...] = ()


def _scheme(url: object) -> str:
    scheme = url.partition("://")[0].lower() if isinstance(url, str) else ""
    if not isinstance(url, str) or re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme) is None:
        got = type(url).__name__ if not isinstance(url, str) else "text that is no URL"
        bare = isinstance(url, str) and re.fullmatch(r"[A-Za-z0-9.-]+:\d{1,5}(/\d+)?", url)
        hint = f" (a host and port: redis://{url})" if bare else ""  # nothing secret in it
        raise ConfigError(  # a URL mistyped may hold its password anywhere
            f"backend URL must look like scheme://..., one of {_LISTED}; got {got}{hint}"
        )
    if scheme not in _SCHEMES:
        raise ConfigError(
            f"unsupported backend URL scheme {shown(scheme, 40)} in {_shown(url)!r}; "
            f"{_theirs(scheme)}use {_LISTED}"
        )
    return scheme


def _beside(options: Mapping[str, object]) -> None:
    """Options given beside a URL, as limits' ``storage_from_string`` takes them: refused,
    naming where each goes (the key prefix is the guard's, a client option the URL's)."""
    ways = {"key_prefix": "the key prefix is the guard's: Guard(backend, prefix=...)"}
    ways["db"] = "the database is the URL's path: redis://host:6379/1"
    for name in options:
        known = f"an option goes in the URL's query: ?{name}=..." if name in QUERY_OPTIONS else ""
        no = "it is no option of a freqguard URL (see freqguard.backends.urls)"
        where = ways.get("key_prefix" if name == "prefix" else name) or known or no
        raise ConfigError(f"backend_from_url takes the URL alone, got {name}=: {where}")


def _theirs(scheme: str) -> str:
    """What to write here for a URL form of limits' ``storage_from_string``, if one."""
    if scheme not in _LIMITS_FORMS:
        return ""
    bare = scheme.removeprefix("async+")
    ours = bare.replace("valkey", "redis", 1)
    ours = "unix" if ours == "redis+unix" else ours
    aio = " (async_backend_from_url for an AsyncGuard)" if bare != scheme else ""
    if bare.startswith("valkey"):
        return f"a Valkey server speaks Redis's protocol: {ours}:// here{aio}; "
    return f"limits' {scheme}:// is {ours}:// here{aio}; "


#: limits' URL forms (5.8) that a freqguard URL serves.
_LIMITS_FORMS = frozenset(
    f"{aio}{scheme}"
    for aio in ("", "async+")
    for scheme in (
        "redis+unix",
        "valkey",
        "valkeys",
        "valkey+unix",
        "valkey+cluster",
        "valkey+sentinel",
        *("redis", "rediss", "redis+cluster", "redis+sentinel", "memory"),
    )
) - frozenset(_SCHEMES)


def _direct(url: str, scheme: str) -> Target:
    """A ``redis://``, ``rediss://``, ``unix://`` or cluster URL: redis-py reads it (a
    cluster's nodes after the first aside)."""
    url, nodes = _nodes(url, scheme)
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed "[", or a bracketed host no IPv6 (its text unshown:
        raise ConfigError(  # it may be a password's, which then holds a bracket)
            f"cannot read backend URL {_shown(url)!r}: an unclosed '[', or a host in "
            "brackets that is no IPv6 address (a bracket in a password is %5B, %5D)"
        ) from None
    query = _options(url, scheme, parts.query)
    if scheme != "unix":
        _check_port(url, parts.netloc)
        path = parts.path
        if path not in ("", "/") and re.fullmatch(r"/[0-9]+", path) is None:
            raise ConfigError(
                f"the path of a {scheme}:// URL is the database number (/0, /1, ...), "
                f"got {_excerpt(path)!r} (in {_shown(url)!r})"
            )
        _db(url, scheme, query, path[1:] if path not in ("", "/") else None)
    kind = "cluster" if scheme.endswith("+cluster") else "redis"
    own = _backend_options(url, query)  # freqguard's own: never handed to the connections
    # the options go as typed keyword arguments, the URL without its query: redis-py reads
    # a query's values as text in some releases (protocol=3 stayed "3" before 6.0), and a
    # value in the URL would win over the keyword. Not urlunsplit: it writes unix:///path
    # back as unix:/path, which redis-py refuses.
    url = url.partition("?")[0].partition("#")[0]
    if kind == "cluster":  # db 0, checked: redis-py's cluster client refuses the argument
        query.pop("db", None)
    options = {**_fail_fast(query), **query}
    return Target(kind, url.replace("+cluster://", "://", 1), options, nodes=nodes, backend=own)


def _nodes(url: str, scheme: str) -> tuple[str, tuple[tuple[str, int], ...]]:
    """A URL of several nodes (``host:port,host:port``): on a cluster, the URL of the first
    and the others' (host, port); on a single server, refused naming the cluster's form."""
    scheme_part, _, rest = url.partition("://")
    end = min((rest.find(c) for c in "/?#" if c in rest), default=len(rest))
    userinfo, at, hosts = rest[:end].rpartition("@")
    if "," not in hosts or scheme == "unix":
        return url, ()
    if not scheme.endswith("+cluster"):
        raise ConfigError(
            f"a {scheme}:// URL names one server, got several in {_shown(url)!r}: several "
            f"nodes are a cluster's: {scheme}+cluster://host:port,host:port"
        )
    first, *others = hosts.split(",")
    _address(url, first, _CLUSTER_NODE)  # none empty: a hostless first is redis-py's 6379
    nodes = tuple(_address(url, node, _CLUSTER_NODE) for node in others)
    return f"{scheme_part}://{userinfo}{at}{first}{rest[end:]}", nodes


def _address(
    url: str, text: str, kind: tuple[str, int, str] = ("a sentinel", SENTINEL_PORT, "")
) -> tuple[str, int]:
    """One sentinel's (or ``kind``'s: its name, default port and URL form) ``host[:port]``
    (``[v6]:port`` for IPv6)."""
    found = re.fullmatch(
        r"\[([0-9A-Fa-f:.]+(?:%[0-9A-Za-z._~%-]+)?)\](?::(.*))?|([^:\[\]]+)(?::(.*))?", text
    )
    what, default, form = kind
    if found is None:
        raise ConfigError(
            f"{what}'s address must be host:port or [ipv6]:port, got {_excerpt(text)!r} "
            f"(in {_shown(url)!r}; the form is {form or _SENTINEL_FORM})"
        )
    v6, v6_port, host, port = found.groups()
    port = v6_port if v6 is not None else port
    host = unquote(v6) if v6 is not None else host  # a zone: %25eth0 is %eth0
    return host, (default if port is None else _port(url, port))


def _sentinel(url: str, scheme: str) -> Target:
    """A ``redis+sentinel://`` URL, parsed here: redis-py has no URL form for it."""
    rest = url.partition("://")[2].partition("#")[0]
    rest, _, query_text = rest.partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, _, hosts = netloc.rpartition("@")
    sentinels = tuple(_address(url, host) for host in hosts.split(","))
    service, _, db = path.partition("/")
    if not service:
        raise ConfigError(
            f"no service name in {_shown(url)!r}: name the master the sentinels monitor, "
            f"{_SENTINEL_FORM}"
        )
    if re.fullmatch(r"[^\s/]{1,256}", unquote(service)) is None:
        raise ConfigError(
            f"a service name is 1-256 characters without spaces, got {_excerpt(service)!r} "
            f"(in {_shown(url)!r})"
        )
    if db and re.fullmatch(r"[0-9]+", db) is None:
        raise ConfigError(
            f"after the service name comes the database number (/0, /1, ...), "
            f"got {_excerpt('/' + db)!r} (in {_shown(url)!r})"
        )
    query = _options(url, scheme, query_text)
    _db(url, scheme, query, db or None)
    return _sentinel_target(url, scheme, sentinels, unquote(service), userinfo, query)


def _sentinel_target(
    url: str,
    scheme: str,
    sentinels: tuple[tuple[str, int], ...],
    service: str,
    userinfo: str,
    query: dict[str, Any],
) -> Target:
    """Share a Sentinel URL's options out: the servers', the sentinels', the manager's."""
    if userinfo:
        user, has_password, password = userinfo.partition(":")
        for name, value in (("username", user), ("password", password if has_password else "")):
            if value and name in query:
                raise ConfigError(f"{name} is given twice (in {_shown(url)!r})")
            if value:
                query[name] = unquote(value)
    options = {**_fail_fast(query), **query}
    own = {name: options[name] for name in sorted(_SHARED_WITH_SENTINELS) if name in options}
    for name in ("username", "password"):
        if f"sentinel_{name}" in options:
            own[name] = options.pop(f"sentinel_{name}")
    if scheme.startswith("rediss"):
        options["ssl"] = True
        own.update({name: v for name, v in options.items() if name.startswith("ssl")})
    minimum = options.pop("min_other_sentinels", 0)
    backend = _backend_options(url, options)
    return Target("sentinel", "", options, sentinels, service, own, minimum, backend)


def parse_url(url: str) -> Target:
    """Check a backend URL and say what it asks for, without I/O and without redis-py.

    Raises:
        ConfigError: an unsupported scheme or a bad part (see the module docstring).
    """
    scheme = _scheme(url)
    _cut_password(url)
    if scheme == "memory":
        if url.partition("://")[2] not in ("", "/"):  # nothing would read it
            raise ConfigError(
                f"memory:// takes no host, path or options (it keeps counts in this process), "
                f"got {_shown(url)!r}: write memory://"
            )
        return Target("memory")
    if scheme.endswith("+sentinel"):
        return _sentinel(url, scheme)
    return _direct(url, scheme)


class _Classes(NamedTuple):
    """The redis-py classes one family of backends is built from (sync or asyncio)."""

    redis: Any
    cluster: Any
    sentinel: Any
    retry: Any
    node: Any  # a cluster's ClusterNode


def _client(target: Target, classes: _Classes) -> Any:
    """The redis-py client a checked URL asks for, from ``classes``: no retries (a hit sent
    again could count twice), and the sentinels' own connections fail fast as well."""
    from redis.backoff import NoBackoff

    options = {**target.options, "retry": classes.retry(NoBackoff(), 0)}
    if target.kind == "cluster":
        if target.nodes:  # the URL's first node, and these
            options["startup_nodes"] = [classes.node(*node) for node in target.nodes]
        return classes.cluster.from_url(target.url, **options)
    if target.kind == "sentinel":
        own = {**target.sentinel_options, "retry": classes.retry(NoBackoff(), 0)}
        manager = classes.sentinel(
            list(target.sentinels), target.min_other_sentinels, sentinel_kwargs=own
        )
        return manager.master_for(target.service, **options)
    return classes.redis.from_url(target.url, **options)


def _redis_extra(url: str) -> None:
    try:
        import redis  # noqa: F401
    except ImportError:
        raise ConfigError(f"{_shown(url)!r} needs the redis extra: {install('redis')}") from None


def backend_from_url(url: str, **theirs: NoReturn) -> MemoryBackend | RedisBackend:
    """A sync-capable backend for :class:`~freqguard.Guard`.

    Raises:
        ConfigError: an unsupported scheme, a bad option (see the module docstring), a
            Redis URL without the redis extra, or an option given beside the URL (limits'
            ``storage_from_string(uri, **options)``), naming where it goes.
        BackendUnavailable: a cluster URL whose nodes cannot be reached, or whose slots are
            not all served (redis-py's sync cluster client learns its slots as it is made).
    """
    _beside(theirs)
    target = parse_url(url)
    if target.kind == "memory":
        return MemoryBackend()
    _redis_extra(url)
    from redis import Redis
    from redis.cluster import ClusterNode, RedisCluster
    from redis.retry import Retry
    from redis.sentinel import Sentinel

    from freqguard.backends.redis import RedisBackend, _boundary

    with _boundary(None):  # redis-py's sync cluster client connects as it is made
        client = _client(target, _Classes(Redis, RedisCluster, Sentinel, Retry, ClusterNode))
        return RedisBackend(client, **target.backend)


def async_backend_from_url(url: str, **theirs: NoReturn) -> MemoryBackend | AsyncRedisBackend:
    """An asyncio backend for :class:`~freqguard.AsyncGuard` (see :func:`backend_from_url`)."""
    _beside(theirs)
    target = parse_url(url)
    if target.kind == "memory":
        return MemoryBackend()
    _redis_extra(url)
    from redis.asyncio import Redis
    from redis.asyncio.cluster import ClusterNode, RedisCluster
    from redis.asyncio.retry import Retry
    from redis.asyncio.sentinel import Sentinel

    from freqguard.backends.redis import AsyncRedisBackend

    client = _client(target, _Classes(Redis, RedisCluster, Sentinel, Retry, ClusterNode))
    return AsyncRedisBackend(client, **target.backend)
