"""The Lua twin's files, and the one library they join into.

The Lua is written in files beside the Python they mirror: each strategy's beside its module
(``strategies/gcra.lua`` beside ``gcra.py``), what they share in ``strategies/base.lua``,
the rest in ``lua/`` (``limits.lua`` beside ``limits.py``, ``twin.lua`` for ``twin.py``'s
steps and ``run``), and the contract's constants in ``lua/contract.lua``, which
``scripts/lua_contract.py`` generates from the Python. Redis takes one chunk: the files
are joined in the order of :data:`MANIFEST` (one scope: each file reads the locals of the
files before it), the *body*, which defines the policy function's entry points and
registers nothing; then a *tail* makes them something Redis runs. :func:`function_library`
ends the body with :data:`FUNCTION_TAIL`, which registers them as Redis Functions (the
library ``FUNCTION LOAD`` takes, behind :data:`FUNCTION_HEAD`); another tail, an EVAL
script's, would end the same :func:`body`. No I/O but reading the package's own files.
"""

from __future__ import annotations

import re
from importlib import resources

from freqguard.script.strategies import MODULE_NAMES

__all__ = [
    "ENTRIES",
    "FUNCTION_HEAD",
    "FUNCTION_TAIL",
    "MANIFEST",
    "NAME",
    "body",
    "function_library",
    "read",
    "scripts",
]

#: Where the library's name goes: the client replaces it with a name carrying a digest of
#: the joined code (``backends/_library.py``), so versions side by side never clash.
NAME = "__LIBRARY__"

#: The body's files, in the order they are joined (paths under ``freqguard/script``): each
#: may read what those before it define. The strategies' are the registry's
#: (``strategies.KINDS``), each named as its module.
MANIFEST: tuple[str, ...] = (
    "lua/prelude.lua",  # the header: the call's layout; the libraries, bound on first call
    "lua/contract.lua",  # generated: the constants, each twin's facts and table, TWINS
    "strategies/base.lua",  # what the strategies share
    *[f"strategies/{name}.lua" for name in MODULE_NAMES.values()],
    "lua/specs.lua",  # the specs parsed
    "lua/limits.lua",  # per-key limits
    "lua/bins.lua",  # a binned record's codec, and the bin's TTL
    "lua/records.lua",  # the record read and written
    "lua/twin.lua",  # the steps, and run
    "lua/entries.lua",  # the entry points: policy, nogrow, binned
)

#: The first line of a Redis Functions library: its engine and name.
FUNCTION_HEAD = f"#!lua name={NAME}\n"
#: The tail that registers the entry points as Redis Functions.
FUNCTION_TAIL = "lua/register.lua"


def read(path: str) -> str:
    """One of the package's Lua files, by its path under ``freqguard/script``."""
    node = resources.files("freqguard.script")
    for part in path.split("/"):
        node = node.joinpath(part)
    return node.read_text(encoding="utf-8")


def _joined(paths: tuple[str, ...]) -> str:
    # a line naming each file, so that a line of the library is found in its file
    return "".join(f"-- {'=' * 8} {path}\n{read(path)}\n" for path in paths)


def body() -> str:
    """The files of :data:`MANIFEST`, joined: the entry points, registered by no one."""
    return _joined(MANIFEST)


#: The policy function's four entry points (the body defines them), in the order the
#: backends name them: for hits that grow what is stored, for the calls that never do (run
#: by Redis when out of memory: ``_nogrow``), and each for a record in a bin.
ENTRIES = ("policy", "nogrow", "binned(policy)", "binned(nogrow)")


def scripts() -> tuple[str, ...]:
    """The body as four EVAL scripts, one an entry point of :data:`ENTRIES`: for a store
    without Redis Functions (``RedisBackend(scripts="eval")``).

    A script builds the library (runs the body) and keeps it in a global named
    :data:`NAME` (replaced, as the Functions' name is, by a digest of the code), where
    the store lets a script set one (Redis before 6.2.7, KeyDB): later calls find it, its
    specs parsed already, as a Redis Function's are. Redis 6.2.7 and later keep every
    global read-only (the keeping fails, quietly): each call then runs the body again.
    """
    built = ", ".join(ENTRIES)
    made = []
    for index in range(1, len(ENTRIES) + 1):
        binned = ENTRIES[index - 1].startswith("binned")
        kept = f"{NAME}_binned" if binned else NAME  # the two bodies differ
        made.append(
            f"local lib = rawget(_G, '{kept}')\n"
            "if not lib then\n"
            f"  lib = (function()\n{_deferred_body(binned)}\n  return {{{built}}}\n  end)()\n"
            f"  pcall(rawset, _G, '{kept}', lib)\n"
            "end\n"
            f"return lib[{index}](KEYS, ARGV)\n"
        )
    return tuple(made)


#: Strategies an EVAL script defines at once: the sliding log's ``log_width`` is read by
#: the specs, leases run on its functions, and the rolling window packs its counts in its
#: ``FORMATS``.
EAGER = ("sliding_log",)


#: The file only records in bins need (``RedisBackend(bins=N)``): an EVAL script of an
#: unbinned entry point declares its names and leaves them nil (a call that reached one
#: would fail loudly), for a sixth less server time a call on Redis 7
#: (``benchmarks/eval_cost.py``).
BINNED_ONLY = "lua/bins.lua"


def declared(path: str) -> list[str]:
    """The names a Lua file declares at its top level (``local function f``, ``local A,
    B = ...``), in order."""
    names: list[str] = []
    for line in read(path).splitlines():
        found = re.match(r"local function (\w+)|local (\w+(?:, *\w+)*) *(?:=|$)", line)
        if found:
            names += [name.strip() for name in (found[1] or found[2]).split(",")]
    return names


def _deferred_body(binned: bool = True) -> str:
    """:func:`body` for an EVAL script, which runs it at every call (a Redis of 6.2.7 or
    later keeps no global between calls): each strategy but :data:`EAGER` is wrapped in a
    function that the specs call when they first name its code (``DEFERRED`` in
    ``strategies/base.lua``), so a call defines the functions of its own strategies only
    (most of the body's cost is making its ~120 closures); unless ``binned``,
    :data:`BINNED_ONLY`'s names are declared and nothing of it is made."""
    parts = []
    for path in MANIFEST:
        name = path.removeprefix("strategies/").removesuffix(".lua")
        if path == BINNED_ONLY and not binned:
            parts.append(f"-- {'=' * 8} {path} (left out)\nlocal {', '.join(declared(path))}\n")
        elif path.startswith("strategies/") and name in MODULE_NAMES.values() and name not in EAGER:
            parts.append(
                f"-- {'=' * 8} {path} (deferred)\nlocal function define_{name}()\n{read(path)}\n"
                f"end\nDEFERRED[{name}.code] = define_{name}\n"
            )
        else:
            parts.append(f"-- {'=' * 8} {path}\n{read(path)}\n")
    return "".join(parts)


def function_library() -> str:
    """The library ``FUNCTION LOAD`` takes, under the name :data:`NAME`: the head, the
    body, and the tail that registers its functions."""
    return FUNCTION_HEAD + body() + _joined((FUNCTION_TAIL,))
