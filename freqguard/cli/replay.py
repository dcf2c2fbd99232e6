"""``freqguard replay``: a log of past messages decided again, on a pinned clock, by a
configuration's policies (and, with ``--what-if``, by another's, side by side): what would
this cap have done last week.

A log is JSON Lines (``{"time": ..., "policy": "sms", "context": {...}, "cost": 1}``, cost
optional) or CSV with a header (``time``, ``policy`` and ``cost`` columns, every other
column a context value). ``time`` is epoch seconds or an ISO 8601 instant with its offset.
``policy`` may be left out of every line when ``--policy`` names it. The log is read a line
at a time (constant memory for the file; the decisions' state is what the policies keep).
Replays run on the memory backend: the configuration's store is never touched.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from freqguard.backends.memory import MemoryBackend
from freqguard.cli.logs import Entry, entries
from freqguard.cli.output import EXIT_OK, out
from freqguard.cli.words import checked_names, policy_named
from freqguard.clock import ManualClock
from freqguard.config.places import named_path
from freqguard.errors import ConfigError
from freqguard.guard import Guard

__all__ = ["Entry", "ReplayCounts", "command", "entries", "replay"]


@dataclass
class ReplayCounts:
    """What one configuration decided over a log."""

    hits: Counter[str] = field(default_factory=Counter)  # per policy
    allowed: Counter[str] = field(default_factory=Counter)  # per policy
    denied_by: Counter[tuple[str, str]] = field(default_factory=Counter)  # (policy, rule)


class _Run:
    """One configuration's guard on its own pinned clock."""

    def __init__(self, config: Any, named: bool = False) -> None:
        self.config, self.named = config, named
        self.clock = ManualClock(0)
        self.guard = Guard(MemoryBackend(max_keys=None), config.policies, clock=self.clock)
        self.counts = ReplayCounts()

    def decide(self, entry: Entry) -> tuple[bool, list[str]]:
        self.clock.set(entry.time, backwards=True)
        try:
            # the context's names checked first: none may reach hit() as its own (cost=)
            named = policy_named(self.config, entry.policy)
            checked_names(entry.context, named)
            if named.leases:
                raise ConfigError(
                    f"policy {entry.policy!r} counts calls in flight (a concurrency rule): a "
                    "log says when each call began, never when it ended, so replay cannot "
                    "decide it; replay the others (--policy NAME)"
                )
            decision = self.guard.hit(entry.policy, entry.cost, **entry.context)
        except ConfigError as exc:  # which configuration refused it, when two decide
            under = f" (under {self.config.source})" if self.named else ""
            raise ConfigError(f"line {entry.line}{under}: {exc}") from None
        denied = [rule.id for rule in decision.denied_by]
        self.counts.hits[entry.policy] += 1
        if decision.allowed:
            self.counts.allowed[entry.policy] += 1
        for rule in denied:
            self.counts.denied_by[entry.policy, rule] += 1
        return decision.allowed, denied


def replay(
    config: Any,
    log: Path,
    *,
    other: Any = None,
    policy: str | None = None,
    decisions: IO[str] | None = None,
    progress: bool = False,
) -> tuple[ReplayCounts, ReplayCounts | None, Counter[str]]:
    """Decide every entry of ``log`` with ``config`` (and ``other``): the tallies, and per
    policy how many decisions the other configuration changed (``"blocked"``: allowed by
    ``config``, denied by ``other``; ``"allowed"``: the reverse)."""
    kind = "csv" if log.suffix.lower() == ".csv" else "jsonl"
    first = _Run(config, named=other is not None)
    second = None if other is None else _Run(other, named=True)
    changed: Counter[str] = Counter()
    try:
        file = log.open("rb")
    except OSError as exc:
        raise ConfigError(
            f"{named_path(str(log))}: cannot be read: {exc.strerror or exc}"
        ) from None
    with file, _bar(log, file, progress) as advance:
        for entry in entries(file, kind, policy):
            allowed, denied = first.decide(entry)
            if decisions is not None:
                decisions.write(
                    json.dumps({"line": entry.line, "allowed": allowed, "denied_by": denied}) + "\n"
                )
            if second is not None:
                again, _ = second.decide(entry)
                if allowed != again:
                    changed[f"{entry.policy}:{'blocked' if allowed else 'allowed'}"] += 1
            advance()
    return first.counts, None if second is None else second.counts, changed


class _bar:
    """A progress bar on standard error while a log is read, when it is a terminal and rich
    is installed (the ``cli`` extra); nothing otherwise."""

    def __init__(self, log: Path, file: IO[bytes], shown: bool) -> None:
        self._file = file
        self._progress: Any = None
        self._task: Any = None
        self._size = log.stat().st_size
        self._count = 0
        if shown and sys.stderr.isatty():
            try:
                from rich.progress import Progress
            except ImportError:  # the cli extra is not installed: no bar
                return
            self._progress = Progress(transient=True)
            self._task = self._progress.add_task(f"replaying {log.name}", total=self._size)

    def __enter__(self) -> Any:
        if self._progress is not None:
            self._progress.start()
        return self._advance

    def _advance(self) -> None:
        self._count += 1
        if self._progress is not None and self._task is not None and self._count % 1000 == 0:
            done = self._file.tell()
            self._progress.update(self._task, completed=done)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a regular file: not when no file can have its name (too long
    for the system, or holding a NUL: stat() raises for those)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def command(args: argparse.Namespace) -> int:
    """The ``replay`` command: the report of :func:`replay`."""
    import contextlib

    from freqguard.config import load

    config = load(args.config)
    other = None if args.what_if is None else load(args.what_if)
    log = Path(args.log)
    if not _is_file(log):  # a file: its size is the progress bar's measure
        why = "not a regular file" if os.path.exists(log) else "no such file"
        raise ConfigError(f"the log {named_path(args.log)}: {why} (a log is a file of lines)")
    with contextlib.ExitStack() as stack:
        written = None
        if args.decisions is not None:
            try:
                written = stack.enter_context(open(args.decisions, "w", encoding="utf-8"))
            except OSError as exc:
                raise ConfigError(
                    f"{named_path(args.decisions)}: cannot be written: {exc.strerror or exc}"
                ) from None
        first, second, changed = replay(
            config,
            log,
            other=other,
            policy=args.policy,
            decisions=written,
            progress=not args.no_progress,
        )
    policies: list[dict[str, Any]] = []
    for name in first.hits:
        entry: dict[str, Any] = {"policy": name, "hits": first.hits[name]}
        entry["allowed"] = first.allowed[name]
        if second is not None:
            entry["what_if_allowed"] = second.allowed[name]
            entry["newly_blocked"] = changed[f"{name}:blocked"]
            entry["newly_allowed"] = changed[f"{name}:allowed"]
        policies.append(entry)
    rules: list[dict[str, Any]] = []
    for name, rule in sorted({*first.denied_by, *(second.denied_by if second else ())}):
        denial: dict[str, Any] = {"policy": name, "rule": rule}
        denial["denied"] = first.denied_by[name, rule]
        if second is not None:
            denial["what_if_denied"] = second.denied_by[name, rule]
        rules.append(denial)

    def table() -> list[list[str]]:
        keys = ["hits", "allowed", "denied"]
        if second is not None:
            keys += ["what_if_allowed", "what_if_denied", "newly_blocked", "newly_allowed"]
        head = ["policy", "rule", *(key.replace("_", " ") for key in keys)]
        rows = [{**p, "rule": "(all)"} for p in policies] + rules
        return [head] + [
            [row["policy"], row["rule"], *(str(row.get(key, "")) for key in keys)] for row in rows
        ]

    out(args, {"policies": policies, "rules": rules}, table)
    return EXIT_OK
