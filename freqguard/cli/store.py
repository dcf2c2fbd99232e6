"""``freqguard ping`` and ``freqguard flush``: the store a configuration (or a URL) names."""

from __future__ import annotations

import argparse
from typing import Any

from freqguard.cli.output import EXIT_OK, out
from freqguard.errors import ConfigError
from freqguard.rules import Rule

__all__ = ["flush", "ping", "serve"]


def _store(target: str) -> tuple[Any, str]:
    """The backend a configuration file (or a URL) names, and its prefix."""
    from freqguard.backends.urls import backend_from_url
    from freqguard.config import load

    if "://" in target:
        return backend_from_url(target), "fg"
    config = load(target)
    return backend_from_url(config.backend), config.prefix


def ping(args: argparse.Namespace) -> int:
    import time

    from freqguard.guard import Guard
    from freqguard.policy import Policy

    backend, prefix = _store(args.config)
    probe = Policy("freqguard-ping", Rule("1/second", name="ping"))
    guard = Guard(backend, [probe], prefix=prefix)
    try:
        began = time.perf_counter()
        guard.peek("freqguard-ping")  # loads the function where it is missing; writes nothing
        took = time.perf_counter() - began
        data = {"backend": type(backend).__name__, "round_trip_ms": round(took * 1000, 3)}
        data.update(_topology(backend))
    finally:
        guard.close()
    out(args, data, lambda: [["what", "value"]] + [[k, str(v)] for k, v in data.items()])
    return EXIT_OK


def _topology(backend: Any) -> dict[str, Any]:
    """What the store is: the server's version, and its nodes on a Cluster."""
    client = getattr(backend, "client", None)
    if client is None:
        return {"topology": "in process"}
    from redis.cluster import RedisCluster

    from freqguard.backends._boundary import boundary

    with boundary(client):
        if isinstance(client, RedisCluster):
            primaries = client.get_primaries()  # type: ignore[no-untyped-call]
            replicas = client.get_replicas()  # type: ignore[no-untyped-call]
            info = client.info("server", target_nodes=primaries[0])
            return {
                "topology": "cluster",
                "primaries": sorted(f"{n.host}:{n.port}" for n in primaries),
                "replicas": len(replicas),
                "redis_version": info.get("redis_version"),
            }
        info = client.info("server")
        return {"topology": "standalone", "redis_version": info.get("redis_version")}


def flush(args: argparse.Namespace) -> int:
    backend, prefix = _store(args.config)
    prefix = args.prefix or prefix
    client = getattr(backend, "client", None)
    if client is None:
        raise ConfigError("the memory backend keeps nothing between processes: no keys to flush")
    from redis.cluster import RedisCluster

    from freqguard.backends._boundary import boundary

    pattern = f"{prefix}:*"
    deleted = 0
    with boundary(client):
        if isinstance(client, RedisCluster):  # each key alone: no CROSSSLOT, every primary
            nodes: list[Any] = client.get_primaries()  # type: ignore[no-untyped-call]
            scans = [
                (client.scan_iter(match=pattern, count=1000, target_nodes=n), n) for n in nodes
            ]
        else:
            scans = [(client.scan_iter(match=pattern, count=1000), None)]
        for scan, _node in scans:
            batch: list[bytes] = []
            for key in scan:
                batch.append(key)
                if len(batch) == 500:
                    deleted += _unlink(client, batch, args.yes)
                    batch = []
            deleted += _unlink(client, batch, args.yes)
    done = {"prefix": prefix, "keys": deleted, "deleted": bool(args.yes)}
    what = "deleted" if args.yes else "would delete (give --yes)"
    out(args, done, lambda: [["prefix", what], [prefix, str(deleted)]])
    return EXIT_OK


def _unlink(client: Any, keys: list[bytes], really: bool) -> int:
    """``keys`` unlinked one command each (a Cluster pipeline sends each to its slot)."""
    if really and keys:
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.unlink(key)
        pipe.execute()
    return len(keys)


def serve(args: argparse.Namespace) -> int:
    """``freqguard serve``: the decision service on uvicorn, ``--workers`` processes."""
    import os

    try:
        import uvicorn
    except ImportError:
        raise ConfigError("freqguard serve needs uvicorn: pip install 'freqguard[serve]'") from None
    from freqguard.config import load
    from freqguard.service import CONFIG_ENV, TOKENS_ENV

    load(args.config)  # a configuration that does not load fails here, once, not per worker
    os.environ[CONFIG_ENV] = os.path.abspath(args.config)
    if args.token_file:
        os.environ[f"{TOKENS_ENV}_FILE"] = os.path.abspath(args.token_file)
    uvicorn.run(
        "freqguard.service:from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        access_log=False,  # an access log would hold recipients' numbers
    )
    return EXIT_OK
