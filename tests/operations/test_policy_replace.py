"""``add_policy(policy, replace=True)``: a policy's rules changed under its name (a setting
changed in a test, a throttle's rate changed at run time) decide from then on; a state both
versions keep goes on counting (the sliding log of a dimension's hits, read by every
sliding-log rule keyed by it; any other rule's, by its id), as a rate changed in DRF's
settings goes on reading the history kept; a decision of the old one is not refunded."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.backends.base import SyncBackend
from freqguard.denycache import DenyCache
from tests.conftest import START, examples


def _codes(guard: Guard, times: int, policy: str = "p") -> list[bool]:
    return [guard.hit(policy, user="u").allowed for _ in range(times)]


def test_a_replaced_policy_decides_with_its_new_rules(backend: SyncBackend) -> None:
    guard = Guard(backend, [Policy("p", Rule("2/minute", by="user"))], clock=ManualClock(START))
    assert _codes(guard, 3) == [True, True, False]
    guard.add_policy(Policy("p", Rule("4/minute", by="user")), replace=True)
    assert [rule.id for rule in guard.policies["p"].rules] == ["sl.4.60s"]
    # the user's log of hits is the same: two more make the new rate's four
    assert _codes(guard, 3) == [True, True, False]


def test_a_state_of_a_rule_only_the_new_version_has_starts_empty(backend: SyncBackend) -> None:
    guard = Guard(
        backend,
        [Policy("p", Rule("2/minute", by="user", strategy="fixed-window"))],
        clock=ManualClock(START),
    )
    assert _codes(guard, 2) == [True, True]
    three = Rule("3/minute", by="user", strategy="fixed-window")
    guard.add_policy(Policy("p", three), replace=True)
    assert _codes(guard, 4) == [True, True, True, False]


def test_without_replace_a_different_policy_is_refused_naming_the_way() -> None:
    guard = Guard(MemoryBackend(), [Policy("p", Rule("2/minute", by="user"))])
    with pytest.raises(ConfigError, match=r"replace=True\) replaces it"):
        guard.add_policy(Policy("p", Rule("3/minute", by="user")))


def test_an_old_decision_is_not_refunded_by_the_new_policy() -> None:
    guard = Guard(MemoryBackend(), [Policy("p", Rule("2/minute", by="user"))])
    decision = guard.hit("p", user="u")
    guard.add_policy(Policy("p", Rule("3/minute", by="user")), replace=True)
    with pytest.raises(ConfigError, match="as it was registered then"):
        guard.refund(decision)


def test_the_deny_cache_forgets_the_old_rules_denials() -> None:
    clock = ManualClock(START)
    guard = Guard(
        MemoryBackend(),
        [Policy("p", Rule("1/minute", by="user"))],
        clock=clock,
        deny_cache=DenyCache(100),
    )
    assert _codes(guard, 2) == [True, False]  # the denial is cached for a minute
    guard.add_policy(Policy("p", Rule("5/minute", by="user")), replace=True)
    assert _codes(guard, 1) == [True]


def test_the_async_face_sees_the_replacement() -> None:
    import asyncio

    from freqguard.decorators.adapters import as_async

    guard = Guard(MemoryBackend(), [Policy("p", Rule("1/minute", by="user"))])
    face = as_async(guard)
    face.add_policy(Policy("p", Rule("3/minute", by="user")), replace=True)
    assert guard.policies["p"].rules[0].id == "sl.3.60s"

    async def hits() -> list[bool]:
        return [(await face.hit("p", user="u")).allowed for _ in range(4)]

    assert asyncio.run(hits()) == [True, True, True, False]


_rules = st.tuples(st.integers(1, 4), st.sampled_from(["sliding-log", "fixed-window"]))


def _state(rule: Rule) -> str:
    """The state a rule reads in the model: one log for every sliding-log rule of a
    dimension, else its own (by id)."""
    return "log" if rule.strategy.value == "sliding-log" else rule.id


@settings(max_examples=examples(40))
@given(
    steps=st.lists(
        st.one_of(st.just("hit"), st.lists(_rules, min_size=1, max_size=2, unique_by=str)),
        min_size=1,
        max_size=20,
    )
)
def test_hits_follow_the_newest_rules_against_a_model(steps: list[object]) -> None:
    """Random hits and replacements on a pinned clock: a hit is admitted exactly when
    every rule now registered has room in the state it reads, each state counting the hits
    admitted while a rule reading it was registered."""
    first = Rule("2/minute", by="user")
    guard = Guard(MemoryBackend(), [Policy("p", first)])
    guard.clock = ManualClock(START)
    rules = [first]
    counts: dict[str, int] = {}
    for step in steps:
        if step == "hit":
            expected = all(counts.get(_state(rule), 0) < rule.limit for rule in rules)
            assert guard.hit("p", user="u").allowed is expected
            if expected:
                for state in {_state(rule) for rule in rules}:
                    counts[state] = counts.get(state, 0) + 1
        else:
            made = [Rule(f"{n}/minute", by="user", strategy=s) for n, s in step]  # type: ignore[attr-defined]
            if len({rule.id for rule in made}) < len(made):
                continue
            guard.add_policy(Policy("p", *made), replace=True)
            rules = made


@settings(max_examples=examples(30))
@given(replace=st.one_of(st.none(), st.integers(), st.text(max_size=5), st.floats()))
def test_a_replace_that_is_not_a_bool_is_refused(replace: object) -> None:
    guard = Guard(MemoryBackend(), [Policy("p", Rule("2/minute", by="user"))])
    with pytest.raises(ConfigError, match="replace must be True or False"):
        guard.add_policy(Policy("p", Rule("3/minute", by="user")), replace=replace)  # type: ignore[arg-type]
    assert guard.policies["p"].rules[0].id == "sl.2.60s"


def test_a_new_rule_whose_old_field_tag_collides_with_a_removed_ones_starts_empty(
    any_store: SyncBackend,
) -> None:
    """A deploy that removes rule c (fixed window, by u) and adds rule d (GCRA, by t): both
    states are in the record fg:{x}:p (the partition value is the same text), and their
    2-byte tags, which named them up to layout 3, are alike (0x3020). Seen failing before
    the third tag byte (design note 79): d read c's fixed-window bytes as a GCRA state,
    and every call failed in the Lua's unpack. Found by the operations model."""
    old = Rule("3/minute", by="u", name="c", strategy="fixed-window")
    guard = Guard(any_store, [Policy("p", old)], clock=ManualClock(START))
    assert [guard.hit("p", u="x").allowed for _ in range(4)] == [True, True, True, False]
    new = Rule("2/minute", by="t", name="d", strategy="gcra")
    guard.add_policy(Policy("p", new), replace=True)
    assert [guard.hit("p", t="x").allowed for _ in range(3)] == [True, True, False]
