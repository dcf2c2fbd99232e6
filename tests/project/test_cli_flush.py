"""``freqguard flush``: freqguard's keys, and only those. A prefix freqguard would not take
is refused (exit 2, nothing deleted); on a server and on a Cluster it deletes freqguard's
layout under its prefix and keeps every other key, another prefix's records among them.
The rig is ``cli_refusal_rig.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from redis.cluster import RedisCluster

from freqguard.config import load
from tests.conftest import flush
from tests.project.cli_refusal_rig import CONFIG
from tests.project.cli_refusal_rig import _no_url as _no_url
from tests.project.cli_refusal_rig import cli as cli
from tests.project.cli_refusal_rig import redis_config as redis_config
from tests.servers import RedisServer, wait_for

FOREIGN = [
    "app:session:1",
    "user:42",
    "fg",
    "fg:session",
    "fg:{x}",
    "fg:{x}:sms:extra",
    "fg:{x}:",
    "fg:{x}:bad name",
    "fg:{}:sms",
    "fgx:{a}:sms",
    "xfg:{a}:sms",
    "fg:{#x}:sms",
    "fg:{=zz}:sms",
    "fg:{a}{b}:sms",
    "other:{fg}:sms",
    "fg:{*sms}:sms:other",
    "fg:{*sms}:other:bins",
    "fg:{x}:sms:bins",
]
OURS = ["fg:{r1}:sms", "fg:{#12}:sms", "fg:{*sms}:sms", "fg:{=" + "ab" * 8 + "}:sms"]


@pytest.mark.parametrize("prefix", ["*", "fg*", "f?", "[f]g", "fg:", "", "a b", "fg\\", "x" * 65])
def test_flush_refuses_a_prefix_freqguard_would_not_take(
    cli: Any, redis_config: Path, redis_server: RedisServer, prefix: str
) -> None:
    redis_server.client.set("app:session:1", "kept")
    done = cli("flush", str(redis_config), "--prefix", prefix, "--yes")
    assert done.code == 2
    assert "key prefix must be" in done.err
    assert redis_server.client.get("app:session:1") == b"kept"


def _keys(found: Any) -> list[str]:
    return sorted(k.decode() if isinstance(k, bytes) else k for k in found)


def _seed(client: Any) -> None:
    for key in FOREIGN + OURS:
        client.set(key, "v")


def test_flush_deletes_freqguards_layout_only_on_a_server(
    cli: Any, redis_config: Path, redis_server: RedisServer
) -> None:
    client: Redis = redis_server.client
    _seed(client)
    guard = load(redis_config).guard()
    guard.hit("sms", recipient="r2", content="hi")  # a real record, and its policy's claim
    guard.close()
    assert client.get("fg:{*sms}:sms:bins") == b"0"  # of its bins setting
    dry = json.loads(cli("flush", str(redis_config), "--json").out)
    assert dry == {"prefix": "fg", "keys": len(OURS) + 2, "deleted": False}
    done = json.loads(cli("flush", str(redis_config), "--yes", "--json").out)
    assert done["keys"] == len(OURS) + 2
    left = _keys(client.keys("*"))
    assert left == sorted(FOREIGN)


def test_flush_deletes_freqguards_layout_only_on_a_cluster(
    cli: Any, tmp_path: Path, redis_cluster: list[RedisServer]
) -> None:
    flush(redis_cluster)
    path = tmp_path / "cluster.toml"
    path.write_text(CONFIG.format(url=f"redis+cluster://127.0.0.1:{redis_cluster[0].port}"))
    client = RedisCluster(host="127.0.0.1", port=redis_cluster[0].port)
    try:
        _seed(client)
        done = json.loads(cli("flush", str(path), "--yes", "--json").out)
        assert done["keys"] == len(OURS)
        left = _keys(client.keys("*", target_nodes=RedisCluster.ALL_NODES))
        assert left == sorted(FOREIGN)
    finally:
        client.close()


def test_flush_closes_the_store_it_opened(
    cli: Any, tmp_path: Path, redis_cluster: list[RedisServer]
) -> None:
    """flush left its backend open. On a cluster nothing closed its nodes' connections (a
    node's client closes only a pool it made itself): run in process, as here, they were
    reclaimed later by the collector, in whatever test then ran, whose unclosed socket's
    ResourceWarning failed that test. Found by collecting after every test of the suite."""
    url = f"redis+cluster://127.0.0.1:{redis_cluster[0].port}?client_name=fg-flush"
    path = tmp_path / "named.toml"
    path.write_text(CONFIG.format(url=url))
    cli("flush", str(path), "--json")

    def named() -> list[Any]:
        return [
            c
            for node in redis_cluster
            for c in node.client.client_list()
            if c["name"] == "fg-flush"
        ]

    wait_for(lambda: not named(), "the connections of flush's store to be closed")


def test_flush_under_another_prefix_keeps_the_first(
    cli: Any, redis_config: Path, redis_server: RedisServer
) -> None:
    client: Redis = redis_server.client
    _seed(client)
    client.set("app.v2:{r1}:sms", "v")
    done = json.loads(cli("flush", str(redis_config), "--prefix", "app.v2", "--yes", "--json").out)
    assert done == {"prefix": "app.v2", "keys": 1, "deleted": True}
    assert _keys(client.keys("*")) == sorted(FOREIGN + OURS)
