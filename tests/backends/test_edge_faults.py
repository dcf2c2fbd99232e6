"""The Redis edge under faults placed at a chosen byte, through a TCP proxy in front of a real
standalone redis-server (``proxy_rig.py``): a reply lost after the server ran the call, a
connection cut mid-send or mid-reply, a batch half applied (its first call run, the next
refused by an error reply). Each outcome is checked against the store's own count: a call
is never applied twice, never reported applied when it was not, and its error's ``sent``
says "may have been applied" whenever any of it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    ConfigError,
    Guard,
    Policy,
    Rule,
    async_backend_from_url,
    backend_from_url,
)
from tests import servers
from tests.backends.proxy_rig import Proxy
from tests.conftest import flush
from tests.faults import AsyncDriver
from tests.servers import RedisServer

pytestmark = pytest.mark.slow  # a server and a proxy of their own; threads per connection

#: two parts (records of r and of c): a refund or a lease goes as a batch of two calls
TWO = Policy(
    "two",
    Rule("3/day", by="r", name="per-r", strategy="fixed-window"),
    Rule("2/day", by="c", name="per-c", strategy="fixed-window"),
)
LEASED = Policy(
    "leased",
    Rule("3 concurrent", by="r", lease=60, name="held-r"),
    Rule("2 concurrent", by="c", lease=60, name="held-c"),
)
ONE = Policy("one", Rule("5/day", by="r", name="daily"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with servers.standalone(tmp_path_factory.mktemp("edge")) as found:
        yield found


@pytest.fixture
def proxy(server: RedisServer) -> Iterator[Proxy]:
    flush([server])
    server.client.config_set("min-replicas-to-write", 0)
    made = Proxy(server.port)
    yield made
    made.close()
    server.client.config_set("min-replicas-to-write", 0)


@pytest.fixture(params=["sync", "async"])
def make_guard(request: pytest.FixtureRequest, proxy: Proxy) -> Iterator[Callable[..., Any]]:
    made: list[Any] = []

    def make(**options: Any) -> Any:
        url = f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=5&socket_connect_timeout=5"
        options.setdefault("breaker", None)
        guard: Any
        if request.param == "sync":
            guard = Guard(backend_from_url(url), [TWO, LEASED, ONE], **options)
        else:
            backend = async_backend_from_url(url)
            guard = AsyncDriver(AsyncGuard(backend, [TWO, LEASED, ONE], **options))
        made.append(guard)
        return guard

    yield make
    for guard in made:
        guard.close()


def _in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """``work()`` in a thread: what it returned or raised, once joined."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(work())
        except BaseException as exc:  # the test reads it
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def _half_applied(server: RedisServer, proxy: Proxy, work: Callable[[], Any]) -> Any:
    """``work()``'s outcome when the server runs the first call of its batch and refuses the
    next with an error reply (``NOREPLICAS``: ``min-replicas-to-write`` set in between)."""
    proxy.hold()
    thread, out = _in_thread(work)
    proxy.wait(proxy.held)
    server.client.config_set("min-replicas-to-write", 1)
    proxy.release()
    thread.join(10)
    server.client.config_set("min-replicas-to-write", 0)
    return out[0]


def _admitted(guard: Any, policy: str, n: int, **ctx: str) -> int:
    """How many of ``n`` hits on fresh values of the other rule's key ``ctx`` admits."""
    other = "c" if "r" in ctx else "r"
    return sum(guard.hit(policy, **ctx, **{other: f"fresh{i}"}).allowed for i in range(n))


# -- a batch half applied: its first call run, the next refused --------------------------------


def test_a_refund_half_applied_on_one_server_is_not_given_back_twice(
    server: RedisServer, proxy: Proxy, make_guard: Callable[..., Any]
) -> None:
    """refund(decision) of a policy of two parts goes as one batch of two calls; the server
    gives back the first part and refuses the second (an error reply: NOREPLICAS). The
    error said sent=False (an error reply: "nothing applied"), so Guard.refund handed the
    receipt back, and the caller's retry gave the first part back twice (the cluster's
    PartialFailure says sent; one server's first error did not)."""
    guard = make_guard()
    mine = guard.hit("two", r="a", c="c")
    assert mine.allowed
    assert guard.hit("two", r="a", c="d").allowed  # r=a: 2 of 3
    assert guard.hit("two", r="b", c="c").allowed  # c=c: 2 of 2
    failed = _half_applied(server, proxy, lambda: guard.refund(mine))
    assert isinstance(failed, BackendUnavailable), failed
    with contextlib.suppress(ConfigError):  # the receipt spent: refused, as it must be
        guard.refund(mine)  # the caller retries the refund that "failed"
    # one refund, once: r=a has 2 left and c=c 1 (fewer: a part never given back, strict)
    assert _admitted(guard, "two", 3, r="a") <= 2
    assert _admitted(guard, "two", 2, c="c") <= 1
    assert failed.sent


def test_a_lease_release_half_applied_on_one_server_is_not_given_back_twice(
    server: RedisServer, proxy: Proxy, make_guard: Callable[..., Any]
) -> None:
    """release(decision) of a lease of two parts, half applied as the refund above: the
    lease must not be given back twice by the caller's retry."""
    guard = make_guard()
    mine = guard.take_lease("leased", r="a", c="c")
    assert mine.allowed
    assert guard.take_lease("leased", r="a", c="d").allowed  # r=a: 2 of 3 held
    assert guard.take_lease("leased", r="b", c="c").allowed  # c=c: 2 of 2 held
    failed = _half_applied(server, proxy, lambda: guard.release(mine))
    assert isinstance(failed, BackendUnavailable), failed
    with contextlib.suppress(ConfigError):
        guard.release(mine)
    held_r = sum(guard.take_lease("leased", r="a", c=f"f{i}").allowed for i in range(3))
    held_c = sum(guard.take_lease("leased", r=f"f{i}", c="c").allowed for i in range(2))
    assert held_r <= 2
    assert held_c <= 1
    assert failed.sent


def test_a_batch_of_hits_half_applied_on_one_server_says_it_may_have_been(
    server: RedisServer, proxy: Proxy, make_guard: Callable[..., Any]
) -> None:
    """hit_many on one server: the first hit counted, the others refused (NOREPLICAS). The
    error must not say "nothing applied" (sent=False, what the decision service answers
    "nothing was applied"): the first hit was counted."""
    guard = make_guard()
    assert guard.hit("one", r="warm").allowed  # the library loaded, the lane made
    failed = _half_applied(
        server, proxy, lambda: guard.hit_many("one", [{"r": "a"}, {"r": "b"}, {"r": "c"}])
    )
    assert isinstance(failed, BackendUnavailable), failed
    assert [guard.peek("one", r=r).remaining for r in "abc"] == [4, 5, 5]  # the first ran
    assert failed.sent


# -- a connection cut at each stage of a call ----------------------------------------------------

#: how the proxy cuts the next call, and whether the server ran it: mid-send (part of the
#: call forwarded: the server never reads it whole), its reply lost whole, or cut mid-way
STAGES = {
    "mid-send": ("request", 9, 0),
    "reply-lost": ("reply", 0, 1),
    "mid-reply": ("reply", 4, 1),
}


def _cut(proxy: Proxy, stage: str) -> int:
    """Arm the stage's cut; how many times the cut call runs on the server."""
    where, n, ran = STAGES[stage]
    (proxy.cut_request if where == "request" else proxy.cut_reply)(n)
    return ran


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_hit_cut_at_each_stage_is_counted_at_most_once_and_says_so(
    proxy: Proxy, make_guard: Callable[..., Any], stage: str
) -> None:
    """A hit whose connection is cut before, during or after the server ran it: raised as
    sent (it may have run), never sent again (counted once when it ran, never when it did
    not); the next hit, on a new connection, reads its own reply."""
    guard = make_guard()
    assert guard.hit("one", r="warm").allowed
    ran = _cut(proxy, stage)
    with pytest.raises(BackendUnavailable) as caught:
        guard.hit("one", r="a")
    proxy.wait(proxy.done)
    assert caught.value.sent
    assert guard.peek("one", r="a").remaining == 5 - ran
    assert guard.hit("one", r="a").remaining == 4 - ran  # the connection made again
    assert guard.peek("one", r="warm").remaining == 4


@pytest.mark.parametrize("stage", list(STAGES))
@pytest.mark.parametrize("on_error", ["allow", "deny"])
def test_a_batch_cut_at_each_stage_is_answered_by_on_error_and_counted_at_most_once(
    proxy: Proxy, make_guard: Callable[..., Any], stage: str, on_error: str
) -> None:
    """hit_many of three contexts cut at each stage: every hit answered by on_error (none
    decided by a store that did not say), each counted once where the batch ran."""
    guard = make_guard(on_error=on_error)
    assert guard.hit("one", r="warm").source == "backend"
    ran = _cut(proxy, stage)
    got = guard.hit_many("one", [{"r": "a"}, {"r": "b"}, {"r": "c"}])
    proxy.wait(proxy.done)
    source = {"allow": "fail-open", "deny": "fail-closed"}[on_error]
    assert [(d.source, d.allowed) for d in got] == [(source, on_error == "allow")] * 3
    assert [guard.peek("one", r=r).remaining for r in "abc"] == [5 - ran] * 3


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_refund_cut_at_each_stage_gives_back_at_most_once(
    proxy: Proxy, make_guard: Callable[..., Any], stage: str
) -> None:
    """refund(decision) of two parts cut at each stage, then retried by the caller: what the
    hit took is given back at most once (a refund that may have run keeps its receipt
    spent; one that surely did not can be made again)."""
    guard = make_guard()
    mine = guard.hit("two", r="a", c="c")
    assert guard.hit("two", r="a", c="d").allowed
    assert guard.hit("two", r="b", c="c").allowed
    ran = _cut(proxy, stage)
    with pytest.raises(BackendUnavailable) as caught:
        guard.refund(mine)
    proxy.wait(proxy.done)
    assert caught.value.sent
    with contextlib.suppress(ConfigError):
        guard.refund(mine)
    assert _admitted(guard, "two", 3, r="a") == 1 + ran
    assert _admitted(guard, "two", 2, c="c") == ran


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_lease_cut_at_each_stage_is_held_at_most_once(
    proxy: Proxy, make_guard: Callable[..., Any], stage: str
) -> None:
    """take_lease cut at each stage: raised as sent; the lease is held once when the call
    ran (until it lapses: nobody knows its id), never when it did not. Then a release cut
    at each stage, retried: given back at most once."""
    guard = make_guard()
    assert guard.take_lease("leased", r="warm", c="warm").allowed
    ran = _cut(proxy, stage)
    with pytest.raises(BackendUnavailable) as caught:
        guard.take_lease("leased", r="a", c="c")
    proxy.wait(proxy.done)
    assert caught.value.sent
    mine = guard.take_lease("leased", r="a", c="d")
    assert mine.allowed
    ran_release = _cut(proxy, stage)
    with pytest.raises(BackendUnavailable) as caught:
        guard.release(mine)
    proxy.wait(proxy.done)
    assert caught.value.sent
    with contextlib.suppress(ConfigError):
        guard.release(mine)
    held = 1 + ran - ran_release  # r=a: the lost take's lease, and mine unless released
    free_r = sum(guard.take_lease("leased", r="a", c=f"f{i}").allowed for i in range(4))
    assert free_r == 3 - held


# -- what on_error answers, and what it must not hide -------------------------------------------


@pytest.mark.parametrize("on_error", ["allow", "deny"])
def test_a_bad_argument_is_raised_whatever_on_error_says_with_the_store_away(
    proxy: Proxy, make_guard: Callable[..., Any], on_error: str
) -> None:
    """With the store unreachable, a programming error (a bad cost, an unknown policy, a
    context value missing) is still the ConfigError it is, never an outage that on_error
    answers; the same hits made right are answered by on_error."""
    guard = make_guard(on_error=on_error)
    assert guard.hit("one", r="warm").source == "backend"
    proxy.close()  # refused from now on: nothing reaches the store
    bad: list[Callable[[], Any]] = [
        lambda: guard.hit("one", cost=-1, r="a"),
        lambda: guard.hit("nope", r="a"),
        lambda: guard.hit("one"),
        lambda: guard.hit_many("one", [{"r": "a"}, {}]),
        lambda: guard.take_lease("one", r="a"),
    ]
    for call in bad:
        with pytest.raises(ConfigError):
            call()
    source = {"allow": "fail-open", "deny": "fail-closed"}[on_error]
    assert guard.hit("one", r="a").source == source
    assert [d.source for d in guard.hit_many("one", [{"r": "a"}, {"r": "b"}])] == [source] * 2


@pytest.mark.parametrize("on_error", ["raise", "deny"])
def test_a_demoted_master_refuses_hits_as_applied_nowhere(
    server: RedisServer, proxy: Proxy, make_guard: Callable[..., Any], on_error: str
) -> None:
    """A plain redis:// client whose server was made a replica (READONLY): every hit is
    refused by an error reply, so nothing was applied (sent=False), and a refund refused
    so can be made again once the server takes writes: given back once. The refund
    refused is answered as failing open whatever on_error says (docs/operations.md):
    with "deny" it was answered "fail-closed", a refund denied."""
    guard = make_guard(on_error=on_error)
    mine = guard.hit("one", r="a")
    assert mine.allowed
    nowhere = servers.free_port()  # a master that never answers: the data is kept
    server.client.execute_command("REPLICAOF", "127.0.0.1", nowhere)  # type: ignore[no-untyped-call]
    try:
        if on_error == "raise":
            with pytest.raises(BackendUnavailable) as caught:
                guard.hit("one", r="a")
            assert (caught.value.sent, caught.value.answered) == (False, True)
            assert "ReadOnlyError" in str(caught.value)
        else:
            assert guard.hit("one", r="a").source == "fail-closed"
        refused = guard.refund(mine) if on_error == "deny" else None
        if refused is None:
            with pytest.raises(BackendUnavailable):
                guard.refund(mine)
        else:
            assert refused.source == "fail-open"  # nothing given back, said so
    finally:
        server.client.execute_command("REPLICAOF", "NO", "ONE")  # type: ignore[no-untyped-call]
    assert guard.peek("one", r="a").remaining == 4  # the refused hit counted nowhere
    assert guard.refund(mine).source == "backend"  # made again: once
    with pytest.raises(ConfigError):
        guard.refund(mine)
    assert guard.peek("one", r="a").remaining == 5


# -- the async lane: one connection, tasks pipelined ----------------------------------------------


def test_tasks_pipelined_on_a_connection_cut_mid_round_fail_alone_and_later_tasks_go_on(
    proxy: Proxy, make_guard: Callable[..., Any]
) -> None:
    """Three tasks' hits go as one round on the lane's one connection; the server runs the
    first and the connection is cut before it reads the others. The three fail as sent (the
    first ran, the others may have), none sent again; a task that queued while the round
    was out goes on the next round, on a new connection, and is decided by the store."""
    driver = make_guard()
    if not isinstance(driver, AsyncDriver):
        pytest.skip("one connection shared by tasks: the async guard's lane")
    guard = driver.guard

    async def scenario() -> tuple[list[Any], Any]:
        assert (await guard.hit("one", r="warm")).allowed
        proxy.hold()
        first = [asyncio.ensure_future(guard.hit("one", r=r)) for r in "abc"]
        while not proxy.held.is_set():  # bounded by wait_for: the round, at the proxy
            await asyncio.sleep(0)
        later = asyncio.ensure_future(guard.hit("one", r="d"))  # queued: the round is out
        await asyncio.sleep(0)
        proxy.release(cut=True)
        got = await asyncio.gather(*first, return_exceptions=True)
        return got, await later

    got, later = driver.loop.run_until_complete(asyncio.wait_for(scenario(), 10))
    assert all(isinstance(g, BackendUnavailable) and g.sent for g in got), got
    assert (later.source, later.remaining) == ("backend", 4)
    assert [guard_peek(driver, r) for r in "abc"] == [4, 5, 5]  # the first ran, once


def guard_peek(driver: AsyncDriver, r: str) -> int:
    return int(driver.peek("one", r=r).remaining)


@pytest.mark.parametrize("on_error", ["allow", "deny"])
def test_a_record_key_another_program_wrote_is_a_config_error_not_an_outage(
    server: RedisServer, make_guard: Callable[..., Any], on_error: str
) -> None:
    """A record's key holding a value of another type (another program writing under the
    guard's key prefix: a string, a list) makes every call on it fail with WRONGTYPE, for
    as long as that key lives: no outage for on_error to ride out. It was answered by
    on_error, every hit of that partition failing open (or closed) for good, without a
    word, and the breaker never opened (an answered error): now a ConfigError naming the
    key and the fix, whatever on_error says."""
    guard = make_guard(on_error=on_error)
    assert guard.hit("one", r="a").source == "backend"
    (key,) = [k for k in server.client.keys("*") if isinstance(k, bytes) and b"{a}" in k]
    server.client.delete(key)
    server.client.set(key, "someone else's")
    calls: list[Callable[[], Any]] = [
        lambda: guard.hit("one", r="a"),
        lambda: guard.peek("one", r="a"),
        lambda: guard.hit_many("one", [{"r": "a"}]),
    ]
    for call in calls:
        with pytest.raises(ConfigError, match="prefix") as caught:
            call()
        assert key.decode() in str(caught.value)
    got = None
    with pytest.raises(ConfigError):
        got = guard.hit_many("one", [{"r": "b"}, {"r": "a"}, {"r": "c"}])
    assert got is None
    assert guard.peek("one", r="b").remaining == 5  # what the batch took, given back
    assert guard.hit("one", r="b").source == "backend"  # the others' keys go on
