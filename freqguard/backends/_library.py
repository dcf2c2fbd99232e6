"""The Redis Function library the backends call, and how it is loaded again when missing.

The policy function's Lua files, joined into one library (``freqguard/script/library.py``
says in which order, and ends them with the tail that registers the functions), are loaded
with FUNCTION LOAD under a name that carries a digest of the joined code (so versions side
by side never clash), on first use and again whenever a server answers that it lacks it:
after ``FUNCTION FLUSH``, or on a new node; inside pipelines too, and in a way no concurrent
flush can defeat (see :func:`again`). Redis persists and replicates functions, so a failover
keeps them. A store without Functions gets the same body as EVALSHA scripts
(:data:`SCRIPTS`). No I/O here: the backends send what
:func:`again` frames.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from redis import exceptions as rex

from freqguard.backends._url_options import SCRIPT_KINDS
from freqguard.script import library
from freqguard.script.contract import ARGV, BIN_RECORD, CLAIM, widths

__all__ = [
    "ATTEMPTS",
    "FUNCTION",
    "FUNCTIONS",
    "FUNCTION_BIN",
    "FUNCTION_BIN_NOGROW",
    "FUNCTION_NOGROW",
    "LIBRARY",
    "LOAD",
    "SCRIPTS",
    "SCRIPT_KINDS",
    "Library",
    "Read",
    "again",
    "missing",
]

_SOURCE = library.function_library()
#: the name of the library and of its function, for hits
FUNCTION = "freqguard_" + hashlib.sha1(_SOURCE.encode("utf-8")).hexdigest()[:12]
#: the same function flagged allow-oom, for the calls that never grow what is stored (CHECK,
#: REFUND, RESET, a HIT of cost 0): Redis runs them when used memory is past maxmemory
FUNCTION_NOGROW = FUNCTION + "_nogrow"
#: the two for records in bins (``RedisBackend(bins=N)``): ARGV[1] is the record's id
FUNCTION_BIN = FUNCTION + "_bin"
FUNCTION_BIN_NOGROW = FUNCTION + "_bin_nogrow"
#: the library's code, as FUNCTION LOAD takes it
LIBRARY = _SOURCE.replace(library.NAME, FUNCTION)

_MULTI = b"*1\r\n$5\r\nMULTI\r\n"
_EXEC = b"*1\r\n$4\r\nEXEC\r\n"
_ATOMIC = 64  # calls per transaction: the server runs each whole, serving no one else
ATTEMPTS = 3  # calls through redis-py's command API: loads and tries in all
#: what turns the replies to :func:`again`'s bytes into each call's result
Read = Callable[[Sequence[object]], list[object]]


def _bulks(*words: bytes) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)


@dataclass(frozen=True)
class Library:
    """How a backend's calls reach the policy function: as Redis Functions (``FCALL`` of
    the library :data:`LIBRARY` loads), or, on a store without them, as four EVAL scripts
    (``EVALSHA`` of each, loaded with ``SCRIPT LOAD``; the same body, see
    ``script.library.scripts``). Both take the same keys and arguments and decide alike."""

    kind: str  # "functions" or "scripts"
    command: bytes  # what a call is: FCALL or EVALSHA
    names: tuple[str, str, str, str]  # the four entry points' function names, or SHA1s
    sources: tuple[str, ...]  # what loads them: the library, or the four scripts
    load: bytes  # the load in the wire protocol, sent before calls that missed
    loads: int  # how many replies the load gets
    absent: str  # what an error reply says when they are not loaded

    def name(self, grows: bool, binned: bool) -> str:
        """The entry point a call goes to (see ``script.library.ENTRIES``)."""
        return self.names[(not grows) + 2 * binned]

    def claim(self, bin_key: bytes, bins: int) -> tuple[object, ...]:
        """The claim of a bin for ``bins`` (a binned call of mode ``CLAIM``, see
        ``contract.UNCLAIMED``), as ``execute_command`` takes it: its reply is the setting
        the bin holds."""
        record = bytes(8) + bins.to_bytes(sum(widths(BIN_RECORD)), "big")
        values = {"now": "", "cost": 1, "mode": CLAIM, "specs": ""}
        argv = [values[name] for name in ARGV]
        return (self.command.decode(), self.name(True, True), 1, bin_key, record, *argv)

    def missing(self, result: object) -> bool:
        """Whether a reply says the server lacks them (never loaded, or flushed)."""
        return isinstance(result, rex.ResponseError) and self.absent in str(result)

    def after_load(self, loaded: object, result: object) -> object:
        """A call's result after the load: the load's own error where it failed (for
        another reason than being there already) and the call found nothing to run."""
        failed = isinstance(loaded, Exception) and "already exists" not in str(loaded)
        return loaded if failed and self.missing(result) else result


# "Function not found" (never loaded, FUNCTION FLUSH, a new node): the calls that met it are
# sent again behind the library's load, on the connection they failed on. FUNCTION LOAD goes
# without REPLACE: a library already there is refused before its code is compiled, so many
# callers recovering at once cost one compilation.
FUNCTIONS = Library(
    "functions",
    b"FCALL",
    (FUNCTION, FUNCTION_NOGROW, FUNCTION_BIN, FUNCTION_BIN_NOGROW),
    (LIBRARY,),
    _bulks(b"FUNCTION", b"LOAD", LIBRARY.encode()),
    1,
    "Function not found",
)
LOAD = FUNCTIONS.load
# each named as the library is, after a digest of the code: versions side by side keep apart
_SCRIPTS = tuple(code.replace(library.NAME, FUNCTION) for code in library.scripts())
#: A store without Redis Functions: the same body, as EVALSHA scripts (SCRIPT LOAD each).
SCRIPTS = Library(
    "scripts",
    b"EVALSHA",
    tuple(hashlib.sha1(code.encode("utf-8")).hexdigest() for code in _SCRIPTS),  # type: ignore[arg-type]
    _SCRIPTS,
    b"".join(_bulks(b"SCRIPT", b"LOAD", code.encode("utf-8")) for code in _SCRIPTS),
    len(_SCRIPTS),
    "No matching script",  # redis-py's NoScriptError for the server's NOSCRIPT
)


def missing(result: object) -> bool:
    """Whether a reply says the server lacks the library or the scripts (on every reply:
    one type test for the usual answer)."""
    if not isinstance(result, rex.ResponseError):
        return False
    text = str(result)
    return FUNCTIONS.absent in text or SCRIPTS.absent in text


def again(
    found: Library,
    calls: Sequence[tuple[bytes, bytes]],
    atomic: bool,
    slot_of: Callable[[bytes], int],
) -> tuple[bytes, int, Read]:
    """Encoded calls that found the library (or the scripts) missing, framed to go again
    behind its load.

    First the load and then the calls: one load for them all. A flush from another client can
    still come between the two; the calls that meet one go again ``atomic``: in transactions
    (MULTI, the load, the calls, EXEC) that nothing can come between, so they cannot miss
    again. A transaction's keys must share a cluster slot: one (or more, past ``_ATOMIC``
    calls) per slot, by ``slot_of``; calls of one slot keep their order.

    Returns:
        The bytes to send, the number of replies they get, and what turns those replies into
        each call's result, in the order of ``calls``.
    """
    n = found.loads
    if not atomic:
        return (
            found.load + b"".join([packed for packed, _ in calls]),
            n + len(calls),
            lambda replies: [found.after_load(replies[0], result) for result in replies[n:]],
        )
    runs = _runs([slot_of(key) for _, key in calls])

    def read(replies: Sequence[object]) -> list[object]:
        results: list[object] = [None] * len(calls)
        at = 0
        for run in runs:
            queued = replies[at : at + 1 + n + len(run)]
            done = replies[at + 1 + n + len(run)]
            at += 2 + n + len(run)
            if isinstance(done, list):  # it ran: the load's answers, then each call's
                answers = [found.after_load(done[0], result) for result in done[n:]]
            else:  # refused as it was queued (out of memory, a slot that moved): none ran
                refused = next((r for r in queued if isinstance(r, Exception)), done)
                answers = [refused] * len(run)
            for index, answer in zip(run, answers, strict=True):
                results[index] = answer
        return results

    parts: list[bytes] = []
    for run in runs:
        parts += [_MULTI, found.load, *[calls[index][0] for index in run], _EXEC]
    return b"".join(parts), len(calls) + (2 + n) * len(runs), read


def _runs(slots: list[int]) -> list[list[int]]:
    """Positions grouped into transactions: one slot each, at most ``_ATOMIC``, in order."""
    runs: list[list[int]] = []
    for index in sorted(range(len(slots)), key=slots.__getitem__):  # stable: order kept
        run = runs[-1] if runs else None
        if run is None or len(run) == _ATOMIC or slots[run[0]] != slots[index]:
            runs.append([index])
        else:
            run.append(index)
    return runs
