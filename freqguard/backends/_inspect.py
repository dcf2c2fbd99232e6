"""What a Redis backend asks the server once, before its first call.

A standalone client aimed at a cluster node would decide the keys of that node's slots and
get MOVED for every other key: it is refused at once with a
:class:`~freqguard.ConfigError` that names the fix. A ``maxmemory-policy`` that can evict is
logged as a warning on the ``freqguard`` logger: every record has a TTL, so ``volatile-*``
policies evict them as ``allkeys-*`` do, and an evicted record forgets what a recipient was
sent. With bins (``RedisBackend(bins=N)``), listpack limits below what keeps a bin
compact are warned of too: every bin would become a hashtable, exact but several times
larger. With ``wait_replicas``, a store that refuses WAIT to the client (an ACL without
``+wait``, a proxy that does not know it) is refused at once with a
:class:`~freqguard.ConfigError` naming the fix (:func:`wait_refused`): found after each
write, it made every admission a failure for ``on_error`` to answer, for as long as the
ACL stood. The questions are written once, as an I/O-free step generator (:func:`inspection`)
that the sync and async backends drive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Mapping
from functools import partial
from typing import Any

from redis import exceptions as rex

from freqguard.backends._boundary import ERRORS, cluster_node
from freqguard.backends._redispy import address
from freqguard.errors import ConfigError

__all__ = [
    "BIN_LISTPACK",
    "functions_served",
    "inspection",
    "wait_refused",
    "warn_evicting",
    "warn_listpack",
]

_POLICY = "maxmemory-policy"
#: The listpack limits that keep a bin of 32-64 records compact (docs/redis.md).
BIN_LISTPACK = {"hash-max-listpack-value": 4096, "hash-max-listpack-entries": 256}
_log = logging.getLogger("freqguard")


def warn_evicting(answer: Mapping[Any, Any], client: object) -> None:
    """Log a warning if CONFIG GET maxmemory-policy's answer (one server's, or one per
    cluster node) names a policy that evicts."""
    per_node = {address(client): answer} if _POLICY in answer else answer
    evicting = []
    for node, reply in per_node.items():
        policy = reply.get(_POLICY) if isinstance(reply, Mapping) else None
        if isinstance(policy, bytes):
            policy = policy.decode()
        if policy is not None and policy != "noeviction":
            evicting.append(f"{node} has maxmemory-policy {policy}")
    if evicting:
        _log.warning(
            "%s: when full, Redis evicts keys, and every freqguard record is a key with a "
            "TTL (volatile-* policies evict those too); an evicted record forgets what was "
            "sent and admits what the caps should deny. Set maxmemory-policy noeviction "
            "(see 'When memory runs out' in freqguard's docs/redis.md).",
            "; ".join(evicting),
        )


def _per_node(answer: Mapping[Any, Any], client: object, name: str) -> Mapping[Any, Any]:
    """CONFIG GET's answer by node: one server's is keyed by its parameters."""
    return {address(client): answer} if name in answer else answer


def warn_listpack(answer: Mapping[Any, Any], client: object) -> None:
    """Log a warning if CONFIG GET's answer (one server's, or one per cluster node) names
    listpack limits below :data:`BIN_LISTPACK`."""
    low = []
    for node, reply in _per_node(answer, client, "hash-max-listpack-value").items():
        for name, wanted in BIN_LISTPACK.items():
            value = reply.get(name) if isinstance(reply, Mapping) else None
            if isinstance(value, bytes):
                value = value.decode()
            if isinstance(value, str) and value.isdigit() and int(value) < wanted:
                low.append(f"{node} has {name} {value}")
    if low:
        _log.warning(
            "%s: with bins, a bin past these limits becomes a hashtable, exact but "
            "several times larger. Set hash-max-listpack-value 4096 and "
            "hash-max-listpack-entries 256 (see 'Records in bins' in freqguard's "
            "docs/redis.md).",
            "; ".join(low),
        )


def inspection(
    client: Any,
    cluster: bool,
    bins: bool = False,
    functions: Callable[[bool], None] | None = None,
    wait: bool = False,
) -> Generator[Callable[[], Any], Any, None]:
    """What a backend checks once, before its first call, written once for sync and async:
    it yields each request (a callable whose reply, awaited for async clients, is sent back;
    a redis-py error is thrown in instead). A cluster node behind a standalone client is a
    :func:`~freqguard.backends._boundary.cluster_node` error; a ``maxmemory-policy`` that can
    evict is warned of (:func:`warn_evicting`), and with ``bins``, low listpack limits
    (:func:`warn_listpack`). With ``functions``, whether the server runs Redis Functions is
    told to it (:func:`functions_served`). With ``wait`` (``wait_replicas``), a store that
    refuses WAIT is a :func:`wait_refused` error."""
    if functions is not None:
        yield from functions_served(client, functions, cluster)
    if not cluster:
        try:
            info = yield lambda: client.info("cluster")
            enabled = info.get("cluster_enabled")
        except rex.ResponseError:  # INFO refused (ACL, renamed): a MOVED reply tells
            enabled = None
        if enabled:
            raise cluster_node(client)
    if wait:
        yield from _waits(client, cluster)
    try:
        if cluster:
            policies = yield lambda: client.config_get(_POLICY, target_nodes=client.PRIMARIES)
        else:
            policies = yield lambda: client.config_get(_POLICY)
    except ERRORS as exc:  # CONFIG refused (ACL, renamed, managed): nothing to say;
        if not (isinstance(exc, rex.ResponseError) or cluster):
            raise  # a standalone server that cannot answer cannot decide either
        policies = {}  # one primary down must not fail calls to the others
    warn_evicting(policies, client)
    if bins and policies:  # CONFIG answered: ask for the listpack limits too
        if cluster:
            limits = yield lambda: client.config_get(
                "hash-max-listpack-*", target_nodes=client.PRIMARIES
            )
        else:
            limits = yield lambda: client.config_get("hash-max-listpack-*")
        warn_listpack(limits, client)


def _waits(client: Any, cluster: bool) -> Generator[Callable[[], Any], Any, None]:
    """Whether the store runs WAIT for this client: ``WAIT 0 1`` answers at once (no
    replica asked for). A refusal is raised (:func:`wait_refused`); on a cluster every
    primary is asked (each node has its own ACL: a rollout that missed one), a node that
    cannot answer now passed over, and the refusal names the node."""
    if not cluster:
        try:
            yield lambda: client.execute_command("WAIT", 0, 1)
        except ERRORS as exc:
            _wait_refused(exc, address(client))
            raise
        return
    try:  # the default node first: an asyncio client learns the cluster's nodes so
        yield lambda: client.execute_command("WAIT", 0, 1, target_nodes=client.DEFAULT_NODE)
    except ERRORS as exc:  # a refusal names the node; a cluster not reached has none yet
        _wait_refused(exc, getattr(client.get_default_node(), "name", "the cluster"))
    for node in list(client.get_primaries()):
        try:
            yield partial(client.execute_command, "WAIT", 0, 1, target_nodes=node)
        except ERRORS as exc:
            _wait_refused(exc, node.name)


def _wait_refused(error: Exception, where: str) -> None:
    """Raise :func:`wait_refused`'s error for ``error``, if it is a refusal."""
    refused = wait_refused(error, where)
    if refused is not None:
        raise refused from error


def wait_refused(error: Exception, where: str) -> ConfigError | None:
    """The error for a store's refusal of ``WAIT`` (an ACL that does not allow it, a store
    that does not know it), which ``wait_replicas`` needs for every admission: lasting
    until the ACL or the setting changes, so no outage for ``on_error`` to ride out; None
    for any other error."""
    if isinstance(error, rex.NoPermissionError):
        why = "the store's ACL refuses the URL's user WAIT"
        fix = "allow it (ACL SETUSER <user> +wait), or set wait_replicas=0"
    elif isinstance(error, rex.ResponseError) and "unknown command" in str(error).lower():
        why = "the store does not know WAIT (a proxy, or a store without replicas)"
        fix = "set wait_replicas=0"
    else:
        return None
    return ConfigError(
        f"{where}: {why} ({error}), which wait_replicas sends after each admission to know "
        f"the replicas hold it: {fix}"
    )


def functions_served(
    client: Any, told: Callable[[bool], None], cluster: bool = False
) -> Generator[Callable[[], Any], Any, None]:
    """Whether the server runs Redis Functions, told to ``told``: it does unless it refuses
    ``FUNCTION LIST`` as a command it does not know (before Redis 7.0, Dragonfly, KeyDB, a
    managed service that renames it away) or one the client may not run (an ACL); the
    calls then go as EVAL scripts, which is logged once. In a cluster, a node that cannot
    be reached is passed over for the next primary that can (one primary down must not
    fail calls to the others). Any other failure is raised (the inspection is made again
    at the next call)."""
    probe = ("FUNCTION", "LIST", "LIBRARYNAME", "freqguard_")
    # a cluster client is told where the probe goes: redis-py before 5.3.1 fails to find the
    # keys of a subcommand without any (ValueError) when left to route it
    where = {"target_nodes": client.DEFAULT_NODE} if cluster else {}
    try:
        yield lambda: client.execute_command(*probe, **where)
    except rex.ResponseError as exc:
        told(_runs_functions(exc, address(client)))
        return
    except ERRORS:
        if not cluster:
            raise
        for node in list(client.get_primaries()):  # known now: the first call learnt them
            try:
                yield partial(client.execute_command, *probe, target_nodes=node)
            except rex.ResponseError as exc:
                told(_runs_functions(exc, address(client)))
                return
            except ERRORS:
                continue
            told(True)
            return
        raise
    told(True)


#: The stores told of running no Functions, by address: told once a process, whatever
#: number of backends (sync, async, a face, a CLI's) reach them.
TOLD: set[str] = set()


def _runs_functions(refusal: rex.ResponseError, where: str) -> bool:
    """Whether a server that refused ``FUNCTION LIST`` so runs Functions all the same: it
    does not if it knows no such command or the client may not run it (logged once a
    process for the store at ``where``); any other refusal is raised."""
    text = str(refusal).lower()
    if not (isinstance(refusal, rex.NoPermissionError) or "unknown" in text):
        raise refusal
    if where in TOLD:
        return False
    TOLD.add(where)
    _log.warning(
        "freqguard: the store does not run Redis Functions (%s): its calls go as "
        "EVALSHA scripts, which parse their rules at every call (docs/redis.md, 'Stores "
        'without Functions\'); RedisBackend(scripts="eval") or ?scripts=eval says so '
        "without this warning",
        refusal,
    )
    return False
