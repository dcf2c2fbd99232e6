"""Keys: distinct contexts never share a key, and every key of one script call shares a part,
for the SMS policy and for any policy (``keys.policy_layout``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from freqguard import Policy, Rule, Strategy
from freqguard.engine.plan import PolicyPlan
from freqguard.script.contract import HIT
from freqguard.script.keys import policy_layout
from tests.conftest import SMS
from tests.reference import RATE_STRATEGIES

values = st.one_of(
    st.text(max_size=80),
    st.sampled_from(["", "{", "}", "{}", ":", "a:b", "{x}", "=abc", "*sms", "é", "18829340001"]),
    st.integers(-(10**12), 10**12),
)


def _keys(plan: PolicyPlan, ctx: dict[str, object]) -> list[tuple[str, ...]]:
    return [call.keys() for call in plan.calls(plan.texts(ctx), 0, 1, HIT)]


@given(values, values, values, values)
def test_distinct_contexts_never_share_a_key(
    r1: object, c1: object, r2: object, c2: object
) -> None:
    plan = PolicyPlan(SMS, "fg")
    keys1 = _keys(plan, {"recipient": r1, "content": c1})[0]
    keys2 = _keys(plan, {"recipient": r2, "content": c2})[0]
    same_recipient = str(r1) == str(r2)
    same_content = str(c1) == str(c2)
    # the recipient log is shared exactly when the recipient is the same
    assert (keys1[0] == keys2[0]) == same_recipient
    assert (keys1[1] == keys2[1]) == (same_recipient and same_content)
    assert not set(keys1) & {keys2[1 - i] for i in range(2)} or same_recipient


@given(values, values)
def test_every_key_of_one_hit_shares_a_slot(recipient: object, content: object) -> None:
    plan = PolicyPlan(SMS, "fg")
    (keys,) = _keys(plan, {"recipient": recipient, "content": content})
    assert len({key_slot(k.encode("utf-8", "surrogatepass")) for k in keys}) == 1
    assert all(k.count("{") == 1 and k.count("}") == 1 for k in keys)


@given(values, values)
def test_values_never_appear_verbatim_outside_the_hash_tag(
    recipient: object, content: object
) -> None:
    plan = PolicyPlan(SMS, "fg")
    (keys,) = _keys(plan, {"recipient": recipient, "content": content})
    for key in keys:
        tail = key.split("}", 1)[1]
        text = str(content)
        assert len(text) < 4 or text not in tail.split(":", 2)[-1].split(":", 1)[-1]


def test_dimension_names_keep_equal_values_apart() -> None:
    policy = Policy("api", Rule("5/minute", by="user"), Rule("9/minute", by="ip", name="ip"))
    plan = PolicyPlan(policy, "fg")
    # rules share no dimension: each is decided on its own part
    assert len(plan.parts) == 2
    user_key, ip_key = (keys[0] for keys in _keys(plan, {"user": "1.2.3.4", "ip": "1.2.3.4"}))
    assert user_key != ip_key
    assert user_key.startswith("fg:{1.2.3.4}:api:")


def test_key_layout_is_readable() -> None:
    plan = PolicyPlan(SMS, "fg")
    (keys,) = _keys(plan, {"recipient": "18829340001", "content": "Your code is 1234"})
    assert keys[0] == "fg:{18829340001}:sms:log@recipient"
    assert keys[1].startswith("fg:{18829340001}:sms:log@recipient,content:")
    assert "Your code" not in keys[1]
    global_plan = PolicyPlan(Policy("vendor", Rule("200/second", strategy="gcra")), "fg")
    (gkeys,) = _keys(global_plan, {})
    assert gkeys == ("fg:{*vendor}:vendor:gcra.200.1s@",)
    (escaped,) = _keys(plan, {"recipient": "a}b{c", "content": ""})
    assert escaped[0].startswith("fg:{=")
    assert "a}b" not in escaped[0]


@given(values, values, values)
def test_redis_record_and_field_are_the_key_split(a: object, b: object, c: object) -> None:
    """Redis stores each key as a field of a record; both are built straight from the
    context, and must be exactly the key cut after its policy and its digest unhexed."""
    policy = Policy(
        "mixed",
        Rule("1/second", by=("a",), strategy="gcra", name="g"),
        Rule("2/minute", by=("a", "b")),
        Rule("3/minute", by=("a", "b", "c"), strategy="fixed-window", name="f"),
    )
    global_policy = Policy("glob", Rule("5/second", strategy="gcra", name="all"))
    for plan, ctx in (
        (PolicyPlan(policy, "fg"), {"a": a, "b": b, "c": c}),
        (PolicyPlan(global_policy, "fg"), {}),
    ):
        texts = plan.texts(ctx)
        for call in plan.calls(texts, 0, 1, HIT):
            for layout, key in zip(call.part.layouts, call.keys(), strict=True):
                record, field = layout.record(texts), layout.field(texts)
                assert key.startswith(record + ":" + layout.key_id)
                rest = key[len(record) + 1 + len(layout.key_id) :]
                assert field == layout.field_tag + bytes.fromhex(rest.removeprefix(":"))


DIMENSIONS = ("a", "b", "c", "d")
rules = st.builds(
    lambda by, strategy, shadow: (by, strategy, shadow),
    st.lists(st.sampled_from(DIMENSIONS), unique=True, max_size=3).map(tuple),
    st.sampled_from(RATE_STRATEGIES),
    st.booleans(),
)


def _policy(specs: list[tuple[tuple[str, ...], Strategy, bool]]) -> Policy:
    return Policy(
        "any",
        *(
            Rule("5/minute", by=by, strategy=strategy, shadow=shadow, name=f"r{i}")
            for i, (by, strategy, shadow) in enumerate(specs)
        ),
    )


@given(st.lists(rules, min_size=1, max_size=6), st.lists(values, min_size=4, max_size=4))
def test_any_policy_is_laid_out_in_slots_each_on_one_cluster_slot(
    specs: list[tuple[tuple[str, ...], Strategy, bool]], ctx_values: list[object]
) -> None:
    """Every rule's state is in exactly one part; every key of one part's call lands on one
    cluster part; only non-shadow sliding-log rules of the same dimensions share a state."""
    policy = _policy(specs)
    layout = policy_layout(policy, "fg")
    held = sorted(i for part in layout for state in part for i in state.rules)
    assert held == list(range(len(policy.rules)))
    for part in layout:
        for state in part:
            members = [policy.rules[i] for i in state.rules]
            if len(members) > 1:
                assert all(r.strategy is Strategy.SLIDING_LOG and not r.shadow for r in members)
                assert len({frozenset(r.by) for r in members}) == 1
    plan = PolicyPlan(policy, "fg")
    ctx = dict(zip(plan.dimensions, ctx_values, strict=False))
    calls = _keys(plan, ctx)
    assert len(calls) == len(layout)
    for keys in calls:
        assert len({key_slot(k.encode("utf-8", "surrogatepass")) for k in keys}) == 1
    every = [k for keys in calls for k in keys]
    assert len(set(every)) == len(every), "two states of one hit never share a key"


def test_the_partition_is_the_first_dimension_every_rule_shares() -> None:
    policy = Policy(
        "p",
        Rule("5/minute", by=("a", "b"), name="ab"),
        Rule("9/minute", by=("c", "b"), strategy="gcra", name="cb"),
    )
    ((log, gcra),) = policy_layout(policy, "fg")  # one part: b is shared, a is not
    texts = {"a": "1", "b": "2", "c": "3"}
    assert log.key.build(texts).startswith("fg:{2}:p:log@a,b:")
    assert gcra.key.build(texts).startswith("fg:{2}:p:cb/gcra@b,c:")  # dimensions in policy order
    assert (log.rules, gcra.rules) == ((0,), (1,))
    # no shared dimension: each rule's first dimension in policy order (first use: b, a, c),
    # one part each
    apart = Policy("q", Rule("5/minute", by=("b", "a")), Rule("9/minute", by="c", strategy="gcra"))
    ((first,), (second,)) = policy_layout(apart, "fg")
    assert first.key.build(texts).startswith("fg:{2}:q:log@b,a:")
    assert second.key.build(texts) == "fg:{3}:q:gcra.9.60s@c"


def test_a_named_rules_state_is_named_by_what_it_is() -> None:
    """A rule keeps its name when its strategy changes (or it becomes a calendar's): its
    state is then another field, never the other strategy's state misread."""
    fields = set()
    for strategy in RATE_STRATEGIES:
        for calendar in (False, True):
            if calendar and strategy is not Strategy.FIXED_WINDOW:
                continue
            zone = "UTC" if calendar else None
            rule = Rule("5/day", by="a", strategy=strategy, name="r", calendar=calendar, tz=zone)
            ((state,),) = policy_layout(Policy("p", rule), "fg")  # a log: "log", named or not
            fields.add(state.key.field({"a": "1"}))
    assert len(fields) == len(RATE_STRATEGIES) + 1


#: Rules whose states' first two tag bytes are alike (``c/fw@u``, ``d/gcra@t``: 0x3020), and
#: others: what a deploy adds or removes beside the rules it keeps.
DEPLOYED = (
    Rule("5/minute", by="u", name="c", strategy="fixed-window"),
    Rule("5/minute", by="t", name="d", strategy="gcra"),
    Rule("5/minute", by="u", name="e", strategy="gcra"),
    Rule("5/minute", by="u"),
    Rule("6/minute", by="t"),
)


@given(st.sets(st.sampled_from(range(len(DEPLOYED))), min_size=1), st.sets(st.integers(0, 4)))
def test_a_states_field_is_named_by_its_own_key_id_whatever_the_other_rules(
    kept: set[int], others: set[int]
) -> None:
    """Design note 94: a state's 3-byte tag is a function of its key id, so a deploy that
    adds or removes other rules never renames it (up to 0.3.0 it did, when a rule whose
    2-byte tag it shared came or went: its count started afresh in Redis). A state whose
    2-byte tag another's shares is sent with its 0.3.0 wide name first."""
    before = Policy("p", *(DEPLOYED[i] for i in sorted(kept)))
    after = Policy("p", *(DEPLOYED[i] for i in sorted(kept | others)))
    named: dict[str, bytes] = {}
    for policy in (before, after):
        states = [s.key for part in policy_layout(policy, "fg") for s in part]
        for key in states:
            assert named.setdefault(key.key_id, key.field_tag) == key.field_tag
            shared = [k for k in states if k.field_tag[:2] == key.field_tag[:2]]
            assert key.sent_tag == key.old_tag + key.field_tag
            assert bool(key.old_tag) == (len(shared) > 1)
            assert len(key.field_tag) == 3
