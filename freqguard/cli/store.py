"""``freqguard ping``, ``freqguard flush`` and ``freqguard serve``: the store a configuration
(or a URL) names, and the service on it."""

from __future__ import annotations

import argparse
import contextlib
import re
import secrets
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from freqguard.cli.output import EXIT_OK, masked, out, say
from freqguard.cli.words import SHARED_STORE, shared_store, with_policies
from freqguard.config.places import named_path
from freqguard.errors import ConfigError, install, shown
from freqguard.rules import Rule, check_name
from freqguard.script.keys import digest, partition_token

if TYPE_CHECKING:
    from freqguard.service.server import Wire

__all__ = [
    "ACCESS_LOGS",
    "LOG_LEVELS",
    "MAX_WORKERS",
    "flush",
    "ours",
    "ping",
    "scan_pattern",
    "serve",
]

#: uvicorn's log levels, and the most worker processes ``serve`` starts.
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
#: ``serve --access-log``: none, or a JSON line per request (context values digested).
ACCESS_LOGS = ("off", "json")
MAX_WORKERS = 256


def _store(target: str, what: str) -> tuple[Any, str, str]:
    """The backend a configuration file (or a URL) names, its prefix and its URL."""
    from freqguard.backends.urls import backend_from_url, parse_url
    from freqguard.config import load

    source = None
    if "://" in target:
        parse_url(target)
        url, prefix, source = target, "fg", "the URL given"
    else:
        config = load(target)
        url, prefix = config.backend, config.prefix
    if what:
        shared_store(url, what, source)
    return backend_from_url(url), prefix, url


def ping(args: argparse.Namespace) -> int:
    import time

    from freqguard.guard import Guard
    from freqguard.policy import Policy

    backend, prefix, _ = _store(args.config, "")
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


# -- flush: freqguard's keys, and only those -----------------------------------------------

_GLOB = re.compile(r"([*?\[\]\\])")
_DIGEST = len(digest(""))  # a partition value's digest, in hex
_BESIDE = re.compile(r"(.+):(?:bins|stats:[0-9]{1,12}|top:[0-9]{1,12})")  # keys.POLICY_KEYS


def scan_pattern(prefix: str) -> str:
    """The SCAN pattern of freqguard's records under ``prefix`` (glob characters escaped:
    SCAN's MATCH reads them)."""
    return _GLOB.sub(r"\\\1", prefix) + ":{*}:*"


def ours(key: bytes, prefix: str) -> bool:
    """Whether ``key`` is one of freqguard's keys under ``prefix`` in Redis (see
    freqguard/script/keys.py): ``<prefix>:{<partition>}:<policy>``, the partition a value
    kept verbatim or ``=`` and its digest, ``*<policy>`` for a policy's one record, or
    ``#<n>`` for a bin; and what a policy keeps beside its one record
    (``<prefix>:{*<policy>}:<policy>:bins``, ``:stats:<hour>``, ``:top:<minute>``:
    ``keys.policy_key``). Any other key, whatever it starts with, is another's."""
    try:
        text = key.decode("ascii")
    except UnicodeDecodeError:  # freqguard's keys are ASCII
        return False
    head = f"{prefix}:{{"
    token, close, policy = text[len(head) :].partition("}:")
    beside = _BESIDE.fullmatch(policy) if token.startswith("*") else None
    if beside is not None:  # kept beside the policy's one record
        policy = beside.group(1)
    if not text.startswith(head) or not close or not _name(policy):
        return False
    if token.startswith("*"):
        return token[1:] == policy
    if token.startswith("#"):
        return re.fullmatch(r"[0-9]{1,10}", token[1:]) is not None
    if token.startswith("="):
        return len(token) == 1 + _DIGEST and re.fullmatch(r"[0-9a-f]+", token[1:]) is not None
    return token != "" and partition_token(token) == token


def _name(text: str) -> bool:
    try:
        check_name("policy name", text)
    except ConfigError:
        return False
    return True


def flush(args: argparse.Namespace) -> int:
    backend, prefix, _ = _store(args.config, "freqguard flush")
    try:
        if args.prefix is not None:
            prefix = check_name("key prefix", args.prefix)
        deleted = delete_keys(backend.client, prefix, args.yes)
    finally:
        backend.close()  # its connections, as ping's guard closes them
    done = {"prefix": prefix, "keys": deleted, "deleted": bool(args.yes)}
    what = "deleted" if args.yes else "would delete (give --yes)"
    out(args, done, lambda: [["prefix", what], [prefix, str(deleted)]])
    return EXIT_OK


def delete_keys(client: Any, prefix: str, really: bool) -> int:
    """Every key freqguard wrote under ``prefix`` in the store ``client`` reaches (each
    primary of a Cluster), unlinked if ``really``; how many."""
    from redis.cluster import RedisCluster

    from freqguard.backends._boundary import boundary

    pattern = scan_pattern(prefix)
    deleted = 0
    with boundary(client):
        if isinstance(client, RedisCluster):  # each key alone: no CROSSSLOT, every primary
            nodes: list[Any] = client.get_primaries()  # type: ignore[no-untyped-call]
            scans = [client.scan_iter(match=pattern, count=1000, target_nodes=n) for n in nodes]
        else:
            scans = [client.scan_iter(match=pattern, count=1000)]
        for scan in scans:
            batch: list[bytes] = []
            for key in scan:
                if not ours(key, prefix):
                    continue
                batch.append(key)
                if len(batch) == 500:
                    deleted += _unlink(client, batch, really)
                    batch = []
            deleted += _unlink(client, batch, really)
    return deleted


def _unlink(client: Any, keys: list[bytes], really: bool) -> int:
    """``keys`` unlinked one command each (a Cluster pipeline sends each to its slot)."""
    if really and keys:
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.unlink(key)
        pipe.execute()
    return len(keys)


# -- serve ---------------------------------------------------------------------------------


def serve(args: argparse.Namespace) -> int:
    """``freqguard serve``: the decision service on uvicorn, ``--workers`` processes."""
    import os

    try:
        from freqguard.service.server import pick
    except ImportError:
        raise ConfigError(f"freqguard serve needs uvicorn: {install('serve')}") from None
    from freqguard.config import load
    from freqguard.service import (
        ACCESS_LOG_ENV,
        CONFIG_ENV,
        HISTORY_ENV,
        HOSTS_ENV,
        TOKENS_ENV,
        served_names,
        startup_warnings,
        tokens_from_env,
    )

    # a configuration that does not load fails here, not per worker
    config = with_policies(load(args.config), args.config, "serve")
    if args.workers > 1 and config.backend.partition("://")[0].lower() == "memory":
        raise ConfigError(
            f"freqguard serve --workers {args.workers} on memory://: each of the "
            f"{args.workers} workers would keep counts of its own, admitting up to "
            f"{args.workers} times every cap: run one worker, or name {SHARED_STORE}"
        )
    if args.token_file:
        _readable(args.token_file)
    if len(args.host) > 253 or not args.host.isprintable() or " " in args.host:
        raise ConfigError(  # no address or host name is longer, or holds a space
            f"--host must be an address or a host name (at most 253 characters), "
            f"got {shown(args.host)}"
        )
    os.environ[CONFIG_ENV] = os.path.abspath(args.config)
    if args.token_file:
        os.environ[f"{TOKENS_ENV}_FILE"] = os.path.abspath(args.token_file)
    host = f"[{args.host}]" if ":" in args.host else args.host
    workers = "1 worker" if args.workers == 1 else f"{args.workers} workers"
    wire = pick(args.loop, args.http)
    # the tokens read once here (a bad line fails now, not in each worker), and a service
    # reachable beyond this machine without any said so loudly
    tokens = tokens_from_env()
    needs = f"{len(tokens)} token{'s' * (len(tokens) > 1)}" if tokens else "no token"
    listening = (
        f"freqguard serve: listening on http://{host}:{args.port} ({workers}, {wire}, "
        f"{needs}), {masked(config.backend)}"
    )
    os.environ[HISTORY_ENV] = args.history
    os.environ.pop(ACCESS_LOG_ENV, None)
    if args.access_log == "json":
        os.environ[ACCESS_LOG_ENV] = _access_key(os.environ.get(f"{ACCESS_LOG_ENV}_KEY"))
    for line in startup_warnings(args.host, tokens):
        say(line)
    names = served_names(args.host, args.allow_host or ())  # DNS rebinding: see the gate
    os.environ.pop(HOSTS_ENV, None)
    if names is not None:
        os.environ[HOSTS_ENV] = ",".join(names)
    with _shared_metrics(args.workers):
        _run(args, wire, lambda: say(listening))
    return EXIT_OK


@contextlib.contextmanager
def _shared_metrics(workers: int) -> Iterator[None]:
    """With several workers, each counts its own decisions: prometheus_client's
    multiprocess mode (a folder of this run's, unless the operator named one) lets the
    worker a scrape reaches answer every worker's (``service.from_env``)."""
    import os
    import shutil
    import tempfile

    if workers == 1 or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        yield
        return
    folder = tempfile.mkdtemp(prefix="freqguard-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder  # read by each worker as it starts
    try:
        yield
    finally:
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        shutil.rmtree(folder, ignore_errors=True)


def _access_key(given: str | None) -> str:
    """The access log's digest key: the operator's (``..._KEY``), or one for this run."""
    key = given or secrets.token_hex(16)
    if len(key.encode()) > 64:  # BLAKE2b's longest key
        raise ConfigError(
            f"FREQGUARD_SERVE_ACCESS_LOG_KEY is at most 64 bytes, got {len(key.encode())}"
        )
    return key


def _readable(path: str) -> None:
    """Refuse a token file that is not a file (a FIFO would block the start) or cannot be
    read."""
    import os

    if not os.path.isfile(path):
        raise ConfigError(f"--token-file {named_path(path)}: no such file")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"--token-file {named_path(path)}: cannot be read: {exc.strerror or exc}"
        ) from None


def _run(args: argparse.Namespace, wire: Wire, bound: Callable[[], object]) -> None:
    """uvicorn on a socket bound here (``TCP_NODELAY``: ``service.server``), its worker
    processes making their apps with ``service.from_env``; ``bound`` said once it is."""
    from freqguard.service.server import run

    started = run(
        wire,
        args.host,
        args.port,
        args.workers,
        bound,
        log_level=args.log_level,
        access_log=False,  # uvicorn's would hold paths only; --access-log json is ours
        timeout_graceful_shutdown=args.shutdown_timeout,
    )
    if not started:  # uvicorn's log says why
        host = f"[{args.host}]" if ":" in args.host else args.host
        raise ConfigError(f"cannot serve on {host}:{args.port} (the reason is above)")
