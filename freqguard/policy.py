"""Policies: named sets of rules decided together and atomically."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from freqguard.bounds import MAX_POLICY_LOG_ENTRIES, MAX_RULES
from freqguard.errors import ConfigError, shown
from freqguard.options import PRIORITY, QuietHours, TierRates, priority_names
from freqguard.rules import QUIET_RULE, Rule, Strategy, check_name, quiet_rule

__all__ = [
    "ON_ERROR",
    "Fallback",
    "OnError",
    "Policy",
    "QuietHours",
    "check_on_error",
    "check_size",
    "derived",
]

ON_ERROR = ("raise", "allow", "deny")

#: ``"raise"``, ``"allow"``, ``"deny"``, or a backend to fall back on (see freqguard.failure)
OnError = Literal["raise", "allow", "deny"] | Any


class Policy:
    """A named set of rules decided together: a hit is allowed only if every non-shadow rule
    allows it, and then every rule consumes; if any denies, nothing is consumed.

    Args:
        name: the policy's name; part of every storage key.
        *rules: one or more :class:`Rule`.
        on_error: what a store failure answers for this policy, overriding the guard's:
            ``"raise"``, ``"allow"``, ``"deny"`` or a backend to fall back on; None (the
            default) takes the guard's.
        priorities: the priorities a hit names (``hit(..., priority="marketing")``), which
            rules' ``only`` and ``caps`` and the quiet hours' ``exempt`` refer to; every hit
            then names one.
        quiet: :class:`QuietHours` when the policy sends nothing (the pseudo-rule
            ``"quiet-hours"``, decided with the rules, in the same call).

    Raises:
        ConfigError: for a bad name, no rules, a non-Rule, two rules with the same id, a
            bad ``on_error``, priorities no rule's ``only`` or ``caps`` nor the quiet
            hours refer to, quiet hours that exempt every priority, or a policy past its
            bounds: more than 32 rules, or sliding logs that could hold more than 20,000
            entries in all (see :mod:`freqguard.bounds`).
    """

    __slots__ = ("name", "on_error", "priorities", "rules")

    def __init__(
        self,
        name: str,
        *rules: Rule,
        on_error: OnError | None = None,
        priorities: Sequence[str] = (),
        quiet: QuietHours | None = None,
    ) -> None:
        self._make(name, rules, on_error, priorities, quiet, used=True)

    def _make(
        self,
        name: str,
        rules: tuple[Rule, ...],
        on_error: OnError | None,
        priorities: Sequence[str],
        quiet: QuietHours | None,
        used: bool,
    ) -> None:
        if isinstance(name, Rule):  # Policy(Rule(...)): the name left out
            raise ConfigError(f"Policy takes its name first: Policy('sms', {name!r}, ...)")
        self.name = check_name("policy name", name)
        if on_error is not None:
            check_on_error(on_error, f"policy {name!r}")
        self.on_error = on_error
        if not rules:
            raise ConfigError(f"policy {name!r} needs at least one rule")
        seen: dict[str, Rule] = {}
        for rule in rules:
            if not isinstance(rule, Rule):
                raise ConfigError(f"policy {name!r}: expected Rule objects, got {shown(rule)}")
            if rule.id in seen:
                raise ConfigError(
                    f"policy {name!r} has two rules with the id {rule.id!r}; "
                    "give them distinct names"
                )
            seen[rule.id] = rule
        self.priorities = priority_names(f"policy {name!r} priorities", priorities)
        rules = _with_quiet(name, rules, quiet)
        _check_priorities(name, rules, self.priorities)
        if used:
            _check_used(name, rules, self.priorities)
        check_size(name, rules)
        self.rules: tuple[Rule, ...] = tuple(rules)
        both = sorted(set(self.reads) & set(self.dimensions))
        if both:
            raise ConfigError(
                f"policy {name!r}: {both} are both a rule's dimension and what another rule's "
                "rate_for reads (reads=); a context value is either part of keys or not"
            )

    @property
    def dimensions(self) -> tuple[str, ...]:
        """Every dimension a hit must name, in first-use order."""
        return tuple(dict.fromkeys(d for rule in self.rules for d in rule.by))

    @property
    def reads(self) -> tuple[str, ...]:
        """The context values hits may pass besides the dimensions: what rules' ``rate_for``
        read, zones (``tz_from``), and ``priority`` on a policy with priorities."""
        reads = [r for rule in self.rules for r in rule.reads]
        return tuple(dict.fromkeys([*reads, PRIORITY] if self.priorities else reads))

    @property
    def leases(self) -> bool:
        """Whether a rule of the policy counts leases (``"N concurrent"``): then
        ``Guard.lease`` takes it, and ``hit`` refuses it."""
        return any(rule.strategy is Strategy.CONCURRENCY for rule in self.rules)

    @property
    def quiet(self) -> QuietHours | None:
        """The policy's quiet hours (its pseudo-rule ``"quiet-hours"`` decides them)."""
        return next((rule.quiet for rule in self.rules if rule.quiet is not None), None)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Policy):
            return NotImplemented
        mine = (self.name, self.rules, self.on_error, self.priorities)
        return mine == (other.name, other.rules, other.on_error, other.priorities)

    def __hash__(self) -> int:
        return hash((self.name, self.rules))

    def __repr__(self) -> str:
        inner = ", ".join(repr(rule) for rule in self.rules if rule.quiet is None)
        extra = "" if self.on_error is None else f", on_error={self.on_error!r}"
        if self.priorities:
            extra += f", priorities={self.priorities!r}"
        if self.quiet is not None:
            extra += f", quiet={self.quiet!r}"
        return f"Policy({self.name!r}, {inner}{extra})"


def _with_quiet(name: str, rules: tuple[Rule, ...], quiet: object) -> tuple[Rule, ...]:
    """The rules, and the quiet-hours pseudo-rule when ``quiet`` is given (keyed by the
    partition of the policy's first part: decided before any count is taken)."""
    given = [rule for rule in rules if rule.quiet is not None]  # a policy's, passed on
    if quiet is None:
        return rules
    if not isinstance(quiet, QuietHours):
        raise ConfigError(f"policy {name!r}: quiet takes QuietHours(...), got {shown(quiet)}")
    if given:
        raise ConfigError(f"policy {name!r}: its rules already hold quiet hours")
    dimensions = tuple(dict.fromkeys(d for rule in rules for d in rule.by))
    shared = [d for d in dimensions if all(d in rule.by for rule in rules)]
    own = [d for d in dimensions if d in rules[0].by]
    partition = shared[:1] or own[:1]
    return (*rules, quiet_rule(quiet, tuple(partition)))


def _check_priorities(name: str, rules: tuple[Rule, ...], priorities: tuple[str, ...]) -> None:
    """Every priority a rule's ``only`` or ``caps`` or the quiet hours' ``exempt`` names is
    one of the policy's; no rule but the pseudo-rule is named ``"quiet-hours"``."""
    for rule in rules:
        if rule.id == QUIET_RULE and rule.quiet is None:
            raise ConfigError(f"policy {name!r}: {QUIET_RULE!r} names the quiet hours, not a rule")
        named = [*(rule.only or ()), *(p for p, _ in rule.caps)]
        if rule.quiet is not None:
            named += rule.quiet.exempt
        unknown = sorted(set(named) - set(priorities))
        if unknown:
            what = "the quiet hours" if rule.quiet is not None else f"rule {rule.id!r}"
            listed = ", ".join(priorities) or "none: give priorities=(...)"
            raise ConfigError(
                f"policy {name!r}: {what} names priorities {unknown} it does not have "
                f"(its priorities: {listed})"
            )


def derived(name: str, rules: Sequence[Rule], priorities: Sequence[str]) -> Policy:
    """A policy made of a valid one's rules, some of them at another rate (a per-key limit,
    a tier, a fallback's shared-out caps): every check of :class:`Policy` but that its
    priorities are referred to (such a rule keeps its ``only``, not always its caps)."""
    made = Policy.__new__(Policy)
    made._make(name, tuple(rules), None, priorities, None, used=False)
    return made


def _check_used(name: str, rules: tuple[Rule, ...], priorities: tuple[str, ...]) -> None:
    """Priorities that nothing refers to are an option that cannot apply (every hit names
    one, and none changes anything), and quiet hours that exempt every priority never
    deny."""
    if not priorities:
        return
    named = {p for rule in rules for p in (*(rule.only or ()), *(p for p, _ in rule.caps))}
    quiet = next((rule.quiet for rule in rules if rule.quiet is not None), None)
    if quiet is not None and quiet.exempt and set(priorities) <= set(quiet.exempt):
        raise ConfigError(
            f"policy {name!r}: its quiet hours exempt every priority it has "
            f"({', '.join(priorities)}), so they never hold a message back: exempt fewer"
        )
    if not named and (quiet is None or not quiet.exempt):
        raise ConfigError(
            f"policy {name!r}: priorities={priorities!r}, but no rule's only= or caps= nor "
            "the quiet hours' exempt= refer to them, so a hit's priority changes nothing: "
            "give a rule only=[...] or caps={...}, or leave priorities out"
        )


def check_size(name: str, rules: Sequence[Rule]) -> None:
    """Refuse a policy whose hits could cost unbounded work: too many rules, or logs that
    could hold too many entries in all (each rule is within its own bounds already)."""
    if len(rules) > MAX_RULES:
        raise ConfigError(
            f"policy {name!r} has {len(rules)} rules; a policy takes at most {MAX_RULES} "
            "(every hit checks every rule): split it into several policies"
        )
    shared: dict[frozenset[str], int] = {}  # non-shadow logs of one dimension set: one log
    alone = 0
    for rule in rules:
        if rule.strategy in (Strategy.SLIDING_LOG, Strategy.CONCURRENCY):
            size = rule.capacity  # or the largest rate of its tiers' table
            if isinstance(rule.rate_for, TierRates):
                size = max(size, *(rate.limit for rate in rule.rate_for.rates.values()))
            if rule.shadow or rule.only is not None or rule.strategy is Strategy.CONCURRENCY:
                # a log of its own (script.keys)
                alone += size
            else:
                dims = frozenset(rule.by)
                shared[dims] = max(shared.get(dims, 0), size)
    entries = alone + sum(shared.values())
    if entries > MAX_POLICY_LOG_ENTRIES:
        raise ConfigError(
            f"policy {name!r}: its sliding logs could hold {entries} entries at once; a "
            f"policy's logs hold at most {MAX_POLICY_LOG_ENTRIES} in all (one per admitted "
            "unit, each trimmed by every hit): use rolling-window (the same cap, in a state of "
            "fixed size), gcra or fixed-window for the large rules"
        )


class Fallback:
    """A backend to fall back on while the store is away, with the caps shared out.

    A fallback ``MemoryBackend()`` keeps per-process counts: N worker processes falling back
    admit up to N times a limit between them. ``Fallback(MemoryBackend(), workers=N)`` gives
    each process 1/N of every rule's limit (and of a bucket's burst), rounded down and at
    least 1, so that the N together admit about the limit (at most N times it where a limit
    is smaller than N). Its decisions say ``source == "fallback"`` and report the shared-out
    limits.

    Args:
        backend: the backend to decide on (a sync one for Guard, an async one for
            AsyncGuard; ``MemoryBackend`` is both).
        workers: how many processes share the limits while falling back (>= 1).

    Raises:
        ConfigError: ``workers`` is not an integer >= 1, or ``backend`` is not a backend.
    """

    __slots__ = ("backend", "workers")

    def __init__(self, backend: Any, workers: int) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigError(f"Fallback workers must be an integer >= 1, got {shown(workers)}")
        if isinstance(backend, (str, Fallback)) or not hasattr(backend, "clock"):
            raise ConfigError(
                f"Fallback takes a backend (e.g. MemoryBackend()), got {shown(backend)}"
            )
        self.backend, self.workers = backend, workers

    def __repr__(self) -> str:
        return f"Fallback({self.backend!r}, workers={self.workers})"


def check_on_error(value: object, where: str, methods: tuple[str, ...] | None = None) -> object:
    """``value`` if it is a valid ``on_error``: ``"raise"``, ``"allow"``, ``"deny"``, a
    backend or a :class:`Fallback` (with ``methods``, when given: what the guard will call
    on the backend)."""
    if isinstance(value, Fallback):
        check_on_error(value.backend, where, methods)
        return value
    if isinstance(value, str):
        if value in ON_ERROR:
            return value
    elif hasattr(value, "clock"):
        wanted = methods or ("execute_many",)
        if all(callable(getattr(value, m, None)) for m in wanted) or (
            methods is None and callable(getattr(value, "aexecute_many", None))
        ):
            return value
        if methods is not None:
            raise ConfigError(
                f"{where}: the fallback backend {value!r} lacks {', '.join(methods)}: a "
                f"{'sync' if methods[0] == 'execute' else 'async'} guard needs one it can drive"
            )
    raise ConfigError(
        f"{where}: on_error must be 'raise', 'allow', 'deny' or a backend to fall back on "
        f"(e.g. MemoryBackend()), got {shown(value)}"
    )
