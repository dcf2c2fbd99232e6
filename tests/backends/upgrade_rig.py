"""The rig of the upgrade tests (``test_record_layout.py``, ``test_old_names.py``,
``test_wide_names.py``): older releases' policy functions, a backend that encodes calls as
their clients did (``_OldCalls``), and replays across the swap to this release's function
held to the memory backend's decisions.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from redis import Redis

from freqguard import (
    Decision,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Strategy,
)
from freqguard.backends._library import FUNCTION, LIBRARY
from freqguard.backends.redis import RedisBackend
from freqguard.script.calls import Part, Reply, ScriptCall, spec_text
from freqguard.script.contract import (
    LAYOUT_STAMPS,
    OLD_SPEC_RULE,
    OLD_TAG_BYTES,
    RECORD_LAYOUT,
)
from freqguard.script.keys import KeyLayout
from freqguard.script.limits import parse_change
from tests.conformance.test_differential import _replay, ctx, op, rule
from tests.conftest import START, examples

FIXTURES = Path(__file__).parents[1] / "fixtures"
RELEASE_0_1_0 = (FIXTURES / "policy-0.1.0.lua").read_text(encoding="utf-8")
MAIN_0_1 = (FIXTURES / "policy-0.1-main.lua").read_text(encoding="utf-8")
FULL_0_2 = (FIXTURES / "policy-0.2-full.lua").read_text(encoding="utf-8")
TAGS_0_2 = (FIXTURES / "policy-0.2-tags.lua").read_text(encoding="utf-8")
RECORD = "fg:{a}:sms"
MARK = bytes([LAYOUT_STAMPS + RECORD_LAYOUT])


def _deploy(client: Redis, code: str) -> None:
    """Put a policy function on the server under this release's name."""
    client.function_load(code.replace("__LIBRARY__", FUNCTION), replace=True)


class _OldCalls:
    """A backend that, while ``old``, sends each call as the 0.1 and 0.2 clients encoded
    it, for the fixtures' functions: each rule without its burst and mark (``SPEC_RULE``'s
    last numbers, which they do not read) and a LIMIT change without the tags it keeps (they
    kept the tags of the call's rules); each state's field named by its 2-byte tag, as
    every layout before 6 named it. ``tags_only``: as this release's builds before layout
    6 encoded it (the policy-0.2-tags fixture), and 0.3.0: the names alone differ, and
    the specs without the window and count a state keeps (design note 103). ``named``: how
    the old client named a state's field (``_old_tag`` unless given)."""

    def __init__(
        self,
        backend: RedisBackend,
        tags_only: bool = False,
        named: Callable[[KeyLayout], KeyLayout] | None = None,
    ) -> None:
        self.backend, self.old, self.tags_only = backend, True, tags_only
        self.named = named or _old_tag

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def execute(self, call: ScriptCall) -> Reply:
        return self.backend.execute(self._call(call))

    def execute_many(self, many: Any) -> list[Reply]:
        return self.backend.execute_many([self._call(call) for call in many])

    def _call(self, call: ScriptCall) -> ScriptCall:
        if not self.old:
            return call
        layouts = tuple(map(self.named, call.part.layouts))
        if self.tags_only:  # the specs as they wrote them: without what a state keeps
            text = spec_text(call.part.specs, kept=False)
            return call._replace(part=call.part._replace(spec_text=text, layouts=layouts))
        change = call.change
        if change:
            change = " ".join(map(str, parse_change(change)[1]))
        return call._replace(
            part=call.part._replace(spec_text=_old_specs(call.part), layouts=layouts),
            change=change,
        )


def _old_tag(layout: KeyLayout) -> KeyLayout:
    """``layout`` naming its state's field as layouts 2 and 3 did: by the first
    ``OLD_TAG_BYTES`` of its tag, or by its wide tag when those collide."""
    old = _wide_tag(layout)
    if not layout.old_tag:
        old.field_tag = old.sent_tag = layout.field_tag[:OLD_TAG_BYTES]
    return old


def _wide_tag(layout: KeyLayout) -> KeyLayout:
    """``layout`` naming its state's field as 0.3.0 did: by its 3-byte tag, or by its
    ``WIDE_TAG_BYTES`` tag when the first ``OLD_TAG_BYTES`` of its tag are another
    state's of the policy (the tag then depended on the other rules: design note 94)."""
    old = copy.copy(layout)
    if layout.old_tag:
        old.field_tag = old.sent_tag = layout.old_tag
        old.old_tag = b""
    return old


def _old_specs(part: Part) -> str:
    words = [len(part.specs)]
    for spec in part.specs:
        words += [spec.twin.code, int(spec.shadow), len(spec.rules)]
        for params in spec.rules:
            words += [int(value) for value in params][: len(OLD_SPEC_RULE) - 1]
        words += spec.bounds or (0,) * getattr(spec.twin, "BOUNDS", 0)
    return " ".join(map(str, words))


def _meta(client: Redis) -> bytes:
    return client.hget(RECORD, "") or b""  # type: ignore[return-value]


def _upgrading(strategies: Sequence[Strategy], quick: int) -> Callable[[Any], Any]:
    """A property test of an upgrade: random rules of ``strategies``, contexts, and
    operations before and after the swap of functions (the differential tests' generators)."""

    def made(test: Any) -> Any:
        return settings(max_examples=examples(quick))(
            given(
                rules=st.lists(rule(list(strategies)), min_size=1, max_size=4),
                pool=st.lists(ctx, min_size=1, max_size=3),
                before=st.lists(op, min_size=1, max_size=30),
                after=st.lists(op, min_size=1, max_size=30),
            )(test)
        )

    return made


def _read_on_exactly(
    client: Redis,
    backend: _OldCalls,
    old: str,
    policy: Policy,
    pool: list[dict[str, str]],
    before: list[Any],
    after: list[Any],
    one_part: bool = False,
) -> None:
    """``before`` replayed through the ``old`` function (and ``backend``'s old encoding),
    then the swap to this release's; the hits made before it are given back after it (their
    receipts name the states' generations as the older layout stored them), then ``after``:
    every decision the memory backend's over the whole sequence. ``one_part``: limits set
    on one part's rules only (see :func:`_limits_of_one_part`)."""
    clock, reference_clock = ManualClock(START), ManualClock(START)
    guard = Guard(backend, [policy], clock=clock)
    reference = Guard(MemoryBackend(), [policy], clock=reference_clock)
    if one_part:
        before = _limits_of_one_part(guard, policy, before)
    before = _no_reset_after_a_rebirth(policy, _no_stricter_limit_of_a_log(policy, before))
    before = _no_bucket_refund_after_a_limit(policy, before)
    _deploy(client, old)
    try:
        written = _replay(guard, clock, policy, pool, before)
        expected = _replay(reference, reference_clock, policy, pool, before)
        assert written == expected
        _deploy(client, LIBRARY)
        backend.old = False
        for mine, theirs in zip(_unspent(written), _unspent(expected), strict=True):
            assert guard.refund(mine) == reference.refund(theirs)
        assert _replay(guard, clock, policy, pool, after) == _replay(
            reference, reference_clock, policy, pool, after
        )
    finally:
        _deploy(client, LIBRARY)


def _limits_of_one_part(guard: Guard, policy: Policy, ops: list[Any]) -> list[Any]:
    """``ops`` with the per-key limits set or cleared on the rules of one part only.

    Rules of two parts whose partition values are equal (``u="a"`` and ``c="a"``) keep
    their limits in one record, and a 0.1 or 0.2 client's change named the tags to keep as
    its own part's: setting or clearing a limit of one part dropped the other's. That is
    what those releases stored, and this release reads it as stored; the reference, which
    never dropped one, cannot follow it there (found by this test: a limit on a rule keyed
    by ``u``, then a clear on one keyed by ``c``, lost the first)."""
    plan = guard._policies.plan(policy.name)
    first: int | None = None
    kept = []
    for item in ops:
        if item[0] in ("limit", "clear"):
            index = item[1][1] % len(policy.rules)
            part = next(n for n, p in enumerate(plan.parts) if index in p.rule_index)
            first = part if first is None else first
            if part != first:
                continue
        kept.append(item)
    return kept


def _no_stricter_limit_of_a_log(policy: Policy, ops: list[Any]) -> list[Any]:
    """``ops`` without the per-key limits stricter than a log's own rate (a shorter window,
    a smaller count), or of a shorter window than a rolling window's. Under one, an older
    release's log kept only the limit's entries, where this one keeps its own rate's too
    (design note 87), and its rolling window forgot what left the limit's ring, where this
    one carries it (design note 88): what the older one dropped, this one cannot read back,
    and the reference never dropped it."""
    kept = []
    for item in ops:
        if item[0] == "limit" and item[2] != 0 and item[2][0] is not None:
            rule = policy.rules[item[1][1] % len(policy.rules)]
            limit, window = item[2][0], item[2][1] * 100_000
            own = round(rule.rate.window.total_seconds() * 1_000_000)
            logs = rule.strategy in (Strategy.SLIDING_LOG, Strategy.CONCURRENCY)
            if logs and (window < own or limit < rule.rate.limit):
                continue
            if rule.strategy is Strategy.ROLLING_WINDOW and window < own:
                continue
        kept.append(item)
    return kept


def _no_bucket_refund_after_a_limit(policy: Policy, ops: list[Any]) -> list[Any]:
    """``ops`` without, for a policy with a token bucket, the refunds that come after a
    change of limits: a bucket's rate may then differ from its hit's, and this release gives
    back at most the tokens a hit took, where an older one counted the hit's span at the
    new rate (a faster one gave back more than was taken: the fault fixed); the reference,
    this release's, never did."""
    if not any(rule.strategy is Strategy.TOKEN_BUCKET for rule in policy.rules):
        return ops
    kept, limited = [], False
    for item in ops:
        limited = limited or item[0] in ("limit", "clear")
        if not (limited and item[0] in ("undo", "refund")):
            kept.append(item)
    return kept


def _no_reset_after_a_rebirth(policy: Policy, ops: list[Any]) -> list[Any]:
    """``ops`` without the resets that come after a refund or a change of limits, nor, for a
    policy with a fixed window, any change of limits. Either may begin a count or a bucket
    born after its call's time (a full bucket's new generation, a limit's window begun in
    the same µs), after which this release's reset ends later than an older one's did, and
    an older release's fixed window began a count that a receipt from before matched
    (design note 102: the faults fixed); the reference, this release's, never had them."""
    fixed = any(rule.strategy is Strategy.FIXED_WINDOW for rule in policy.rules)
    kept, reborn = [], False
    for item in ops:
        if fixed and item[0] in ("limit", "clear"):
            continue
        reborn = reborn or item[0] in ("undo", "refund", "limit", "clear")
        if not (reborn and item[0] == "reset"):
            kept.append(item)
    return kept


def _unspent(replayed: list[object]) -> list[Decision]:
    """The decisions of a replay whose receipts can still be refunded, in order."""
    found: list[Decision] = []
    for item in replayed:
        for decision in item if isinstance(item, list) else [item]:
            if isinstance(decision, Decision) and decision.receipt and not decision.receipt.spent:
                found.append(decision)
    return found
