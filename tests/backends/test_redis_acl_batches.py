"""A batch that the store refuses in part (an ACL that allows this user only some keys:
NOPERM) is a ConfigError, whatever ``on_error`` says, and leaves nothing behind: the hits
the other calls admitted (on other cluster nodes, or beside the refused ones on a node or
a standalone server) are given back, by their own marks, before the error is raised. It
was raised at once, the admitted hits kept: units consumed that the caller never saw."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    ConfigError,
    Guard,
    Policy,
    RedisBackend,
    Rule,
    async_backend_from_url,
    backend_from_url,
)
from tests.conftest import flush
from tests.servers import RedisServer, primary_for

USER, PASSWORD = "fg_only_a", "pw-only-a"
#: the user's keys: those of partition values that begin with "a" (``fg:{alice}:p:log@u``)
ALLOWED = "fg:{a*"
#: admitted (their keys on two nodes) and refused (NOPERM: on a third node, and beside
#: admitted ones on theirs), in one batch
ADMITTED = ["alice", "amy", "al"]
REFUSED = ["bob", "carol", "zed"]
USERS = [u for pair in zip(ADMITTED, REFUSED, strict=True) for u in pair]


def _policies(on_error: str) -> list[Policy]:
    """One part (the batch goes as one write per node), and two (a batch of hits that go
    part by part: the user's, then the team's)."""
    return [
        Policy("one", Rule("2/minute", by="u"), on_error=on_error),
        Policy("two", Rule("2/minute", by="u"), Rule("9/minute", by="t"), on_error=on_error),
    ]


@pytest.fixture(params=["cluster", "redis"])
def limited(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """The URL of a user whom the store's ACL (every node's) allows every command, on
    ``ALLOWED`` keys only, removed after the test; and the default user's."""
    if request.param == "cluster":
        nodes: list[RedisServer] = request.getfixturevalue("redis_cluster")
        on = {u: primary_for(nodes, f"fg:{{{u}}}:one:log@u").port for u in USERS}
        admitted, refused = {on[u] for u in ADMITTED}, {on[u] for u in REFUSED}
        # admitted hits on two nodes; a node that refuses all its calls, one that refuses some
        assert len(admitted) >= 2
        assert refused - admitted
        assert refused & admitted
        scheme = "redis+cluster"
    else:
        nodes = [request.getfixturevalue("redis_server")]
        scheme = "redis"
    flush(nodes)
    for node in nodes:
        node.client.acl_setuser(
            USER, enabled=True, passwords=[f"+{PASSWORD}"], keys=[ALLOWED], commands=["+@all"]
        )
    try:
        where = f"127.0.0.1:{nodes[0].port}"
        yield f"{scheme}://{USER}:{PASSWORD}@{where}", f"{scheme}://{where}"
    finally:
        for node in nodes:
            node.client.acl_deluser(USER)


def _contexts(policy: str) -> list[dict[str, str]]:
    """For "two": a hit admitted in both parts, one refused in its second (the team's
    key), one refused in its first: the batch stops there, what it took given back."""
    if policy == "one":
        return [{"u": u} for u in USERS]
    return [{"u": "alice", "t": "a-team"}, {"u": "amy", "t": "b-team"}, {"u": "bob", "t": "a-team"}]


def _left(admin: str, policy: str) -> list[list[int]]:
    """Each context's remaining, rule by rule, as a peek by the default user sees it."""
    guard = Guard(backend_from_url(admin), _policies("raise"))
    try:
        return [[r.remaining for r in guard.peek(policy, 1, **c).rules] for c in _contexts(policy)]
    finally:
        guard.close()


def _full(policy: str) -> list[list[int]]:
    return [[2] if policy == "one" else [2, 9] for _ in _contexts(policy)]


def _batch(url: str, side: str, policy: str, on_error: str) -> None:
    """``hit_many`` of the policy's contexts as the user of ``url``, sync or async."""
    if side == "sync":
        guard = Guard(backend_from_url(url), _policies(on_error))
        try:
            guard.hit_many(policy, _contexts(policy))
        finally:
            guard.close()
        return

    async def main() -> None:
        aguard = AsyncGuard(async_backend_from_url(url), _policies(on_error))
        try:
            await aguard.hit_many(policy, _contexts(policy))
        finally:
            await aguard.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("side", ["sync", "async"])
@pytest.mark.parametrize("on_error", ["raise", "allow"])
@pytest.mark.parametrize("policy", ["one", "two"])
def test_a_batch_refused_in_part_gives_back_what_it_took(
    limited: tuple[str, str], policy: str, on_error: str, side: str
) -> None:
    url, admin = limited
    with pytest.raises(ConfigError, match="ACL refuses") as refused:
        _batch(url, side, policy, on_error)
    assert _left(admin, policy) == _full(policy)
    # picklable (across process pools), without the replies, which are the engine's
    assert pickle.loads(pickle.dumps(refused.value)).results is None


@pytest.fixture
def one_connection(redis_server: RedisServer) -> Iterator[RedisServer]:
    """The standalone server, its ACL allowing the user ``ALLOWED`` keys only (as
    ``limited``'s), the user removed after the test."""
    flush([redis_server])
    redis_server.client.acl_setuser(
        USER, enabled=True, passwords=[f"+{PASSWORD}"], keys=[ALLOWED], commands=["+@all"]
    )
    try:
        yield redis_server
    finally:
        redis_server.client.acl_deluser(USER)


def test_a_batch_refused_in_part_on_one_connection_gives_back_what_it_took(
    one_connection: RedisServer,
) -> None:
    """A client that keeps one connection (``single_connection_client=True``) has its
    batch sent call by call (``_send``'s ``_command`` loop): the first NOPERM raises out of
    the loop, the hits before it kept, with no ``results`` for the guard to give them back
    by, so "alice" keeps a unit the caller never saw. The same batch over a pool gives it
    back (``test_a_batch_refused_in_part_gives_back_what_it_took``)."""
    client = redis.Redis(
        port=one_connection.port,
        username=USER,
        password=PASSWORD,
        single_connection_client=True,
        retry=Retry(NoBackoff(), 0),  # one that retries is refused: it would count twice
    )
    guard = Guard(RedisBackend(client), _policies("raise"))
    try:
        with pytest.raises(ConfigError, match="ACL refuses"):
            guard.hit_many("one", _contexts("one"))
    finally:
        guard.close()
    assert _left(f"redis://127.0.0.1:{one_connection.port}", "one") == _full("one")


def test_a_wait_refused_on_one_connection_is_known_applied_as_over_a_pool(
    redis_server: RedisServer,
) -> None:
    """``wait_replicas`` over a client of one connection: WAIT goes after the calls
    through redis-py's command API (``_send``), which raises its refusal (an ACL without
    +wait, a proxy that does not know WAIT) out of the batch instead of handing it to
    ``Durability.acked``: a ConfigError ("ACL refuses"), the hit applied on the server and
    its reply dropped, the lease of a take never given back. The same refusal over a pool
    is a BackendUnavailable that was sent, its reply kept (``applied``), as
    ``test_cluster_edges.test_a_write_whose_wait_is_refused_is_known_applied`` pins; 4791adc
    put each call's refusal in its reply's place on this path, not WAIT's. (The ACL
    narrowed under a running backend: refused from the start, it is refused before the
    first write, ``test_redis_wait_refused``.)"""
    flush([redis_server])
    user = ("nowait1", "on", "nopass", "~*", "&*", "+@all")
    redis_server.client.execute_command("ACL", "SETUSER", *user)  # type: ignore[no-untyped-call]
    client = redis.Redis(
        port=redis_server.port,
        username="nowait1",
        single_connection_client=True,
        retry=Retry(NoBackoff(), 0),
    )
    backend = RedisBackend(client, wait_replicas=1, wait_timeout=0.1)
    guard = Guard(backend, [Policy("p", Rule("2/minute", by="r"))], breaker=None)
    try:
        guard.peek("p", r="a")  # the backend's checks made, WAIT allowed then
        redis_server.client.execute_command("ACL", "SETUSER", "nowait1", "-wait")  # type: ignore[no-untyped-call]
        with pytest.raises(BackendUnavailable, match="WAIT was refused") as caught:
            guard.hit("p", r="a")  # got: ConfigError, the unit taken on the server
        assert caught.value.applied is not None
        assert caught.value.applied.allowed
    finally:
        guard.close()
        redis_server.client.execute_command("ACL", "DELUSER", "nowait1")  # type: ignore[no-untyped-call]
