"""FCALLs in the wire protocol (RESP), framed here rather than by redis-py.

redis-py's packer encodes and frames every argument on every call; only the record, time,
cost, mode and fields change between calls of one plan, so the rest is framed once per plan
(:func:`encode`). :func:`function_args` gives the same call as arguments for redis-py's
command API, the long way that follows cluster redirections. No I/O here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any

from redis.client import NEVER_DECODE

from freqguard.backends._library import FUNCTIONS, Library
from freqguard.errors import ConfigError, shown
from freqguard.script.calls import ScriptCall
from freqguard.script.contract import ARGV, BIN_RECORD, MARK_SEPARATOR, grows, widths
from freqguard.script.strategies.base import Mark

__all__ = [
    "ASKING",
    "CHUNK",
    "MAX_FRAMES",
    "MAX_WAIT_REPLICAS",
    "RAW",
    "bulk",
    "call_keys",
    "check_bins",
    "check_client",
    "chunks",
    "encode",
    "function_args",
    "record_key",
    "refuse_renamed",
    "wait_frame",
]

#: ``execute_command``'s option to leave a reply undecoded: the script's replies are binary,
#: and clients made with ``decode_responses=True`` must read them alike
RAW = {NEVER_DECODE: True}
CHUNK = 16  # calls per write when a batch is streamed (see Lane.stream)
# Per plan text: the wire frames of FCALL's constant arguments (see encode), the last one
# naming FUNCTION_NOGROW; all forgotten past MAX_FRAMES texts (tiers, zones and days each
# make texts of their own), as the Lua forgets its parsed specs past as many.
_FRAMES: dict[str, tuple[bytes, bytes, bytes]] = {}
#: The most spec texts whose frames are kept at once.
MAX_FRAMES = 1024

# FCALL's frame, its arguments in the order the contract gives them (contract.ARGV): each
# argument's RESP frame, and which of (len(now), now, len(cost), cost, mode, the specs'
# frame) it takes; the function's head and the keys' frames before them, the fields after.
_PIECES = {
    "now": (b"$%d\r\n%s\r\n", (2, 3)),
    "cost": (b"$%d\r\n%s\r\n", (4, 5)),
    "mode": (b"$1\r\n%d\r\n", (6,)),
    "specs": (b"%s", (7,)),
}
_FORMAT = b"%s%s" + b"".join([_PIECES[name][0] for name in ARGV]) + b"%s"
_ORDER = (0, 1, *[i for name in ARGV for i in _PIECES[name][1]], 8)
# the values are built in the contract's order as it is today; another order is picked out
_IN_ORDER = None if tuple(range(9)) == _ORDER else itemgetter(*_ORDER)


_BINS_BYTES = sum(widths(BIN_RECORD))  # a binned call's setting, after the record's id


def call_keys(call: ScriptCall) -> tuple[bytes, bytes | None]:
    """The one record a call touches (every key of one call is a field of one record: same
    partition, same policy), its key; or, when records share bins, the bin's key and
    the record's id in it (see ``KeyLayout.bin``) and the client's bins setting
    (``contract.BIN_RECORD``), which go as ARGV[1] of the binned functions, not as a key.
    The key is the call's slot."""
    layout = call.part.layouts[0]
    if layout.bins:
        key, rid = layout.bin(call.texts)
        return key, rid + layout.bins.to_bytes(_BINS_BYTES, "big")
    return layout.record(call.texts).encode("utf-8", "surrogatepass"), None


def record_key(call: ScriptCall) -> bytes:
    """The key of the one record (or bin) a call touches (its slot's, on a cluster)."""
    return call_keys(call)[0]


def function_args(call: ScriptCall, found: Library = FUNCTIONS) -> tuple[Any, ...]:
    """FCALL's (or EVALSHA's) arguments, for redis-py's ``execute_command``: the entry point
    (a HIT that consumes may grow what is stored; every other call goes to the variant Redis
    runs even when out of memory, see FUNCTION_NOGROW; each in its binned form for a
    record in a bin), numkeys, the key, the record's id in its bin if any
    (:func:`call_keys`), then ARGV (see the script header)."""
    key, rid = call_keys(call)
    texts = call.texts
    fields = [layout.field(texts) for layout in call.part.layouts]
    values = {
        "now": "" if call.now is None else call.now,
        "cost": call.cost,
        "mode": call.mode,
        "specs": call.part.spec_text,
    }
    argv = [values[name] for name in ARGV]
    head = (key,) if rid is None else (key, rid)
    entry = found.name(grows(call.mode, call.cost), rid is not None)
    return (found.command.decode(), entry, 1, *head, *argv, *fields, *_marks(call))


def _marks(call: ScriptCall) -> tuple[bytes, ...]:
    """What follows the fields (see the script header): a refund's marks, one per state, or
    a LIMIT call's change; nothing for other calls."""
    if call.marks is None:
        return () if call.change is None else (call.change.encode(),)
    return tuple([_mark(m) for m in call.marks])


def _mark(mark: Mark | None) -> bytes:
    if mark is None:
        return b""
    if isinstance(mark, tuple):  # a bucket's: tat, back, born, interval
        return _SEPARATOR.join([b"%d" % v for v in mark])
    return b"%d" % mark


_SEPARATOR = MARK_SEPARATOR.encode()


def bulk(data: bytes) -> bytes:
    """One RESP bulk string."""
    return b"$%d\r\n%s\r\n" % (len(data), data)


def _frame(
    found: Library, text: str, binned: bool, states: int, marks: tuple[bytes, ...]
) -> tuple[bytes, bytes, bytes]:
    """FCALL's (or EVALSHA's) constant frames for a plan: the head naming its entry point,
    the plan text, and the head naming its NOGROW variant; kept per plan (and binned or not,
    and per library), but for a refund's, which counts its marks."""
    # FCALL, function, numkeys, key, the record's id in its bin, ARGV...
    count = 4 + binned + len(ARGV) + states + len(marks)
    command = bulk(found.command)
    grow, keep = found.name(True, binned).encode(), found.name(False, binned).encode()
    head = b"*%d\r\n%s%s%s" % (count, command, bulk(grow), bulk(b"1"))
    nogrow = b"*%d\r\n%s%s%s" % (count, command, bulk(keep), bulk(b"1"))
    frame = (head, bulk(text.encode()), nogrow)
    if not marks:
        if len(_FRAMES) >= MAX_FRAMES:
            _FRAMES.clear()
        _FRAMES[_cached(found, text, binned)] = frame
    return frame


def _cached(found: Library, text: str, binned: bool) -> str:
    """A plan's key in the frames kept (see :func:`_frame`)."""
    if found is FUNCTIONS:
        return "#" + text if binned else text
    return ("$#" if binned else "$") + text


def encode(call: ScriptCall, found: Library = FUNCTIONS) -> tuple[bytes, bytes]:
    """FCALL (or, with the scripts, EVALSHA) in the wire protocol (RESP), and the record
    key it touches (its slot's)."""
    text = call.part.spec_text
    key, rid = call_keys(call)
    binned = rid is not None
    frame = _FRAMES.get(_cached(found, text, binned))
    marks = _marks(call)
    if frame is None or marks:
        frame = _frame(found, text, binned, len(call.part.layouts), marks)
    fields = [layout.field(call.texts) for layout in call.part.layouts]
    now = b"" if call.now is None else b"%d" % call.now
    cost = b"%d" % call.cost
    values = (
        frame[0] if grows(call.mode, call.cost) else frame[2],
        bulk(key) if rid is None else bulk(key) + bulk(rid),
        len(now),
        now,
        len(cost),
        cost,
        call.mode,
        frame[1],
        b"".join([b"$%d\r\n%s\r\n" % (len(f), f) for f in (*fields, *marks)]),
    )
    packed = _FORMAT % (values if _IN_ORDER is None else _IN_ORDER(values))
    return packed, key


def chunks(
    calls: Sequence[ScriptCall], tail: bytes = b"", found: Library = FUNCTIONS
) -> Iterator[bytes]:
    """The calls packed, :data:`CHUNK` to a write (see Lane.stream), then ``tail``."""
    for start in range(0, len(calls), CHUNK):
        yield b"".join([encode(call, found)[0] for call in calls[start : start + CHUNK]])
    if tail:
        yield tail


#: ASKING in the wire protocol: the next command may touch a part being imported here.
ASKING = b"*1\r\n$6\r\nASKING\r\n"

#: The most bins the records of one policy may share (``RedisBackend(bins=N)``).
MAX_BINS = 2**32


def check_bins(bins: object) -> int:
    """``bins`` as given, if it is a number of bins (0: none).

    Raises:
        ConfigError: anything but an integer from 0 to :data:`MAX_BINS`.
    """
    if isinstance(bins, bool) or not isinstance(bins, int) or not 0 <= bins <= MAX_BINS:
        raise ConfigError(
            f"bins must be an integer from 1 to {MAX_BINS} (records shared in that "
            f"many hashes a policy), or 0 (a hash each), got {shown(bins)}"
        )
    return bins


#: The backends' options renamed before they were released, by their old names (``buckets``
#: was a storage word that the token bucket also uses).
RENAMED = {"buckets": "bins"}


def refuse_renamed(given: Mapping[str, object], owner: str) -> None:
    """Refuse keyword arguments ``owner`` does not take, naming the new name of a renamed one.

    Raises:
        TypeError: any of ``given`` (an old name is never ignored).
    """
    for name, value in given.items():
        if name in RENAMED:
            raise TypeError(
                f"{owner}() has no option {name!r}: it is called {RENAMED[name]!r} now "
                f"({RENAMED[name]}={value!r})"
            )
        raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")


def check_client(client: object, kinds: tuple[type, ...], owner: str) -> None:
    """Refuse what is not one of ``kinds`` (redis-py's clients of ``owner``'s kind).

    Raises:
        ConfigError: a URL (named: ``backend_from_url``), a pool, None, or a client of the
            other kind (sync for async): each failed at the first call, far from the mistake.
    """
    if isinstance(client, kinds):
        return

    def named(kind: type) -> str:
        return f"{kind.__module__.replace('.client', '')}.{kind.__name__}"

    wanted = " or ".join(named(kind) for kind in kinds)
    got, hint = (repr(client), "") if client is None else (f"a {named(type(client))}", "")
    if isinstance(client, (str, bytes)):
        got = shown(client)
        hint = f"; a URL is made a backend by backend_from_url({shown(client)})"
    raise ConfigError(f"{owner} takes a redis-py client ({wanted}), got {got}{hint}")


#: The most replicas a write may be made to wait for (a typo past it, not a topology).
MAX_WAIT_REPLICAS = 100


def wait_frame(replicas: object, timeout: object) -> bytes:
    """``WAIT replicas timeout_ms`` in the wire protocol; b"" when ``replicas`` is 0.

    Raises:
        ConfigError: ``replicas`` not an integer 0-100, or ``timeout`` not seconds in
            [0.001, 60] (WAIT's 0 would block for ever; a socket timeout is the bound).
    """
    if (
        isinstance(replicas, bool)
        or not isinstance(replicas, int)
        or not 0 <= replicas <= MAX_WAIT_REPLICAS
    ):
        raise ConfigError(
            f"wait_replicas must be an integer from 0 (no WAIT) to {MAX_WAIT_REPLICAS}, "
            f"got {shown(replicas)}"
        )
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ConfigError(f"wait_timeout must be seconds, got {shown(timeout)}")
    if not 0.001 <= timeout <= 60:  # also refuses nan
        raise ConfigError(
            f"wait_timeout must be from 0.001 to 60 seconds (WAIT's 0 blocks for ever), "
            f"got {timeout!r}"
        )
    if not replicas:
        return b""
    ms = b"%d" % max(round(timeout * 1000), 1)
    count = b"%d" % replicas
    return b"*3\r\n$4\r\nWAIT\r\n" + bulk(count) + bulk(ms)
