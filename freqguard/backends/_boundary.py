"""The error boundary: where every redis-py error becomes a freqguard error.

::

    redis-py (what it raises)                   freqguard (raised ``from`` it)
    MovedError, to a standalone client    ──►   ConfigError: a cluster node behind a
                                                redis:// URL (use redis+cluster://)
    "DB index is out of range",           ──►   ConfigError: the store says the URL or
    AuthenticationError (NOAUTH,                its user is wrong, or a record's key holds
    WRONGPASS), NoPermissionError (NOPERM),     another program's value, which no retry,
    WRONGTYPE                                   no fallback and no on_error can mend
    the cluster client's "Cluster mode is ──►   ConfigError: a standalone server behind
    not enabled on this node"                   a redis+cluster:// URL (use redis://)
    any other RedisError, and the cluster ──►   BackendUnavailable
    client's RedisClusterException              (with the likely cause when a TLS client
                                                met a plain server, or the reverse, when
                                                nothing listens at the address, or when
                                                its host name does not resolve)

:func:`translate` is the mapping, and the only one. Each public operation of a Redis backend
catches :data:`ERRORS` around its whole body and raises ``translate(exc, client) from exc``:
a ``try`` costs nothing on the way through, where a context manager costs a noticeable part
of a hit. :func:`boundary` is the same as a context manager, for the places off the hot path
(a cluster client that connects as it is made, in ``backend_from_url``).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from redis import exceptions as rex
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from freqguard.backends._redispy import address, database, tls
from freqguard.errors import BackendUnavailable, ConfigError, FreqGuardError

__all__ = [
    "ERRORS",
    "Unreplicated",
    "boundary",
    "cluster_node",
    "misconfigured",
    "mismatch",
    "translate",
    "unconnected",
]

#: What redis-py raises: its cluster client's own errors (unreachable at start, a slot no
#: node serves) derive from Exception, not RedisError.
ERRORS = (rex.RedisError, rex.RedisClusterException)
_CLUSTERS = (RedisCluster, AsyncRedisCluster)

#: A TLS client at a plain server: the server reads the ClientHello as the start of a
#: command and waits for its end, so the handshake times out while connecting (in the ssl
#: module's ``do_handshake`` for threads, in asyncio's ``_create_connection_transport`` once
#: the TCP connection is made, for tasks); or it answers in plain text, which is no TLS
#: record (these reasons, by OpenSSL version).
_HANDSHAKE_FRAMES = frozenset({"do_handshake", "_create_connection_transport"})
_PLAIN_ANSWERS = frozenset(
    {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST"}
)
TLS_AT_PLAIN = (
    "rediss:// speaks TLS: is the server listening with TLS? a plain server needs redis://"
)
#: A plain client at a TLS-only server: the TCP connection is made, and the server drops it
#: at the first bytes, which are no TLS; redis-py is then setting the connection up
#: (``on_connect``...), so it is not a server that went away between two commands.
PLAIN_AT_TLS = (
    "the server dropped the connection as it was being set up: does it listen with TLS only? "
    "that needs rediss://"
)


#: Nothing accepts connections at the address (refused), or its host name has no address.
NOTHING_LISTENS = (
    "nothing accepts connections there: is a Redis server running there, and is the URL's "
    "host:port its own?"
)
UNRESOLVED = "the URL's host name does not resolve: check its spelling, or give an IP address"


#: A server that refused the client as it connected: it asks for a password (and a user)
#: that the URL does not give, or gives wrong.
NO_ACCESS = (
    "the store refused the connection's credentials: give the password (and user) it asks "
    "for in the URL, as redis://:PASSWORD@host or redis://USER:PASSWORD@host (or ?password=)"
)


class Unreplicated(rex.RedisError):
    """Fewer replicas than ``wait_replicas`` acknowledged an admission within
    ``wait_timeout``: the master applied it (the call was sent, and ``reply`` is its
    answer), but may lose it if it fails now. The node does not give what was asked of it,
    and each such write costs a ``wait_timeout``: the circuit breaker counts it."""

    def __init__(self, message: str, reply: bytes = b"") -> None:
        super().__init__(message)
        self.reply = reply


def translate(exc: Exception, client: object, key: bytes | None = None) -> FreqGuardError:
    """The freqguard error for a redis-py error ``client`` raised (see the module's table);
    ``key``: the record the failed call touched, where known, for the message to name."""
    if _moved(exc) and not isinstance(client, _CLUSTERS):
        return cluster_node(client)
    wrong = misconfigured(exc, client, key)
    if wrong is not None:
        return wrong
    hint = mismatch(exc, client)
    return BackendUnavailable(
        f"redis failed: {type(exc).__name__}: {exc}" + (f" ({hint})" if hint else ""),
        # an error reply (out of memory, ...): the server is up, and applied nothing
        answered=isinstance(exc, rex.ResponseError),
        sent=not (isinstance(exc, rex.ResponseError) or unconnected(exc)),
    )


def misconfigured(exc: Exception, client: object, key: bytes | None = None) -> ConfigError | None:
    """The error for a store's answer that says the configuration is wrong, else None: a
    database the server does not have, credentials it refuses, an ACL that refuses the user
    what freqguard sends, a record's key (``key``, where known) that another program wrote
    a value of another type to (WRONGTYPE). Each is permanent until the URL, the server's
    configuration or that key changes, so it is no outage for ``on_error`` to ride out:
    failing open on it would cap nothing, for good, without a word. Matched on redis-py's
    classes and the server's own words only, so an outage (refused, timed out, LOADING,
    OOM, READONLY...) never is one."""
    where = address(client)
    if isinstance(exc, rex.ResponseError) and str(exc).startswith("WRONGTYPE"):
        what = "a key" if key is None else f"the key {key.decode(errors='replace')!r}"
        return ConfigError(
            f"{where}: {what} holds a value of a type freqguard never writes there ({exc}): "
            "another program writes under the guard's key prefix; give the guard a prefix of "
            "its own (Guard(prefix=...)), or delete that key"
        )
    if isinstance(exc, rex.ResponseError) and "DB index is out of range" in str(exc):
        db = database(client)
        return ConfigError(
            f"{where}: the server has no database {db}, which the URL's /{db} selects ({exc}): "
            "its databases are numbered from 0 up to its `databases` setting (16 by "
            f"default); write /0 in the URL (redis://{where}/0), or raise `databases` in the "
            "server's configuration"
        )
    if isinstance(exc, rex.AuthenticationError):  # as the connection was set up
        return ConfigError(f"{where}: {NO_ACCESS} ({type(exc).__name__}: {exc})")
    if _no_cluster(exc):  # a redis+cluster:// URL at a standalone server
        return ConfigError(
            "the server the cluster URL names is not a Redis Cluster node (it runs without "
            "cluster mode): use redis://host:port (rediss:// for TLS) for a standalone server, "
            f"redis+sentinel:// for one that Sentinels watch ({type(exc).__name__}: {exc})"
        )
    if isinstance(exc, rex.NoPermissionError):
        return ConfigError(
            f"{where}: the store's ACL refuses the URL's user a command or key freqguard "
            f"needs ({exc}): grant that user freqguard's commands (FCALL or EVALSHA, and "
            "FUNCTION or SCRIPT to load them) on its keys, or give the URL a user that has them"
        )
    return None


def _no_cluster(exc: BaseException) -> bool:
    """A cluster client's word that its node runs without cluster mode: its own error, or
    the server's reply to CLUSTER SLOTS, through the client's wrapping."""
    return any(
        (isinstance(e, rex.RedisClusterException) and "Cluster mode is not enabled" in str(e))
        or (isinstance(e, rex.ResponseError) and "cluster support disabled" in str(e))
        for e in _chain(exc)
    )


def _moved(exc: Exception) -> bool:
    """A MOVED reply: a MovedError, or (redis-py before 6.0, on a standalone client) the
    plain error reply that says MOVED."""
    return isinstance(exc, rex.MovedError) or (
        isinstance(exc, rex.ResponseError) and str(exc).startswith("MOVED ")
    )


def unconnected(exc: Exception) -> bool:
    """Whether the call failed before it could be sent: the connection was never made
    (refused, unresolved, timed out while connecting; a cluster client that reached none
    of its nodes to learn the slots). Anything else may have been sent."""
    if isinstance(exc, rex.RedisClusterException) and "cannot be connected" in str(exc):
        # learning the slots failed; unsent unless it was redis-py's own retry of a call
        # whose connection failed after it was made (that call may have been applied)
        return all(
            unconnected(error)
            for error in list(_chain(exc))[1:]
            if isinstance(error, rex.ConnectionError | rex.TimeoutError)
        )
    return isinstance(exc, rex.ConnectionError | rex.TimeoutError) and (
        "connecting to" in str(exc) or "Timeout connecting" in str(exc)
    )


def mismatch(exc: BaseException, client: object) -> str:
    """The likely cause of a failure to connect, when it looks like TLS on one side only
    (:data:`TLS_AT_PLAIN`, :data:`PLAIN_AT_TLS`), no server at the address
    (:data:`NOTHING_LISTENS`) or a host name without one (:data:`UNRESOLVED`); else ``""``.
    Read from the error alone, no I/O: a plain client's hint needs ``client`` to say it is
    one."""
    chain = list(_chain(exc))
    for error in chain:
        if isinstance(error, ssl.SSLError) and error.reason in _PLAIN_ANSWERS:
            return TLS_AT_PLAIN
        if (
            isinstance(error, TimeoutError | asyncio.CancelledError)
            and _frames(error.__traceback__) & _HANDSHAKE_FRAMES
        ):
            return TLS_AT_PLAIN
    dropped = any(
        isinstance(e, ConnectionResetError | BrokenPipeError)
        or (isinstance(e, rex.ConnectionError) and "closed by server" in str(e))
        for e in chain
    )
    frames = set().union(*(_frames(e.__traceback__) for e in chain))
    setting_up = any(name.startswith("on_connect") for name in frames)
    if dropped and setting_up and tls(client) is False:
        return PLAIN_AT_TLS
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return NOTHING_LISTENS
    if any(isinstance(e, socket.gaierror) for e in chain):
        return UNRESOLVED
    return ""


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from or during, to the first (bounded: a cycle)."""
    seen: BaseException | None = exc
    for _ in range(16):
        if seen is None:
            return
        yield seen
        seen = seen.__cause__ or seen.__context__


def _frames(tb: TracebackType | None) -> set[str]:
    """The names of the functions a traceback went through."""
    names = set()
    while tb is not None:
        names.add(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return names


@contextmanager
def boundary(client: object) -> Iterator[None]:
    """:func:`translate` as a context manager, for code off the hot path."""
    try:
        yield
    except ERRORS as exc:
        raise translate(exc, client) from exc


def cluster_node(client: object) -> ConfigError:
    """The error for a standalone client (a ``redis://`` URL) aimed at a cluster node: it
    would decide the keys of that node's slots and get MOVED for every other key."""
    where = address(client)
    return ConfigError(
        f"{where} is a Redis Cluster node: use redis+cluster://{where} (or a RedisCluster "
        "client), which sends each key to the node that owns its slot"
    )
