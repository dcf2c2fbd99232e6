"""A cluster URL of several nodes and the WAIT probe at their edges: an empty first node, a
password holding '?', a cluster whose nodes' ACLs differ, a refusal named by its node. Each
an adversarial review's finding, written failing first."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from redis.cluster import RedisCluster

from freqguard import ConfigError, Guard, Policy, RedisBackend, Rule, backend_from_url
from freqguard.backends.urls import parse_url
from tests.conftest import examples, flush
from tests.servers import RedisServer


@settings(max_examples=examples(40))
@given(
    ports=st.lists(st.integers(1, 65535), min_size=1, max_size=4),
    where=st.integers(0, 4),
    user=st.sampled_from(["", "app:pw@"]),
)
@example(ports=[7000], where=0, user="")  # redis+cluster://,127.0.0.1:7000
@example(ports=[7000], where=0, user="app:pw@")  # redis+cluster://app:pw@,127.0.0.1:7000
def test_an_empty_node_is_refused_wherever_it_stands(
    ports: list[int], where: int, user: str
) -> None:
    """An empty node in a cluster URL's list is refused in the middle
    (``a:1,,b:2``) and at the end (``a:1,``), naming the cluster node's address; at the
    start (``redis+cluster://,host:7000``, a list joined with a leading comma) it is taken:
    the first node becomes the URL without a host, and redis-py's sync cluster client
    makes of it a startup node ``None:6379`` (this machine's port 6379), tried when the
    named node is down; a stray local Redis Cluster would be learnt as the cluster."""
    nodes = [f"127.0.0.1:{port}" for port in ports]
    nodes.insert(min(where, len(nodes)), "")
    url = f"redis+cluster://{user}{','.join(nodes)}"
    with pytest.raises(ConfigError, match="a cluster node's address must be host:port"):
        parse_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://app:s3cr?et9@10.0.0.1:7000,10.0.0.2:7000",
        "redis+cluster://app:s3cr?et9@10.0.0.1:7000",
        "redis://app:s3cr?et9@10.0.0.1:6379",
        "redis+sentinel://app:s3cr?et9@10.0.0.1:26379/orders",
    ],
)
def test_a_password_holding_a_question_mark_is_never_shown(url: str) -> None:
    """A password holding ``?`` (unencoded) ends the address early, as ``/`` and ``#`` do,
    which are refused with "the user or password ... holds a '/' or '#': percent-encode
    it" and the password masked. With ``?`` the refusal is an "unknown option
    'et9@10.0.0.1:7000,...'" (or a bad port 's3cr') and the message shows the URL as
    written: the whole password, in the log of any service that reports its
    configuration errors. It should be masked and name the fix (%3F)."""
    with pytest.raises(ConfigError) as refused:
        parse_url(url)
    said = str(refused.value)
    assert "s3cr" not in said, said
    assert "et9" not in said, said
    assert "%3F" in said, said


USER = "fg_review_wait"
QUERY = "wait_replicas=1&wait_timeout=0.1&socket_timeout=1"


@pytest.fixture
def wait_user(redis_cluster: list[RedisServer]) -> Iterator[list[RedisServer]]:
    flush(redis_cluster)
    for node in redis_cluster:
        node.client.acl_setuser(USER, enabled=True, nopass=True, keys=["*"], commands=["+@all"])
    try:
        yield redis_cluster
    finally:
        for node in redis_cluster:
            node.client.acl_deluser(USER)


def _hit_every_node(guard: Guard) -> None:
    for r in (f"k{i}" for i in range(30)):  # keys on every node's slots
        guard.hit("p", r=r)


def test_a_cluster_node_refusing_wait_is_found_whichever_node_is_asked(
    wait_user: list[RedisServer],
) -> None:
    """ACLs are each node's own in a Redis Cluster (``ACL SETUSER`` is not propagated): a
    rollout that missed a node, or a node added from another ACL file, is the usual way a
    cluster refuses WAIT. The probe asks the client's default node only ("the one probed
    stands for the ACL of all"): here the default node allows WAIT and the others refuse
    it, the probe passes, and every hit on the others' slots is applied, then failed as
    not replicated and answered by ``on_error`` (failing open: admitted) -- the very
    outage the probe was made to turn into a ConfigError. Asking every primary (as
    ``CONFIG GET`` already is) costs one round trip each, once."""
    url = f"redis+cluster://{USER}@127.0.0.1:{wait_user[0].port}/0?{QUERY}"
    backend = backend_from_url(url)
    guard = Guard(backend, [Policy("p", Rule("5/minute", by="r"), on_error="allow")])
    try:
        assert isinstance(backend, RedisBackend)
        assert isinstance(backend.client, RedisCluster)
        asked = backend.client.get_default_node().port  # type: ignore[no-untyped-call]
        for node in wait_user:
            if node.port != asked:
                node.client.acl_setuser(
                    USER, enabled=True, nopass=True, keys=["*"], commands=["+@all", "-wait"]
                )
        with pytest.raises(ConfigError, match=r"\+wait"):
            _hit_every_node(guard)
    finally:
        guard.close()


def test_a_cluster_refusing_wait_is_named_by_one_of_its_nodes(
    wait_user: list[RedisServer],
) -> None:
    """The probe's refusal on a cluster names where to run ``ACL SETUSER <user> +wait`` as
    ``localhost:6379:`` whatever the cluster's nodes (here 127.0.0.1 on other ports):
    ``_waits`` gives ``wait_refused`` the standalone client's ``address()``, which reads a
    cluster client's absent host and port as redis-py's defaults. An operator following
    it looks at another server, or at none."""
    for node in wait_user:
        node.client.acl_setuser(
            USER, enabled=True, nopass=True, keys=["*"], commands=["+@all", "-wait"]
        )
    url = f"redis+cluster://{USER}@127.0.0.1:{wait_user[0].port}/0?{QUERY}"
    guard = Guard(backend_from_url(url), [Policy("p", Rule("5/minute", by="r"))])
    try:
        with pytest.raises(ConfigError, match=r"\+wait") as refused:
            guard.hit("p", r="a")
    finally:
        guard.close()
    said = str(refused.value)
    assert "localhost:6379" not in said, said
    assert any(f"127.0.0.1:{node.port}" in said for node in wait_user), said
