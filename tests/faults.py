"""Faults injected into real redis-server processes, and what the fault tests count.

A server is stopped (SIGSTOP: it hangs, its clients time out), resumed (SIGCONT), killed
(SIGKILL) and started again on the same port and directory (the same command line), only
ever by the PID of a process the suite started itself. :class:`Tally` is an observer that
counts decisions by source and store failures by cause, and lets a test wait (on a condition
variable, not a sleep) until a count is reached. :func:`flushing` runs a ``FUNCTION FLUSH``
storm in a thread.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from redis import Redis
from redis.crc import key_slot

from freqguard import AsyncGuard, BackendUnavailable, Decision, Guard, Policy
from freqguard.backends._resp import record_key
from freqguard.engine.plan import PolicyPlan
from freqguard.failure import CircuitOpen
from freqguard.script.calls import Reply, ScriptCall
from freqguard.script.contract import HIT
from tests import servers
from tests.servers import RedisServer

__all__ = [
    "AsyncDriver",
    "Tally",
    "Workers",
    "at_once",
    "flushing",
    "halted",
    "hammering",
    "input_waiting",
    "kill",
    "loopback",
    "owner",
    "pause",
    "restart",
    "resume",
    "stopped",
    "tcp_rows",
]

WAIT_SECONDS = 60.0  # the longest a test waits for a count: only a broken run gets near it


def pause(server: RedisServer) -> None:
    """The server hangs (SIGSTOP): connections are still accepted by the kernel, nothing is
    answered, so every client waits for its socket timeout. Returns once every thread of the
    server has stopped: the signal is delivered asynchronously, and a test that sends while
    the server still runs would see it answer (a flaky drill, on a busy machine)."""
    os.kill(server.process.pid, signal.SIGSTOP)
    servers.wait_for(lambda: halted(server.process.pid), f"the server on {server.port}, stopped")


def halted(pid: int) -> bool:
    """Whether every thread of process ``pid`` is stopped (state T in /proc)."""
    tasks = Path(f"/proc/{pid}/task")
    states = []
    for task in tasks.iterdir():
        try:  # the state follows the parenthesised command name, which may hold spaces
            states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that exited meanwhile
    return bool(states) and all(state in ("T", "t") for state in states)


def tcp_rows() -> list[list[str]]:
    """The kernel's IPv4 TCP sockets (/proc/net/tcp), a row each: local and remote address
    (hex ``IP:PORT``) at 1 and 2, the state at 3, ``tx_queue:rx_queue`` at 4."""
    return [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]


def loopback(port: int) -> str:
    """127.0.0.1:``port`` as /proc/net/tcp writes it."""
    return f"0100007F:{port:04X}"


def input_waiting(server: RedisServer, peer_port: int | None = None) -> bool:
    """Whether a client's connection to ``server`` (the one from ``peer_port``, or any)
    holds data the server has not read: with the server stopped, a call sent sits there.
    An established connection's only (state 01): a listening socket's rx_queue counts the
    connections waiting to be accepted, which would say a call is out before it is."""
    own = loopback(server.port)
    peer = None if peer_port is None else loopback(peer_port)
    return any(
        row[1] == own
        and row[3] == "01"
        and (peer is None or row[2] == peer)
        and int(row[4].split(":")[1], 16) > 0
        for row in tcp_rows()
    )


def resume(server: RedisServer) -> None:
    """The server runs again (SIGCONT); it then executes what its clients had sent. Returns
    once it answers a PING on a connection of its own: a drill's next call then meets a
    server that runs, not one a busy machine has yet to schedule (which cost a call its
    client's 0.2 s timeout once, under the slow suite's load)."""
    os.kill(server.process.pid, signal.SIGCONT)
    servers.wait_for(server.client.ping, f"the server on {server.port}, running again")


@contextmanager
def stopped(server: RedisServer) -> Iterator[None]:
    """:func:`pause` inside the block, :func:`resume` after it, even when the block fails: a
    stopped server would also hang the suite's teardown."""
    pause(server)
    try:
        yield
    finally:
        resume(server)


def kill(server: RedisServer) -> None:
    """SIGKILL, as a crash: no shutdown, nothing saved that was not saved already."""
    server.process.kill()
    server.process.wait()


def restart(server: RedisServer, cluster: list[RedisServer] | None = None) -> None:
    """Start ``server`` again after :func:`kill`, with its command line (port, directory,
    options), and wait until it answers; with ``cluster``, until every node sees the cluster
    whole again (a cluster node finds its slots in its directory's nodes.conf)."""
    assert server.process.poll() is not None, "restart a server that was killed"
    server.process = subprocess.Popen(
        server.process.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    nodes = cluster or []

    def ready() -> bool:
        server.client.ping()
        return all(
            n.client.execute_command("CLUSTER INFO").get("cluster_state") == "ok"  # type: ignore[no-untyped-call]
            for n in nodes
        )

    servers._wait(ready, f"redis-server restarted on port {server.port}")


def owner(nodes: list[RedisServer], policy: Policy, **ctx: str) -> RedisServer:
    """The node of ``nodes`` that holds ``policy``'s record for ``ctx`` (by its slot and the
    cluster's own slot table; the only node when ``nodes`` has one). Ask before a fault."""
    if len(nodes) == 1:
        return nodes[0]
    plan = PolicyPlan(policy, "fg")
    key = record_key(plan.call(plan.texts(ctx), None, 1, HIT))
    slot = key_slot(key)
    for start, end, master, *_ in nodes[0].client.execute_command("CLUSTER SLOTS"):  # type: ignore[no-untyped-call]
        if start <= slot <= end:
            return next(n for n in nodes if n.port == int(master[1]))
    raise AssertionError(f"slot {slot} is served by no node")


def owners_of(nodes: list[RedisServer], policy: Policy, **ctx: str) -> list[RedisServer]:
    """The node holding each of ``policy``'s records for ``ctx``, part by part."""
    plan = PolicyPlan(policy, "fg")
    keys = [record_key(call) for call in plan.calls(plan.texts(ctx), None, 1, HIT)]
    table = nodes[0].client.execute_command("CLUSTER SLOTS")  # type: ignore[no-untyped-call]

    def node(slot: int) -> RedisServer:
        for start, end, master, *_ in table:
            if start <= slot <= end:
                return next(n for n in nodes if n.port == int(master[1]))
        raise AssertionError(f"slot {slot} is served by no node")

    return [node(key_slot(key)) for key in keys]


class Tally:
    """An observer: decisions counted by (source, allowed), store failures by the class of
    their cause (``TimeoutError``, ``ConnectionError``, ``OutOfMemoryError``), thread-safe.
    :meth:`wait` blocks until a condition on the counts holds."""

    def __init__(self) -> None:
        self.decisions: Counter[tuple[str, bool]] = Counter()
        self.failures: Counter[str] = Counter()
        self.skipped = 0  # failures answered by an open circuit, without a store call
        self._changed = threading.Condition()  # reentrant: conditions may read the counts
        self._triggers: list[tuple[Callable[[], bool], Callable[[], None]]] = []

    def decided(self, decision: Decision, context: Mapping[str, str], seconds: float) -> None:
        with self._changed:
            self.decisions[decision.source, decision.allowed] += 1
            self._changed_now()

    def failed(self, error: BackendUnavailable, policy: str, backend: str) -> None:
        if isinstance(error, CircuitOpen):  # told too, but the store was not called
            self.skipped += 1
            return
        with self._changed:
            self.failures[type(error.__cause__).__name__] += 1
            self._changed_now()

    def _changed_now(self) -> None:
        for trigger in [t for t in self._triggers if t[0]()]:
            self._triggers.remove(trigger)
            trigger[1]()
        self._changed.notify_all()

    def when(self, condition: Callable[[], bool], action: Callable[[], None]) -> None:
        """Run ``action`` once, in the thread whose decision first makes ``condition`` hold:
        a fault injected at an exact point of a stream, not when a waiting thread wakes."""
        with self._changed:
            self._triggers.append((condition, action))

    def count(self, source: str, allowed: bool | None = None) -> int:
        """Decisions made by ``source`` (and, when given, with that outcome)."""
        with self._changed:
            return sum(
                n
                for (s, a), n in self.decisions.items()
                if s == source and (allowed is None or a == allowed)
            )

    @property
    def store_failures(self) -> int:
        """Store calls that failed (an open breaker's answers call no store: not counted)."""
        with self._changed:
            return sum(self.failures.values())

    def wait(self, what: str, condition: Callable[[], bool]) -> None:
        """Block until ``condition()`` holds (it is checked whenever a count changes)."""
        with self._changed:
            if not self._changed.wait_for(condition, WAIT_SECONDS):
                raise AssertionError(f"waited {WAIT_SECONDS}s for {what}: {self.decisions}")


class AsyncDriver:
    """An :class:`AsyncGuard` driven from sync code, one operation at a time, on an event
    loop of its own: the sequential fault tests then read alike for both guards."""

    def __init__(self, guard: AsyncGuard) -> None:
        self.guard = guard
        self.breaker = guard.breaker
        self.loop = asyncio.new_event_loop()

    def _run(self, make: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.loop.run_until_complete(make(*args, **kwargs))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return self._run(getattr(self.guard, name))

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.guard.aclose())
        finally:
            self.loop.close()


class Workers:
    """Each target in a thread of its own, all started at once; :meth:`join` raises the
    first error any of them raised."""

    def __init__(self, targets: list[Callable[[], None]]) -> None:
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(t,)) for t in targets]
        for thread in self.threads:
            thread.start()

    def _run(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # raised by join, in the test's thread
            self.errors.append(exc)

    def join(self) -> None:
        for thread in self.threads:
            thread.join()
        if self.errors:
            raise self.errors[0]


Batch = list[dict[str, str]]  # one context: a hit; several: a hit_many


def at_once(
    guard: Guard | AsyncDriver, policy: str, jobs: list[list[Batch]]
) -> list[tuple[dict[str, str], Decision]]:
    """Every job's batches in order, the jobs at once: threads for a Guard, tasks for an
    AsyncGuard. Returns each context with its decision."""
    if isinstance(guard, AsyncDriver):
        inner: Any = guard.guard  # contexts of str: **ctx would bind cost too, for mypy

        async def job(batches: list[Batch]) -> list[Decision]:
            out: list[Decision] = []
            for batch in batches:
                many = len(batch) > 1
                out += (
                    await inner.hit_many(policy, batch)
                    if many
                    else [await inner.hit(policy, **batch[0])]
                )
            return out

        async def main() -> list[list[Decision]]:
            return await asyncio.gather(*(job(batches) for batches in jobs))

        results = guard.loop.run_until_complete(main())
    else:
        sync: Any = guard
        results = [[] for _ in jobs]

        def work(n: int) -> None:
            for batch in jobs[n]:
                many = len(batch) > 1
                results[n] += (
                    sync.hit_many(policy, batch) if many else [sync.hit(policy, **batch[0])]
                )

        Workers([lambda n=n: work(n) for n in range(len(jobs))]).join()  # type: ignore[misc]
    contexts = [ctx for batches in jobs for batch in batches for ctx in batch]
    return list(zip(contexts, [d for out in results for d in out], strict=True))


@contextmanager
def hammering(guard: Guard | AsyncDriver, policy: str, workers: int, **ctx: str) -> Iterator[None]:
    """``workers`` threads (a Guard) or tasks (an AsyncGuard, its loop in a thread) hitting
    ``ctx`` without pause until the block ends; their errors are raised at its end."""
    until = threading.Event()
    targets: list[Callable[[], None]]
    if isinstance(guard, AsyncDriver):
        driver = guard
        inner: Any = guard.guard

        async def task() -> None:
            while not until.is_set():
                await inner.hit(policy, **ctx)
                await asyncio.sleep(0)  # a turn for the others: an open breaker never yields

        async def tasks() -> None:
            await asyncio.gather(*(task() for _ in range(workers)))

        targets = [lambda: driver.loop.run_until_complete(tasks())]
    else:
        sync: Any = guard

        def hits() -> None:
            while not until.is_set():
                sync.hit(policy, **ctx)

        targets = [hits] * workers
    running = Workers(targets)
    try:
        yield
    finally:
        until.set()
        running.join()


@contextmanager
def flushing(nodes: list[RedisServer]) -> Iterator[list[int]]:
    """A thread that flushes the functions of every node, as fast as it can, for the length
    of the block; it has flushed at least once before the block starts. Yields the number of
    flush rounds (filled in when it stops)."""
    clients = [Redis(port=node.port) for node in nodes]
    rounds = [0]
    first, until = threading.Event(), threading.Event()

    def run() -> None:
        while not until.is_set():
            for client in clients:
                client.function_flush()
            rounds[0] += 1
            first.set()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert first.wait(WAIT_SECONDS)  # the storm is on before any call goes out
        yield rounds
    finally:
        until.set()
        thread.join()
        for client in clients:
            client.close()


class Gate:
    """An async backend that passes calls to ``inner`` and holds the ``hold``-th batch (from
    1) until :attr:`release` is set, having first sent it (``sent_first``) or not."""

    def __init__(self, inner: Any, hold: int, *, sent_first: bool = False) -> None:
        self.inner, self.hold, self.sent_first = inner, hold, sent_first
        self.clock = inner.clock
        self.batches = 0
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    async def aexecute(self, call: ScriptCall) -> Reply:
        (reply,) = await self.aexecute_many([call])
        return reply

    async def aexecute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        self.batches += 1
        if self.batches == self.hold and not self.sent_first:
            self.reached.set()
            await self.release.wait()
        replies: list[Reply] = await self.inner.aexecute_many(calls)
        if self.batches == self.hold and self.sent_first:
            self.reached.set()
            await self.release.wait()
        return replies

    async def aclose(self) -> None:
        await self.inner.aclose()
