"""A new user's first Redis URL, wrong in the ways a first hour makes it wrong: a cluster URL
at a standalone server, and a URL at which no server runs. Each error names the fix."""

from __future__ import annotations

import pytest

from freqguard import BackendUnavailable, ConfigError
from tests.backends.test_redis_tls_hint import SURE  # a timeout a refusal never meets first
from tests.backends.test_redis_tls_hint import hit as _hit  # one hit, sync or async
from tests.servers import RedisServer, free_port

SIDES = pytest.mark.parametrize("side", ["sync", "async"])


@SIDES
def test_a_cluster_url_at_a_standalone_server_names_redis_url(
    redis_server: RedisServer, side: str
) -> None:
    """``redis+cluster://`` at a server without cluster mode was a BackendUnavailable (an
    outage, which on_error="allow" would fail open on for good) saying "Cluster mode is not
    enabled on this node": the reverse, a redis:// URL at a cluster node, is a ConfigError
    naming the URL to write; so is this."""
    url = f"redis+cluster://127.0.0.1:{redis_server.port}"
    with pytest.raises(ConfigError, match=r"not a Redis Cluster node.*use redis://"):
        _hit(url, side)


@SIDES
def test_a_url_where_no_server_listens_asks_whether_one_runs(side: str) -> None:
    dead = free_port()
    with pytest.raises(BackendUnavailable) as caught:
        _hit(f"redis://127.0.0.1:{dead}/0?{SURE}", side)
    message = str(caught.value)
    assert f"127.0.0.1:{dead}" in message
    assert "is a Redis server running there" in message
    assert "TLS" not in message


@SIDES
def test_a_cluster_url_where_no_node_listens_asks_whether_one_runs(side: str) -> None:
    dead = free_port()
    with pytest.raises(BackendUnavailable, match="is a Redis server running there"):
        _hit(f"redis+cluster://127.0.0.1:{dead}?{SURE}", side)


@SIDES
def test_a_host_that_does_not_resolve_says_so(side: str) -> None:
    """``.invalid`` never resolves (RFC 2606)."""
    with pytest.raises(BackendUnavailable, match="does not resolve"):
        _hit(f"redis://freqguard-no-such-host.invalid:6379/0?{SURE}", side)
