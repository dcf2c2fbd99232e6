"""Real redis-server processes for the tests: started on free loopback ports in a temporary
directory, stopped afterwards. Never the shared Redis on 6379.

The only waits here are for a real server process to come up (bounded polls); no test sleeps.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
import redis.crc

STARTUP_SECONDS = 20.0


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def state_keys(client: Any) -> list[bytes]:
    """A server's keys but each policy's claim of a bins setting (``backends/_claims.py``:
    ``<prefix>:{*<policy>}:<policy>:bins``), which every client writes beside the state."""
    return [key for key in client.keys("*") if not key.endswith(b":bins")]


def _ports() -> range:
    """The ports this test process picks from: ``FREQGUARD_TEST_PORTS`` (``20000-55000``,
    the default; another for a second checkout's suite run beside this one), and under
    pytest-xdist each worker its own stretch of it (``gw0``, ``gw1``, ...), so two workers
    never race for one port."""
    given = os.environ.get("FREQGUARD_TEST_PORTS", "20000-55000")
    low, _, high = given.partition("-")
    start, end = int(low), int(high)
    if not 1024 <= start < end <= 65_535 - 10_000:  # a cluster node's bus port is port + 10000
        raise ValueError(
            f"FREQGUARD_TEST_PORTS={given!r}: give LOW-HIGH with 1024 <= LOW < HIGH <= 55535"
            " (a cluster node also binds its port + 10000)"
        )
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    width = (end - start) // count
    return range(start + index * width, start + (index + 1) * width)


def free_port() -> int:
    """A free loopback port whose cluster bus port (port + 10000) is free too."""
    rng = random.Random()
    ports = _ports()
    for _ in range(1000):
        port = rng.choice(ports)
        if _bindable(port) and _bindable(port + 10_000):
            return port
    raise RuntimeError("no free port pair found on 127.0.0.1")


def _wait(check: object, what: str) -> None:
    """Until ``check()`` is true, bounded. A server coming up or settling answers errors for a
    while (refused connections, LOADING, TRYAGAIN, and CLUSTERDOWN from a node even after
    every CLUSTER INFO said ok): each means "not yet", so poll again."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        try:
            if check():  # type: ignore[operator]
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up within {STARTUP_SECONDS}s")
        time.sleep(0.05)  # waiting for a real server process, not for test time


class RedisServer:
    """One redis-server process."""

    def __init__(self, workdir: Path, *extra: str, binary: str = "redis-server") -> None:
        if shutil.which(binary) is None:
            raise RuntimeError(f"{binary} is not installed (apt-get install redis-server)")
        self.port = free_port()
        self.dir = workdir / str(self.port)
        self.dir.mkdir(parents=True)
        self._argv = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.dir),
            "--logfile",
            str(self.dir / "redis.log"),
            *extra,
        ]
        # a server started with --requirepass: its own client gives the password
        given = list(extra)
        password = given[given.index("--requirepass") + 1] if "--requirepass" in given else None
        self.client = redis.Redis(port=self.port, socket_timeout=5, password=password)
        self._launch()

    def _launch(self) -> None:
        self.process = subprocess.Popen(
            self._argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _wait(self.client.ping, f"redis-server on port {self.port}")

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, by PID: a crash, with no chance to hand anything over."""
        self.process.kill()
        self.process.wait()
        self.client.connection_pool.disconnect()

    def restart(self, *extra: str) -> None:
        """Start a killed server again, on its port and in its directory (a cluster node
        finds its nodes.conf there), with ``extra`` options this time; it starts empty (no
        persistence)."""
        if not self.alive:
            argv, self._argv = self._argv, [*self._argv, *extra]
            try:
                self._launch()
            finally:
                self._argv = argv

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.client.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


#: A server's options that take Redis Functions away, as stores without them do (Redis
#: before 7.0, Dragonfly, managed services that rename FUNCTION): the backend must call its
#: policy function as EVAL scripts there.
NO_FUNCTIONS = ("--rename-command", "FUNCTION", "", "--rename-command", "FCALL", "")


@contextmanager
def standalone(workdir: Path, *extra: str, binary: str = "redis-server") -> Iterator[RedisServer]:
    server = RedisServer(workdir, *extra, binary=binary)
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def cluster(
    workdir: Path,
    masters: int = 3,
    *,
    replicas: int = 0,
    node_timeout_ms: int = 5000,
    extra: tuple[str, ...] = (),
) -> Iterator[list[RedisServer]]:
    """A real Redis Cluster of ``masters`` primaries, each with ``replicas`` replicas, made
    with ``redis-cli --cluster create``; a node that misses ``node_timeout_ms`` of pings is
    failed over."""
    servers: list[RedisServer] = []
    try:
        for _ in range(masters * (1 + replicas)):
            servers.append(
                RedisServer(
                    workdir,
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    str(node_timeout_ms),
                    *extra,
                )
            )
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{s.port}" for s in servers),
                "--cluster-replicas",
                str(replicas),
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )

        def ready() -> bool:
            infos = [s.client.execute_command("CLUSTER INFO") for s in servers]  # type: ignore[no-untyped-call]
            return all(info.get("cluster_state") == "ok" for info in infos)

        _wait(ready if not replicas else lambda: cluster_settled(servers), "the cluster")
        yield servers
    finally:
        for server in servers:
            server.stop()


# -- high availability: a replicated cluster's topology, and Sentinel ----------------------


def _info(server: RedisServer, section: str) -> dict[str, Any]:
    answer: Any = server.client.info(section)
    return answer  # type: ignore[no-any-return]


def _by_port(servers: list[RedisServer], port: int) -> RedisServer:
    return next(s for s in servers if s.port == port)


def cluster_settled(nodes: list[RedisServer]) -> bool:
    """Every node up and agreeing: all slots served, every node known to every other, and
    every replica's link to its primary up and caught up (so a failover has a replica to
    promote, holding what its primary acknowledged)."""
    if not all(node.alive for node in nodes):
        return False
    for node in nodes:
        info = node.client.execute_command("CLUSTER INFO")  # type: ignore[no-untyped-call]
        if (info.get("cluster_state"), info.get("cluster_known_nodes")) != ("ok", str(len(nodes))):
            return False
        if int(info.get("cluster_slots_ok", 0)) != 16384:
            return False
        replication = _info(node, "replication")
        if replication["role"] == "slave" and replication["master_link_status"] != "up":
            return False
    slots: Any = nodes[0].client.execute_command("CLUSTER SLOTS")  # type: ignore[no-untyped-call]
    return all(
        _caught_up(_by_port(nodes, int(primary[1])), key_in_slot(start))
        for start, _, primary, *_ in slots
    )


def _caught_up(primary: RedisServer, key: str) -> bool:
    """Whether every replica of ``primary`` has a write made to ``key`` now (WAIT, bounded).
    A replica that has just synchronized reports its link up before it receives the writes
    that follow: its master streams them from the replica's first acknowledgement, up to a
    second later, and a crash before that loses them all. The tests measure a crash from a
    caught-up state."""
    replicas = int(_info(primary, "replication")["connected_slaves"])
    primary.client.incr(key)
    acknowledged = primary.client.execute_command("WAIT", replicas, 1000)  # type: ignore[no-untyped-call]
    return bool(acknowledged >= replicas)


@functools.cache
def key_in_slot(slot: int) -> str:
    """A hash tag whose key lives in ``slot``."""
    return next(
        t for t in (f"{{{n}}}" for n in range(10**6)) if redis.crc.key_slot(t.encode()) == slot
    )


class NoOwner(RuntimeError):
    """The node asked sees no primary for the slot: for a moment during a failover."""


def primary_for(nodes: list[RedisServer], key: str) -> RedisServer:
    """The node serving ``key``'s slot now, as a live node sees the cluster.

    Raises:
        NoOwner: the node asked lists no primary for the slot (mid-failover).
    """
    slot = redis.crc.key_slot(key.encode())
    asked = next(node for node in nodes if node.alive)
    slots: Any = asked.client.execute_command("CLUSTER SLOTS")  # type: ignore[no-untyped-call]
    for start, end, primary, *_ in slots:
        if start <= slot <= end:
            return _by_port(nodes, int(primary[1]))
    raise NoOwner(f"no node serves slot {slot}")


def replica_of(nodes: list[RedisServer], primary: RedisServer) -> RedisServer:
    """One replica of ``primary``, as ``primary`` sees its replicas."""
    replication = _info(primary, "replication")
    return _by_port(nodes, int(replication["slave0"]["port"]))


def heal_cluster(nodes: list[RedisServer]) -> None:
    """Start killed nodes again (each rejoins as a replica of whoever took its slots) and wait
    until the cluster has settled."""
    for node in nodes:
        node.restart()
    _wait(lambda: cluster_settled(nodes), "the healed cluster")


def wait_for(check: Callable[[], object], what: str) -> None:
    """Until ``check()`` is true and raises no redis error (bounded, as a server starts)."""
    _wait(check, what)


SERVICE = "fgha"  # the name the sentinels monitor the master under


class SentinelServer(RedisServer):
    """One Sentinel: ``redis-server sentinel.conf --sentinel``, the same binary as
    redis-server (Debian's redis-sentinel package is a symlink to it plus a system service
    on 26379 that watches 6379: not needed, and not ours to start)."""

    def __init__(
        self, workdir: Path, master_port: int, quorum: int, down_after_ms: int
    ) -> None:  # no super().__init__(): a sentinel takes a config file, not those flags
        self.port = free_port()
        self.dir = workdir / f"sentinel-{self.port}"
        self.dir.mkdir(parents=True)
        conf = self.dir / "sentinel.conf"  # a sentinel rewrites its config: its own file
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
            f"logfile {self.dir / 'sentinel.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {master_port} {quorum}\n"
            f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}\n"
            f"sentinel failover-timeout {SERVICE} 10000\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        self._argv = ["redis-server", str(conf), "--sentinel"]
        self.client = redis.Redis(port=self.port, socket_timeout=5)
        self._launch()


class SentinelGroup:
    """A master, its replicas and the sentinels that watch them, on free loopback ports."""

    def __init__(self, data: list[RedisServer], sentinels: list[SentinelServer]) -> None:
        self.data = data
        self.sentinels = sentinels

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}"

    def master(self) -> RedisServer:
        """The data node the sentinels name as the master now."""
        answer: Any = self.sentinels[0].client.sentinel_get_master_addr_by_name(SERVICE)
        _, port = answer
        return _by_port(self.data, int(port))

    def settled(self) -> bool:
        """Every process up; every sentinel names the same master, sees the other sentinels
        and every replica, and is not failing over; every replica's link is up."""
        if not all(s.alive for s in (*self.data, *self.sentinels)):
            return False
        ports = set()
        for sentinel in self.sentinels:
            state: Any = sentinel.client.sentinel_master(SERVICE)
            if state["flags"] != "master":  # not down, not failing over
                return False
            if state["num-other-sentinels"] != len(self.sentinels) - 1:
                return False
            replicas: Any = sentinel.client.sentinel_slaves(SERVICE)
            if len(replicas) != len(self.data) - 1 or any(r["flags"] != "slave" for r in replicas):
                return False
            ports.add(state["port"])
        if len(ports) != 1:
            return False
        master = _by_port(self.data, ports.pop())
        replication = _info(master, "replication")
        return (
            replication["role"] == "master"
            and all(
                _info(r, "replication").get("master_link_status") == "up"
                and _info(r, "replication").get("master_port") == master.port
                for r in self.data
                if r is not master
            )
            and _caught_up(master, "{fg-heal}")
        )

    def heal(self) -> None:
        """Start killed data nodes again, as replicas of the current master (the sentinels
        would convert a returning old master too, but only after it has reported its stale
        role for several seconds), and wait until the group has settled."""
        master = self.master()
        for server in self.data:
            server.restart("--replicaof", "127.0.0.1", str(master.port))
        _wait(self.settled, "the sentinel group")


@contextmanager
def sentinel_group(
    workdir: Path, replicas: int = 2, sentinels: int = 3, down_after_ms: int = 1000
) -> Iterator[SentinelGroup]:
    """A master with ``replicas`` replicas, watched by ``sentinels`` sentinels (a majority
    is the quorum) that fail it over after ``down_after_ms`` without an answer."""
    started: list[RedisServer] = []
    try:
        master = RedisServer(workdir)
        started.append(master)
        for _ in range(replicas):
            started.append(RedisServer(workdir, "--replicaof", "127.0.0.1", str(master.port)))
        watchers = []
        for _ in range(sentinels):
            watchers.append(SentinelServer(workdir, master.port, sentinels // 2 + 1, down_after_ms))
            started.append(watchers[-1])
        group = SentinelGroup(started[: 1 + replicas], watchers)
        _wait(group.settled, "the sentinel group")
        yield group
    finally:
        for server in started:
            server.stop()
