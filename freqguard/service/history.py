"""Decisions over time, shared by every worker and host of a service: per policy and rule,
the hits allowed and denied in each minute of the last hour, and the contexts denied most
(their digests, never their values).

They are the store's tallies (``backends.tallies``), keyed by ``script.keys.policy_key``:
one tally per policy and hour, fields ``{minute}|{rule}|a`` and ``|d`` (rule empty for the
policy's own), and a top tally per minute. Each worker adds its calls' counts up and
writes them at once when idle, then at most every :data:`INTERVAL` seconds, never in a
decision's path (a write a call cost ~5x a hit: ``benchmarks/service_history.py``). A
write that fails is logged (at most once a minute) and dropped; decisions taken without
the store are not written.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from itertools import product
from typing import Any

import freqguard.service.schema as schema
from freqguard.backends.tallies import tallies_of
from freqguard.decision import Decision
from freqguard.guard import AsyncGuard
from freqguard.observe.base import RepeatFilter
from freqguard.script.keys import context_digest, policy_key
from freqguard.service.bodies import TOP_MINUTES  # minutes the top keys are kept, a read spans
from freqguard.service.problems import Problem, log

__all__ = [
    "INTERVAL",
    "MINUTES",
    "TOP_KEPT",
    "TOP_MINUTES",
    "History",
    "bounded",
]

MINUTES = 60  # the minutes the history holds, the current one last
INTERVAL = 0.25  # seconds at least between two writes of one worker's counts
_TTL = 2 * 3600  # seconds an hour's hash is kept after its last write
_WRITTEN = ("backend", "deny-cache")  # the sources of decisions the store took part in
TOP_KEPT = 100  # keys kept per policy and minute: the most denied (a bounded top list)
_TOP_TTL = TOP_MINUTES * 60 + 120
TOP_LIST = 20  # keys a read answers

#: By (policy, minute since the epoch): counts by (rule, ``a`` or ``d``), or keys' denials.
Counts = dict[tuple[str, int], Counter[tuple[str, str]]]
Keys = dict[tuple[str, int], Counter[str]]


def bounded(keys: Counter[str]) -> Counter[str]:
    """``keys``, or its :data:`TOP_KEPT` most denied when it holds more: the top list an
    approximate heavy-hitters count (a key pushed out and back starts again from 0)."""
    return keys if len(keys) <= TOP_KEPT else Counter(dict(keys.most_common(TOP_KEPT)))


class History:
    """The service's counts: :meth:`record` a call's, :meth:`read` them or the keys denied
    most (:meth:`top`, :meth:`denied`); one writer task sends them (a read first sends what
    is pending) to the store's tallies (:meth:`_add`, :meth:`_counts`, :meth:`_keys`).

    Not ``kept`` (``freqguard serve --history off``), a call records nothing, and a read is
    a 404 that says the history is off (never an empty chart that looks quiet)."""

    def __init__(self, guard: AsyncGuard, interval: float = INTERVAL, kept: bool = True) -> None:
        self._clock, self._prefix = guard.clock or guard.backend.clock, guard.prefix
        self._tallies = tallies_of(guard.backend, self._clock)
        self.interval, self.kept = interval, kept
        self._pending: Counts = defaultdict(Counter)
        self._pending_keys: Keys = {}
        self._writer: asyncio.Task[None] | None = None
        self._failures = RepeatFilter(60.0)  # a write failure logged once a minute

    def minute(self) -> int:
        """The current minute, since the epoch, on the guard's clock."""
        return int(self._clock.now() // 60)

    async def record(
        self,
        policy: str,
        decisions: Sequence[Decision],
        contexts: Sequence[Mapping[str, Any]],
        dimensions: Sequence[str],
    ) -> None:
        """Add a call's decisions (those taken on the store) and its denied contexts' keys
        (``script.keys.context_digest``, in the policy's order)."""
        if not self.kept:
            return
        counts: Counter[tuple[str, str]] | None = None
        keys: Counter[str] | None = None
        # by (rule, a or d): rule "" the policy's own; a rule's denials only (denied_by: a
        # shadow rule's "no" is none), its allowed made when read
        for decision, context in zip(decisions, contexts, strict=True):
            if decision.source not in _WRITTEN:
                continue
            if counts is None:  # a call's first decision taken on the store
                now = self.minute()
                counts = self._pending[policy, now]
            if decision.allowed:
                counts["", "a"] += 1
            else:
                counts["", "d"] += 1
                for rule in decision.denied_by:
                    counts[rule.id, "d"] += 1
                keys = keys if keys is not None else Counter()
                keys[context_digest(context, dimensions)] += 1
        if counts is None:
            return
        if keys:
            mine = self._pending_keys.get((policy, now), Counter())
            mine.update(keys)
            self._pending_keys[policy, now] = bounded(mine)
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_while_pending())

    async def _write_while_pending(self) -> None:
        try:
            while self._pending:
                await self.flush()
                await asyncio.sleep(self.interval)  # what gathers meanwhile goes as one
        finally:
            self._writer = None

    async def flush(self) -> None:
        """Send this worker's pending counts now (before a read, and at shutdown)."""
        if not (self._pending or self._pending_keys):
            return
        pending, self._pending = self._pending, defaultdict(Counter)
        pending_keys, self._pending_keys = self._pending_keys, {}
        try:
            await self._add(pending, pending_keys)
        except Exception as exc:  # the counts are a view: a decision never fails on them
            if self._failures.due("write") is not None:
                log.warning("freqguard serve: the decisions' history was not written: %r", exc)

    async def aclose(self) -> None:
        """Send what is pending, and stop the writer."""
        writer = self._writer
        if writer is not None:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
        await self.flush()

    async def read(self, policies: Mapping[str, Sequence[str]]) -> schema.History:
        """The series of each policy (its own first, then each of its rules) over the
        :data:`MINUTES` minutes that end with the current one."""
        minutes = await self._recent(MINUTES)
        found = await self._counts(list(policies), minutes)
        series: list[schema.Series] = []
        for policy, rules in policies.items():
            by_minute = [found.get((policy, m), Counter()) for m in minutes]
            allowed = [c["", "a"] for c in by_minute]
            denied = [c["", "d"] for c in by_minute]
            series.append(schema.Series(policy, None, allowed, denied))
            for rule in rules:
                its = [c[rule, "d"] for c in by_minute]
                left = [a + d - r for a, d, r in zip(allowed, denied, its, strict=True)]
                series.append(schema.Series(policy, rule, left, its))
        return schema.History(minutes=[m * 60 for m in minutes], series=series)

    async def top(
        self, policies: Sequence[str], minutes: int, digest: Callable[[str], str] | None
    ) -> schema.TopKeys:
        """The keys denied most over the last ``minutes``, each shown as ``digest`` makes it
        (None: as it is)."""
        found = await self._keys(policies, await self._recent(minutes))
        summed: Counter[tuple[str, str]] = Counter()
        for (policy, _), keys in found.items():
            for key, count in keys.items():
                summed[policy, key] += count
        ordered = sorted(summed.items(), key=lambda row: (-row[1], row[0]))
        shown_keys = [
            schema.TopKey(policy, key if digest is None else digest(key), count)
            for (policy, key), count in ordered[:TOP_LIST]
        ]
        return schema.TopKeys(minutes=minutes, digested=digest is not None, keys=shown_keys)

    async def denied(self, policy: str, key: str, minutes: int) -> int:
        """One key's denials over the last ``minutes``."""
        found = await self._keys([policy], await self._recent(minutes))
        return sum(keys[key] for keys in found.values())

    async def _recent(self, minutes: int) -> list[int]:
        """The last ``minutes``, the current one last, once the pending counts are sent."""
        await self.flush()
        if not self.kept:
            raise Problem(404, "the decisions' history is off (freqguard serve --history off)")
        now = self.minute()
        return list(range(now - minutes + 1, now + 1))

    def _key(self, policy: str, minute: int) -> str:  # the hour's tally of counts
        return policy_key(self._prefix, policy, "stats", minute // 60)

    def _top_key(self, policy: str, minute: int) -> str:  # the minute's keys denied most
        return policy_key(self._prefix, policy, "top", minute)

    async def _add(self, counts: Counts, keys: Keys) -> None:
        adds: dict[str, Counter[str]] = {}
        for (policy, minute), count in counts.items():
            hour = adds.setdefault(self._key(policy, minute), Counter())
            for (rule, outcome), n in count.items():
                hour[f"{minute % 60}|{rule}|{outcome}"] += n
        tops = {self._top_key(policy, minute): found for (policy, minute), found in keys.items()}
        await self._tallies.add(adds, _TTL, tops, _TOP_TTL, TOP_KEPT)

    async def _counts(self, policies: Sequence[str], minutes: Sequence[int]) -> Counts:
        hours = list(product(policies, sorted({minute // 60 for minute in minutes})))
        replies = await self._tallies.read([self._key(p, hour * 60) for p, hour in hours])
        found: Counts = defaultdict(Counter)
        for (policy, hour), reply in zip(hours, replies, strict=True):
            for field, value in reply.items():
                minute, rule, outcome = field.split("|")
                found[policy, hour * 60 + int(minute)][rule, outcome] += value
        return found

    async def _keys(self, policies: Sequence[str], minutes: Sequence[int]) -> Keys:
        at = list(product(policies, minutes))
        replies = await self._tallies.read([self._top_key(*where) for where in at], top=True)
        return {where: Counter(reply) for where, reply in zip(at, replies, strict=True) if reply}
