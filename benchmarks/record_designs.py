"""Bytes per recipient under other ways of storing the same records (issue 23, item 1).

    python -m benchmarks.record_designs [--messages 200000] [--per-bin 64]

``benchmarks.record_bytes`` says where a recipient's bytes go in today's layout (2): over
half of them are Redis's own (the key's dict entries, objects, expiry entry, the listpack's
framing). This benchmark asks what other physical designs would cost, before one is built.
It replays the seeded SMS stream (Zipf over 1,000,000 ids) through the four-rule policy on a
real redis-server, on the server's time, with each strategy; dumps every record it left
(fields and TTL); and stores that same content again, in a flushed server, each way below,
measuring ``used_memory`` growth per recipient:

``this release, hash``
    the records as freqguard writes them (states short where they fit): one hash per
    recipient (a check: it should match ``record_bytes``);
``this release, string``
    the same fields, packed into one string per recipient (a varint length before each
    name and value), with the same TTL;
``compact, hash`` / ``compact, string``
    a compact encoding of the same content: the latest write once in the meta field instead
    of in every field's head; each field's expiry as a zigzag varint delta from the record's
    expiry; counts and the bins' ``back`` as varints (``back`` is 0 until a refund);
    ``born`` as a varint delta from the time it belongs to. Nothing is dropped: every
    number the function reads is still there, exactly;
``this release, binned`` / ``compact, binned``
    recipients hashed into shared hashes of about ``--per-bin`` recipients each (field:
    an 8-byte digest of the recipient, value: its packed string), the bin's TTL the
    longest of its recipients'. Redis 7.0 has no TTL per field, so the function would have
    to delete a stale recipient itself (when it touches its bin), and the operator must
    raise ``hash-max-listpack-value`` (to 512 here) so that bins stay listpacks: one
    recipient whose record passes it turns its whole bin into a hashtable;
``compact, bins that size themselves``
    under the server's default listpack limits (64-byte values, 128 fields a hash): each
    recipient's compact record cut into pieces of at most 64 bytes, in the bins extendible
    hashing leaves (one to start, a bin past 128 fields split by the digest's next bit); it
    prints how many bins stayed listpacks.

The compact sizes are an encoding applied here to the dumped values (the function does not
write it yet); every ``used_memory`` figure is the real server's.
"""

from __future__ import annotations

import argparse
import hashlib
import struct
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import cast

from redis import Redis

from benchmarks.redis_sms import sms_policy
from benchmarks.workload import sms_stream
from freqguard import Guard, Strategy
from freqguard.backends.redis import RedisBackend
from freqguard.script.contract import FIELD_HEAD, RECORD_META, widths
from freqguard.script.strategies import TWINS
from tests.servers import RedisServer, standalone

HEAD = sum(widths(FIELD_HEAD))  # expiry, latest: 7 bytes each
META = sum(widths(RECORD_META))  # stamp, expiry, fields, prune_at

Record = tuple[bytes, dict[bytes, bytes], int]  # key, fields, TTL (ms)


def varint(n: int) -> bytes:
    """``n`` >= 0 in 7-bit groups, low first, the high bit set on all but the last."""
    assert n >= 0, n
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def zigzag(n: int) -> bytes:
    """A signed ``n`` as a varint: 0, -1, 1, -2, ... as 0, 1, 2, 3, ..."""
    return varint(2 * n if n >= 0 else -2 * n - 1)


def u7(raw: bytes, at: int) -> int:
    return int.from_bytes(raw[at : at + 7], "big")


def compact_state(strategy: Strategy, state: bytes) -> bytes:
    """One state's numbers (read by its twin, from the short or the full form), the same
    ones, in varints where they are small (see the module's doc)."""
    if strategy is Strategy.SLIDING_LOG:  # header (width, base), entries: already tight
        return state
    numbers: tuple[int, ...] = TWINS[strategy].decode(state)
    if strategy is Strategy.GCRA:
        tat, back, born = numbers
        return tat.to_bytes(7, "big") + zigzag(tat - born) + varint(back)
    if strategy is Strategy.TOKEN_BUCKET:
        tokens, last, back, born = numbers
        return varint(tokens) + last.to_bytes(7, "big") + zigzag(last - born) + varint(back)
    if strategy is Strategy.FIXED_WINDOW:
        start, count, born = numbers
        return start.to_bytes(7, "big") + varint(count) + zigzag(born - start)
    raise ValueError(f"no compact form for {strategy}")


def compact(
    strategy: Strategy, fields: dict[bytes, bytes], dense: bool = False
) -> dict[bytes, bytes]:
    """The record's fields, compact: the latest write moves to the meta field (once), each
    field's head becomes its expiry's delta from the record's. ``dense``: and every time of
    a state a delta from the record's latest write, the record's expiry too (lossless:
    every µs kept)."""
    meta = fields[b""]
    stamp, expiry, count, prune_at = struct.unpack(">BQII", meta[:1] + b"\0" + meta[1:META])
    latest = max(u7(value, 7) for name, value in fields.items() if name)
    times = (
        latest.to_bytes(7, "big") + zigzag(expiry - latest)
        if dense
        else expiry.to_bytes(7, "big") + latest.to_bytes(7, "big")
    )
    out = {b"": bytes([stamp]) + times + varint(count) + varint(prune_at) + meta[META:]}
    for name, value in fields.items():
        if name:
            head = zigzag(expiry - u7(value, 0))
            state = value[HEAD:]
            shaped = (
                dense_state(strategy, state, latest) if dense else compact_state(strategy, state)
            )
            out[name] = head + shaped
    return out


def dense_state(strategy: Strategy, state: bytes, latest: int) -> bytes:
    """One state's numbers, every time a zigzag varint from the record's latest write (a
    state's times are near it: µs deltas of seconds to a day take 4 to 6 bytes, not 7)."""
    if strategy is Strategy.SLIDING_LOG:  # (width, base), then entries of that width
        base = int.from_bytes(state[1:8], "big")
        return state[:1] + zigzag(latest - base) + state[8:]
    numbers: tuple[int, ...] = TWINS[strategy].decode(state)
    if strategy is Strategy.GCRA:
        tat, back, born = numbers
        return zigzag(tat - latest) + zigzag(tat - born) + varint(back)
    if strategy is Strategy.TOKEN_BUCKET:
        tokens, last, back, born = numbers
        return varint(tokens) + zigzag(latest - last) + zigzag(last - born) + varint(back)
    if strategy is Strategy.FIXED_WINDOW:
        start, count, born = numbers
        return zigzag(latest - start) + varint(count) + zigzag(born - start)
    raise ValueError(f"no dense form for {strategy}")


def packed(fields: dict[bytes, bytes]) -> bytes:
    """A record's fields as one string: varint length, name, varint length, value."""
    return b"".join(
        varint(len(name)) + name + varint(len(value)) + value for name, value in fields.items()
    )


def replay(server: RedisServer, stream: list[tuple[str, str]], strategy: Strategy) -> list[Record]:
    client = server.client
    client.flushall()
    guard = Guard(RedisBackend(Redis(port=server.port)), [sms_policy(strategy)])
    guard.hit("sms", recipient="warm", content="up")  # the function loaded
    client.delete(*client.keys("*"))
    for recipient, content in stream:
        guard.hit("sms", recipient=recipient, content=content)
    guard.close()
    raw = Redis(port=server.port)  # bytes in, bytes out
    records = [(key, raw.hgetall(key), int(raw.pttl(key))) for key in raw.keys("*")]
    raw.close()
    return cast(list[Record], records)


def stored(server: RedisServer, write: Callable[[Redis], None], listpack: int) -> int:
    """``used_memory`` growth while ``write`` stores a design, in a flushed server."""
    client = server.client
    client.flushall()
    client.config_set("hash-max-listpack-value", listpack)
    before = int(client.info("memory")["used_memory"])
    write(client)
    grown = int(client.info("memory")["used_memory"]) - before
    client.flushall()
    return grown


def in_batches(client: Redis, commands: Iterable[tuple[object, ...]]) -> None:
    pipe = client.pipeline(transaction=False)
    for i, command in enumerate(commands, 1):
        pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        if i % 1000 == 0:
            pipe.execute()
    pipe.execute()


Shape = Callable[[dict[bytes, bytes]], dict[bytes, bytes]]
Write = Callable[[Redis], None]


def as_hashes(records: list[Record], shape: Shape) -> Write:
    def write(client: Redis) -> None:
        def commands() -> Iterable[tuple[object, ...]]:
            for key, fields, ttl in records:
                flat = [part for item in shape(fields).items() for part in item]
                yield ("HSET", key, *flat)
                yield ("PEXPIRE", key, ttl)

        in_batches(client, commands())

    return write


def as_strings(records: list[Record], shape: Shape) -> Write:
    def write(client: Redis) -> None:
        in_batches(client, (("SET", k, packed(shape(f)), "PX", t) for k, f, t in records))

    return write


def as_bins(records: list[Record], shape: Shape, size: int) -> Write:
    bins = max(1, len(records) // size)

    def write(client: Redis) -> None:
        ttls: dict[int, int] = {}

        def commands() -> Iterable[tuple[object, ...]]:
            for key, fields, ttl in records:
                digest = hashlib.blake2b(key, digest_size=8).digest()
                index = int.from_bytes(digest[:4], "big") % bins
                ttls[index] = max(ttls.get(index, 0), ttl)
                yield ("HSET", b"fg:sms:%d" % index, digest, packed(shape(fields)))
            for index, ttl in ttls.items():
                yield ("PEXPIRE", b"fg:sms:%d" % index, ttl)

        in_batches(client, commands())

    return write


def as_split_bins(records: list[Record], shape: Shape) -> Write:
    """Bins that size themselves, as a layout could under the server's default listpack
    limits (``hash-max-listpack-value 64``, ``-entries 128``): each recipient's packed
    record cut into pieces of at most 64 bytes (field: its 8-byte digest and the piece's
    index), in the bins extendible hashing leaves whatever the order of arrival: one bin
    to start, a bin past 128 fields split in two by the digest's next bit until none is.
    Only the bytes are measured: the function that would find a bin's depth, split it,
    read a record in pieces and expire a recipient inside a bin is not built."""
    most, value = 128, 64
    pieces = []
    for key, fields, ttl in records:
        digest = hashlib.blake2b(key, digest_size=8).digest()
        blob = packed(shape(fields))
        cut = [blob[at : at + value] for at in range(0, len(blob), value)]
        pieces.append((int.from_bytes(digest, "big"), digest, cut, ttl))
    total = sum(len(cut) for _, _, cut, _ in pieces)
    bins: list[tuple[bytes, list[tuple[int, bytes, list[bytes], int]]]] = []

    def place(group: list[tuple[int, bytes, list[bytes], int]], bits: int, prefix: int) -> None:
        if sum(len(cut) for _, _, cut, _ in group) > most and bits < 64:
            for half in (0, 1):
                mine = [p for p in group if (p[0] >> (63 - bits)) & 1 == half]
                place(mine, bits + 1, prefix * 2 + half)
        elif group:
            bins.append((b"fg:sms:%d:%d" % (bits, prefix), group))

    place(pieces, 0, 0)

    def write(client: Redis) -> None:
        def commands() -> Iterable[tuple[object, ...]]:
            for name, group in bins:
                flat = [
                    part
                    for _, digest, cut, _ in group
                    for index, chunk in enumerate(cut)
                    for part in (digest + bytes([index]), chunk)
                ]
                yield ("HSET", name, *flat)
                yield ("PEXPIRE", name, max(ttl for *_, ttl in group))

        in_batches(client, commands())
        kept = sum(client.object("encoding", name) in ("listpack", b"listpack") for name, _ in bins)
        print(f"bins that size themselves: {len(bins)} bins, {total} fields, {kept} listpacks")

    return write


STRATEGIES = [Strategy.SLIDING_LOG, Strategy.FIXED_WINDOW, Strategy.TOKEN_BUCKET, Strategy.GCRA]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--per-bin", type=int, default=64)
    args = parser.parse_args()
    stream = sms_stream(args.messages)
    recipients = len({r for r, _ in stream})
    rows: dict[str, list[float]] = {}
    content: dict[str, list[float]] = {"this release": [], "compact": [], "dense": []}
    with tempfile.TemporaryDirectory() as tmp, standalone(Path(tmp)) as server:
        for strategy in STRATEGIES:
            records = replay(server, stream, strategy)
            n = len(records)

            def same(fields: dict[bytes, bytes]) -> dict[bytes, bytes]:
                return fields

            def tight(fields: dict[bytes, bytes], s: Strategy = strategy) -> dict[bytes, bytes]:
                return compact(s, fields)

            def denser(fields: dict[bytes, bytes], s: Strategy = strategy) -> dict[bytes, bytes]:
                return compact(s, fields, dense=True)

            for label, shape in (("this release", same), ("compact", tight), ("dense", denser)):
                held = sum(len(k) + len(packed(shape(f))) for k, f, _ in records)
                content[label].append(held / n)
            designs = [
                ("this release, hash per recipient", as_hashes(records, same), 64),
                ("this release, string per recipient", as_strings(records, same), 64),
                ("compact, hash per recipient", as_hashes(records, tight), 64),
                ("compact, string per recipient", as_strings(records, tight), 64),
                ("dense, string per recipient", as_strings(records, denser), 64),
                (
                    f"this release, binned ({args.per_bin} a hash)",
                    as_bins(records, same, args.per_bin),
                    512,
                ),
                (
                    f"compact, binned ({args.per_bin} a hash)",
                    as_bins(records, tight, args.per_bin),
                    512,
                ),
                (
                    "compact, bins that size themselves (default listpack limits)",
                    as_split_bins(records, tight),
                    64,
                ),
            ]
            for label, write, listpack in designs:
                rows.setdefault(label, []).append(stored(server, write, listpack) / n)
    print(f"{args.messages} messages, {recipients} recipients; bytes per recipient\n")
    print("| design | " + " | ".join(s.value for s in STRATEGIES) + " |")
    print("|---|" + "---:|" * len(STRATEGIES))
    for label, values in content.items():
        name = f"what a record holds, {label} (key + fields, packed)"
        print(f"| {name} | " + " | ".join(f"{v:.1f}" for v in values) + " |")
    for label, values in rows.items():
        print(f"| {label} | " + " | ".join(f"{v:.1f}" for v in values) + " |")


if __name__ == "__main__":
    main()
