"""Brute-force reference models of the strategies: slow, obvious, independent of the twins.

Each strategy it models is named in :data:`MODELS`, with the model that counts for it; a
rule of any other (a strategy added to ``freqguard.rules.Strategy`` without its model here,
a calendar rule, the quiet hours) is refused, never decided by a guess.
"""

from __future__ import annotations

import math
from fractions import Fraction

from freqguard import Rule, Strategy
from freqguard.script.strategies.rolling_window import SUB_WINDOWS

#: The model of each strategy modeled: every timestamp kept ("log"), counted per aligned
#: window ("window"), a bucket of fractional tokens ("bucket"), or every timestamp kept and
#: counted for as long as any µs of its sub-window is inside the window ("ring").
MODELS = {
    Strategy.SLIDING_LOG: "log",
    Strategy.FIXED_WINDOW: "window",
    Strategy.TOKEN_BUCKET: "bucket",
    Strategy.GCRA: "bucket",
    # the leases held: those taken within the lease (given back ones are refunds)
    Strategy.CONCURRENCY: "log",
    Strategy.ROLLING_WINDOW: "ring",
}


#: The strategies ``Guard.hit`` takes: all but concurrency, whose leases ``Guard.lease``
#: takes (tests/conformance/test_leases.py); the behaviour tests over "every strategy" run these.
RATE_STRATEGIES = [s for s in Strategy if s is not Strategy.CONCURRENCY]


class NotModeled(NotImplementedError):
    """A rule the reference has no model for."""


class RefRule:
    def __init__(self, rule: Rule) -> None:
        model = MODELS.get(rule.strategy)
        if model is None or rule.calendar or rule.quiet is not None:
            strategy = getattr(rule.strategy, "value", rule.strategy)
            what = "calendar" if rule.calendar else "quiet-hours" if rule.quiet else strategy
            raise NotModeled(
                f"the reference models no {what} rule ({rule.id!r}); modeled: "
                f"{', '.join(s.value for s in MODELS)}: add its model to tests/reference.py"
            )
        self.model = model
        self.rule = rule
        self.capacity = rule.capacity
        self.window = rule.rate.window_us
        self.interval = math.ceil(self.window / rule.limit)
        self.grain = math.ceil(self.window / SUB_WINDOWS)  # a ring's sub-window, µs
        # (timestamp, cost) of every admitted hit, never trimmed
        self.admitted: list[tuple[int, int]] = []
        self.tokens = Fraction(self.capacity)
        self.last: int | None = None

    # -- sliding log, and the rolling window's ring: a log whose units count until their ---
    # -- sub-window's last µs leaves the window ------------------------------------------
    def _count(self, now: int) -> int:
        return sum(n for t, n in self.admitted if self._leaves(t) > now)

    def _leaves(self, t: int) -> int:
        """When a unit admitted at ``t`` stops counting (for a log: ``t + window``)."""
        if self.model == "ring":
            return t - t % self.grain + self.grain - 1 + self.window
        return t + self.window

    # -- fixed window --------------------------------------------------------------------
    def _fixed_count(self, now: int) -> int:
        start = now - now % self.window
        return sum(n for t, n in self.admitted if start <= t < start + self.window)

    # -- buckets -------------------------------------------------------------------------
    def _level(self, now: int) -> Fraction:
        if self.last is None:
            return Fraction(self.capacity)
        return min(Fraction(self.capacity), self.tokens + Fraction(now - self.last, self.interval))

    def check(self, now: int, need: int) -> int:
        """µs until a hit of ``need`` fits (0: now), searched the slow way where possible."""
        if self.model in ("log", "ring"):
            if self._count(now) + need <= self.capacity:
                return 0
            candidates = sorted(
                {self._leaves(t) for t, _ in self.admitted if self._leaves(t) > now}
            )
            for when in candidates:
                if self._count(when) + need <= self.capacity:
                    return when - now
            return max(candidates) - now if candidates else self.window
        if self.model == "window":
            if self._fixed_count(now) + need <= self.capacity:
                return 0
            return now - now % self.window + self.window - now
        level = self._level(now)
        if level >= need:
            return 0
        wait = (need - level) * self.interval
        assert wait.denominator == 1
        return int(wait)

    def consume(self, now: int, cost: int) -> None:
        if self.model == "bucket":
            self.tokens = self._level(now) - cost
            self.last = now
        self.admitted.append((now, cost))

    def report(self, now: int) -> tuple[int, int]:
        if self.model in ("log", "ring"):
            inside = [(t, n) for t, n in self.admitted if self._leaves(t) > now]
            if not inside:
                return self.capacity, 0
            count = sum(n for _, n in inside)
            return max(0, self.capacity - count), max(self._leaves(t) for t, _ in inside) - now
        if self.model == "window":
            count = self._fixed_count(now)
            if not count:
                return self.capacity, 0
            return max(0, self.capacity - count), now - now % self.window + self.window - now
        level = self._level(now)
        reset = (self.capacity - level) * self.interval
        assert reset.denominator == 1
        return math.floor(level), int(reset)


class RefPolicy:
    """All-or-nothing over independent reference rules."""

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.rules = [RefRule(r) for r in rules]

    def hit(self, now: int, cost: int) -> tuple[bool, list[tuple[int, int, int]]]:
        need = max(cost, 1)
        retries = [r.check(now, need) for r in self.rules]
        allowed = all(w == 0 for w, r in zip(retries, self.rules, strict=True) if not r.rule.shadow)
        if allowed and cost:
            for w, r in zip(retries, self.rules, strict=True):
                if w == 0 or not r.rule.shadow:
                    r.consume(now, cost)
        return allowed, [(*r.report(now), w) for r, w in zip(self.rules, retries, strict=True)]


def max_in_any_window(times: list[int], window: int) -> int:
    """The most timestamps inside any half-open interval of length ``window``."""
    times = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best
