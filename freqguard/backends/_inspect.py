"""What a Redis backend asks the server once, before its first call.

A standalone client aimed at a cluster node would decide the keys of that node's slots and
get MOVED for every other key: it is refused at once with a
:class:`~freqguard.ConfigError` that names the fix. A ``maxmemory-policy`` that can evict is
logged as a warning on the ``freqguard`` logger: every record has a TTL, so ``volatile-*``
policies evict them as ``allkeys-*`` do, and an evicted record forgets what a recipient was
sent. The questions are written once, as an I/O-free step generator (:func:`inspection`)
that the sync and async backends drive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Mapping
from typing import Any

from redis import exceptions as rex

from freqguard.backends._boundary import ERRORS, address, cluster_node

__all__ = ["inspection", "warn_evicting"]

_POLICY = "maxmemory-policy"
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


def inspection(client: Any, cluster: bool) -> Generator[Callable[[], Any], Any, None]:
    """What a backend checks once, before its first call, written once for sync and async:
    it yields each request (a callable whose reply, awaited for async clients, is sent back;
    a redis-py error is thrown in instead). A cluster node behind a standalone client is a
    :func:`~freqguard.backends._boundary.cluster_node` error; a ``maxmemory-policy`` that can
    evict is warned of (:func:`warn_evicting`)."""
    if not cluster:
        try:
            info = yield lambda: client.info("cluster")
            enabled = info.get("cluster_enabled")
        except rex.ResponseError:  # INFO refused (ACL, renamed): a MOVED reply tells
            enabled = None
        if enabled:
            raise cluster_node(client)
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
