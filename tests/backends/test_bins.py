"""Records shared in bins (``RedisBackend(bins=N)``): the same decisions as the memory
backend and as a hash per record, every encoding class of a binned field exercised, on a
Cluster too, a slot being migrated among them.

The differential tests (tests/conformance/test_differential.py) run random sequences on a
binned backend beside the others; here, what they cannot reach: hours and days between
hits (every head width), states past 255 bytes. How long records and bins live (stale
records swept on the server's time only, the bin's TTL the longest of its records', records
refused or dropped as a hash's are) is in ``test_bin_lifetimes.py``; the option checked
where it is given, and the server's listpack limits, in ``test_bin_options.py``. What they
share is in ``bin_rig.py``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

import pytest
from redis.cluster import RedisCluster
from redis.crc import key_slot

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule, Strategy
from freqguard.backends.redis import RedisBackend
from freqguard.script.contract import BIN_ENTRY_HEADS, BLOB_HEAD, FIELD_HEAD, widths
from freqguard.script.keys import raw_digest
from tests.backends.bin_rig import P
from tests.conformance.test_differential import _assert_alike
from tests.conftest import START, flush
from tests.servers import RedisServer, cluster, state_keys

DAY = 86_400_000_000


def u7(raw: bytes) -> int:
    return int.from_bytes(raw, "big")


POOL = [{"u": "a", "c": "x"}, {"u": "b", "c": "y"}, {"u": "a", "c": "z"}]


def _varint(blob: bytes, at: int) -> tuple[int, int]:
    n, shift = 0, 0
    while True:
        byte = blob[at]
        at += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return n, at


def _entry_flag(flag: int) -> tuple[int, int]:
    """An entry's first byte as the Lua's entry_flag reads it: the name's length and the
    entry's kind (a 2-, 6-, 10- or 14-byte name below 24; a 3- or 11-byte one from 24)."""
    if flag < 24:
        return 2 + 4 * (flag % 4), flag // 4
    return 3 + 8 * ((flag - 24) % 2), (flag - 24) // 2


def _kinds(blob: bytes) -> list[int]:
    """The kind of each state field of a binned record (see the Lua's Bins)."""
    at = sum(widths(BLOB_HEAD))
    _, at = _varint(blob, at)
    _, at = _varint(blob, at)
    limits, at = _varint(blob, at)
    at += limits * 34
    kinds = []
    while at < len(blob):
        name, kind = _entry_flag(blob[at])
        at += 1 + name
        head = sum(widths(">" + BIN_ENTRY_HEADS[kind // 2]))
        at += head
        length = blob[at] if kind % 2 == 0 else int.from_bytes(blob[at : at + 4], "big")
        at += (1 if kind % 2 == 0 else 4) + length
        kinds.append(kind)
    assert at == len(blob)
    return kinds


def _fields(blob: bytes) -> dict[bytes, tuple[int, int, bytes]]:
    """A binned record's state fields, decoded: name -> (expiry, latest, state)."""
    at = sum(widths(BLOB_HEAD))
    for _ in range(2):
        _, at = _varint(blob, at)
    limits, at = _varint(blob, at)
    at += limits * 34
    out = {}
    while at < len(blob):
        size, kind = _entry_flag(blob[at])
        name = blob[at + 1 : at + 1 + size]
        at += 1 + size
        numbers = []
        for width in widths(">" + BIN_ENTRY_HEADS[kind // 2]):
            numbers.append(int.from_bytes(blob[at : at + width], "big"))
            at += width
        expiry, written = numbers
        if kind // 2 > 0:  # a span
            written = expiry - written
        length = blob[at] if kind % 2 == 0 else int.from_bytes(blob[at : at + 4], "big")
        at += 1 if kind % 2 == 0 else 4
        out[name] = (expiry, written, blob[at : at + length])
        at += length
    assert at == len(blob)
    return out


def _records(client: Any) -> dict[bytes, bytes]:
    """Every binned record on the server (db 1), by its id."""
    out: dict[bytes, bytes] = {}
    for key in state_keys(client):
        for name, value in client.hgetall(key).items():
            if name:
                out[name] = value
    return out


def _mixed() -> Policy:
    """Spans of every width: a minute (4 bytes), two hours (5), thirty days (in full); a log
    of 120 entries (a state past 255 bytes); bins and windows beside it."""
    return Policy(
        "p",
        Rule("5 per 1 minute", by="u"),
        Rule("2 per 4 hours", by=("u", "c"), strategy=Strategy.GCRA),
        Rule("3 per 30 days", by="u", strategy=Strategy.TOKEN_BUCKET),
        Rule("120 per 1 hour", by=("u", "c"), name="log"),
        Rule("4 per 1 day", by="u", strategy=Strategy.FIXED_WINDOW),
    )


def test_every_field_kind_decides_and_stores_as_a_hash_does(
    redis_server: RedisServer,
    redis_backend: RedisBackend,
    binned_backend: RedisBackend,
    db1: Any,
) -> None:
    """Hits a µs, seconds, hours and weeks apart, spans of every width (past 5 bytes too),
    and refunds: identical to memory, every kind of field written, and each field, decoded,
    the numbers and state a record's own hash holds after the same calls (entries a call
    did not change are copied as they were: each must still read back right)."""
    seen: Counter[int] = Counter()
    ops: list[tuple[str, object, object]] = []
    for step in (1, 20_000_000, 3_600_000_000, 7_200_000_000, 13 * DAY, 1):
        ops += [("advance", 0, step), ("hit", 0, 1), ("advance", 0, 3), ("hit", 2, 1)]
        ops += [("refund", 0, 1)]
        ops += [("hit", 1, 2), ("advance", 0, 5), ("many", [0, 1, 2], 1), ("peek", 2, 1)]
    head = sum(widths(FIELD_HEAD))
    for end in range(4, len(ops) + 1, 4):  # every prefix: the kinds each one leaves
        flush([redis_server])
        backends = [MemoryBackend(), redis_backend, binned_backend]
        _assert_alike(backends, _mixed(), POOL, ops[:end], int(START))
        records = _records(db1)
        for u in ("a", "b"):  # each field holds what the record's own hash holds
            blob = records.get(raw_digest(u))
            stored = cast(dict[bytes, bytes], redis_server.client.hgetall(f"fg:{{{u}}}:p"))
            if blob is None:
                assert not stored
                continue
            seen.update(_kinds(blob))
            assert _fields(blob) == {
                name: (u7(value[:7]), u7(value[7:14]), value[head:])
                for name, value in stored.items()
                if name
            }
    heads = {kind // 2 for kind in seen}
    assert heads == set(range(len(BIN_ENTRY_HEADS))), sorted(heads)


def test_a_log_past_255_bytes_has_its_length_in_four(
    redis_server: RedisServer, binned_backend: RedisBackend, db1: Any
) -> None:
    ops = [("hit", 0, 1), ("advance", 0, 1_000)] * 130 + [("refund", 0, 3), ("hit", 0, 1)]
    flush([redis_server])
    gcra = Rule("500 per 1 second", by="u", strategy=Strategy.GCRA)
    policy = Policy("p", Rule("120 per 1 hour", by="u"), gcra)
    _assert_alike([MemoryBackend(), binned_backend], policy, POOL, ops, int(START))
    (blob,) = _records(db1).values()
    assert sorted(kind % 2 for kind in _kinds(blob)) == [0, 1]  # the bin's, the log's


def test_bins_on_a_cluster_decide_as_the_memory_backend(
    redis_cluster: list[RedisServer],
) -> None:
    """Each call goes to its bin's slot; records of one bin share it."""
    flush(redis_cluster)
    client = RedisCluster(host="127.0.0.1", port=redis_cluster[0].port, socket_timeout=5)
    backend = RedisBackend(client, bins=16)
    pool: list[dict[str, Any]] = [{"u": f"r{n}", "c": f"c{n % 3}"} for n in range(40)]
    ops: list[tuple[str, object, object]] = []
    for n in range(120):
        ops += [("hit", n % 3, 1), ("advance", 0, 7_000), ("many", [n % 3, 2], 1)]
    policy = Policy("p", Rule("3 per 1 second", by="u"), Rule("2 per 1 second", by=("u", "c")))
    _assert_alike([MemoryBackend(), backend], policy, pool[:3], ops, int(START))
    guard = Guard(backend, [policy])
    for context in pool:
        assert guard.hit("p", **context).allowed
    nodes: list[Any] = [node.client for node in redis_cluster]
    bins = [key for node in nodes for key in state_keys(node)]
    assert 3 <= len(bins) <= 16
    assert all(key.startswith(b"fg:{#") for key in bins)
    assert sum(node.hlen(key) - 1 for node in nodes for key in state_keys(node)) == 40
    backend.close()


@pytest.mark.slow  # ~4 s: a cluster of its own, a slot migrated
def test_a_binned_call_on_a_slot_being_migrated_is_served(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Found by review: the record's id went as a second key, one that never exists; while
    its slot migrates, a node that has the bin but not that key answers TRYAGAIN to every
    call. The id is no key: the call is served where the bin is, and follows it when it
    has moved."""
    with cluster(tmp_path_factory.mktemp("bin-migrate")) as nodes:
        client = RedisCluster(host="127.0.0.1", port=nodes[0].port, socket_timeout=5)
        backend = RedisBackend(client, bins=1)
        clock = ManualClock(START)
        guard = Guard(backend, [P], clock=clock)
        reference = Guard(MemoryBackend(), [P], clock=clock)
        assert guard.hit("p", u="x") == reference.hit("p", u="x")
        (bin_key,) = [key for node in nodes for key in state_keys(node.client)]
        slot = key_slot(bin_key)
        ids = {node.port: _admin(node, "CLUSTER", "MYID").decode() for node in nodes}
        source = next(n for n in nodes if _admin(n, "CLUSTER", "COUNTKEYSINSLOT", slot))
        target = next(n for n in nodes if n is not source)
        _admin(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source.port])
        _admin(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target.port])
        assert guard.hit("p", u="x") == reference.hit("p", u="x")  # the bin is still here
        _admin(source, "MIGRATE", "127.0.0.1", target.port, bin_key, 0, 5000)
        assert guard.hit("p", u="x") == reference.hit("p", u="x")  # ASK: it is there now
        for node in nodes:
            _admin(node, "CLUSTER", "SETSLOT", slot, "NODE", ids[target.port])
        assert guard.hit("p", u="x") == reference.hit("p", u="x")  # MOVED
        guard.close()


def _admin(node: RedisServer, *args: object) -> Any:
    return node.client.execute_command(*args)  # type: ignore[no-untyped-call]
