"""Write the sync copy of each module of an ``_async/`` folder into its ``_sync/`` sibling.

    python scripts/unasync.py           # write every generated module
    python scripts/unasync.py --check   # exit 1, showing the difference, if one is stale

Two rooms are written once, for asyncio, and generated for threads: the guard
(``freqguard/_async/`` -> ``freqguard/_sync/``) and the Redis I/O edge
(``freqguard/backends/_async/`` -> ``freqguard/backends/_sync/``). A generated module, a *sync
copy*, is the same code with each line passed through :data:`SUBSTITUTIONS`, in order: whole
words, so ``aexecute`` never touches ``aexecute_many``'s tail and ``AsyncRedis`` not
``AsyncRedisCluster``. A substitution that no module uses is an error as well, so the list says
exactly how the two sides differ. A line of :data:`ASYNC_ONLY` (the decorator that makes the async
guard's answers refuse to be true or false, and its import) is left out of the sync side, and
one that no module has is an error too. What cannot be said by substitution (threads and tasks
wait and are cancelled differently) lives in hand-written pairs: ``_io.py`` on each side of the
guard (:data:`HANDWRITTEN`), and outside ``_async/`` for the Redis edge (``_lanes.py``,
``_flight.py``, ``learn_slots`` in ``_routing.py``).

A generated module must come out as ``ruff format`` leaves it (CI checks both). Where
dropping ``await`` would let a split line fit on one, keep it split in the source with a
magic trailing comma.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: (written by hand, generated): each room written once
PAIRS = [
    (ROOT / "freqguard" / "_async", ROOT / "freqguard" / "_sync"),
    (ROOT / "freqguard" / "backends" / "_async", ROOT / "freqguard" / "backends" / "_sync"),
]
#: each package says what it is in its own words; what waits or is cancelled differs
HANDWRITTEN = {"__init__.py", "_io.py"}

#: (async, sync): regular expressions, matched as whole words, and their replacements
SUBSTITUTIONS: list[tuple[str, str]] = [
    # redis-py's asyncio classes, imported under Async names
    (r"from redis\.asyncio import Redis as AsyncRedis", "from redis import Redis"),
    (
        r"from redis\.asyncio\.cluster import RedisCluster as AsyncRedisCluster",
        "from redis.cluster import RedisCluster",
    ),
    (
        r"from redis\.asyncio\.connection import Connection as AsyncConnection",
        "from redis.connection import Connection",
    ),
    (  # the names sort otherwise once AsyncIterator is Iterator
        r"from collections\.abc import AsyncIterator, Callable, Iterable, Mapping",
        "from collections.abc import Callable, Iterable, Iterator, Mapping",
    ),
    (  # the Redis edge's preparation: Awaitable goes, with what awaits it
        r"from collections\.abc import Awaitable, Callable, Sequence",
        "from collections.abc import Callable, Sequence",
    ),
    (r"Awaitable\[list\[object\]\]", "list[object]"),
    # the guard's own imports
    (r"freqguard\._async\.", "freqguard._sync."),
    # syntax
    (r"async def", "def"),
    (r"asynccontextmanager", "contextmanager"),
    (r"AsyncIterator", "Iterator"),
    (r"await ", ""),
    # names
    (r"AsyncGuard", "Guard"),
    (r"AsyncBackend", "SyncBackend"),
    (r"The asyncio engine", "The synchronous engine"),
    (r"__aenter__", "__enter__"),
    (r"__aexit__", "__exit__"),
    (r"AsyncRedisBackend", "RedisBackend"),
    (r"AsyncRedisCluster", "RedisCluster"),
    (r"AsyncRedis", "Redis"),
    (r"AsyncConnection", "Connection"),
    (r"AsyncLane", "Lane"),
    (r"AsyncJob", "Job"),
    (r"AsyncSingleFlight", "SingleFlight"),
    (r"AsyncPreparation", "Preparation"),
    (r"aexchange_all", "exchange_all"),
    (r"adrive", "drive"),
    (r"alearn_slots", "learn_slots"),
    (r"alearn_lost", "learn_lost"),
    (r"aclose_client", "close_client"),
    (r"aexecute_many", "execute_many"),
    (r"aexecute", "execute"),
    (r"aclose", "close"),
]

#: lines (regular expressions for the whole line, indentation aside) the sync side leaves out:
#: an un-awaited coroutine is always true, so the async guard's answers are decorated to refuse
#: ``if guard.hit(...)``; the sync guard's are the decisions themselves
ASYNC_ONLY: list[str] = [
    r"from freqguard\.engine\.awaitables import must_await",
    r"@must_await",
]


def _whole(pattern: str) -> re.Pattern[str]:
    """``pattern`` where it is not part of a longer name."""
    tail = r"(?!\w)" if re.match(r"\w", pattern[-1]) else ""
    return re.compile(r"(?<!\w)" + pattern + tail)


_COMPILED = [(_whole(pattern), replacement) for pattern, replacement in SUBSTITUTIONS]
_DROPPED = [re.compile(pattern) for pattern in ASYNC_ONLY]
#: every rule, by the index :func:`unasync` records it as used under
_RULES = [pattern for pattern, _ in SUBSTITUTIONS] + ASYNC_ONLY


def header(source: Path) -> str:
    """The first line of a generated module."""
    parts = source.parts
    start = len(parts) - 1 - parts[::-1].index("freqguard")  # from the package down
    where = "/".join(parts[start:])
    return f"# Generated by scripts/unasync.py from {where}: do not edit.\n"


def unasync(text: str, used: set[int]) -> str:
    """The sync copy of an async module's text; adds to ``used`` the rules it used
    (their indexes in ``SUBSTITUTIONS + ASYNC_ONLY``)."""
    lines = []
    for line in text.splitlines(keepends=True):
        dropped = [i for i, pattern in enumerate(_DROPPED) if pattern.fullmatch(line.strip())]
        if dropped:
            used.add(len(SUBSTITUTIONS) + dropped[0])
            continue
        for index, (pattern, replacement) in enumerate(_COMPILED):
            line, count = pattern.subn(replacement, line)
            if count:
                used.add(index)
        lines.append(line)
    return "".join(lines)


def expected(pairs: list[tuple[Path, Path]]) -> tuple[dict[Path, str], list[str]]:
    """Each generated module's path and text, and the rules (substitutions, async-only lines)
    no module used."""
    used: set[int] = set()
    texts = {}
    for source_dir, target_dir in pairs:
        for source in sorted(source_dir.glob("*.py")):
            if source.name not in HANDWRITTEN:
                text = unasync(source.read_text(encoding="utf-8"), used)
                texts[target_dir / source.name] = header(source) + text
    unused = [pattern for i, pattern in enumerate(_RULES) if i not in used]
    return texts, unused


def problems(pairs: list[tuple[Path, Path]] = PAIRS) -> list[str]:
    """What makes the generated modules stale: a difference (as a diff), a module without a
    source, a substitution no module uses."""
    texts, unused = expected(pairs)
    found = [f"substitution never used: {pattern!r}" for pattern in unused]
    for path, text in texts.items():
        actual = path.read_text(encoding="utf-8") if path.exists() else ""
        if actual != text:
            diff = difflib.unified_diff(
                actual.splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"{path.name} (as it is)",
                f"{path.name} (as generated)",
            )
            found.append(f"{path} is stale:\n" + "".join(diff))
    found += [
        f"{path} has no source in {source_dir}"
        for source_dir, target_dir in pairs
        for path in sorted(target_dir.glob("*.py"))
        if path.name not in HANDWRITTEN and path not in texts
    ]
    return found


def write(pairs: list[tuple[Path, Path]] = PAIRS) -> list[str]:
    """Write every generated module; returns the substitutions no module used."""
    texts, unused = expected(pairs)
    for path, text in texts.items():
        path.write_text(text, encoding="utf-8")
    return [f"substitution never used: {pattern!r}" for pattern in unused]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if stale")
    args = parser.parse_args(argv)
    found = problems() if args.check else write()
    for problem in found:
        print(problem, file=sys.stderr)
    if found and args.check:
        print("run: python scripts/unasync.py", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
