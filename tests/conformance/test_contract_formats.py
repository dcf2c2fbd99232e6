"""The specs and states in the contract's formats (``freqguard/script/contract.py``, each
strategy's module): the Python twin writes the specs the Lua parses, field for field; it
decodes every state, full or short (a short one told apart by its size, to the same
numbers), a packed log and a packed ring as the formats say; the numbers after a state's
rules are read where written; and no record of freqguard 0.1 passes for a stamped one.
How the Lua reads them, its steps and its library are ``test_contract.py``'s; the rig is
``contract_rig.py``."""

from __future__ import annotations

import bisect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import Policy, QuietHours, Rule, Strategy
from freqguard.engine.plan import PolicyPlan
from freqguard.script import contract
from freqguard.script.strategies import (
    KINDS,
    SHORT_FORMATS,
    STATE_FORMATS,
    TWINS,
    RuleParams,
    rolling_window,
    sliding_log,
)
from freqguard.script.strategies.base import SHORT_COUNT, SHORT_SPAN
from tests.conformance.contract_rig import _file
from tests.conftest import examples


@pytest.mark.parametrize("strategy", list(SHORT_FORMATS))
def test_each_short_state_is_told_apart_by_its_size(strategy: str) -> None:
    """The Lua tells a short state by its size (its table's ``short_bytes``, generated from
    the module's SHORT_FORMAT): no full form may have that size."""
    short = SHORT_FORMATS[strategy]
    size = sum(contract.widths(short))
    assert size not in {sum(contract.widths(f)) for f in STATE_FORMATS.values()}
    assert "I5" in short  # born's distance, below SHORT_SPAN


def test_an_unstamped_meta_field_can_never_be_read_as_stamped() -> None:
    """freqguard 0.1's meta field started with an expiry in µs (``>I7``, big-endian): its
    first byte stays below the stamps for every number the Lua can store (all below 2^53,
    freqguard.bounds), so no 0.1 record passes for a stamped one."""
    top = (2**53 - 1) >> (8 * (7 - 1))
    assert top < contract.LAYOUT_STAMPS
    assert contract.LAYOUT_STAMPS + contract.RECORD_LAYOUT <= 0xFF


def test_the_python_twin_writes_the_specs_as_the_contract_says() -> None:
    """RuleParams' fields are the rule's numbers, and the spec text reads back as written."""
    assert RuleParams._fields == contract.SPEC_RULE
    policy = Policy(
        "p",
        Rule("5/minute", by="a"),
        Rule("9/hour", by="a"),
        Rule("3/second", by="a", strategy="gcra", burst=4, shadow=True),
    )
    (part,) = PolicyPlan(policy, "fg").parts
    words = iter(map(int, part.spec_text.split()))
    assert next(words) == len(part.specs)
    for spec in part.specs:
        state = {name: next(words) for name in contract.SPEC_STATE}
        assert state == {
            "code": spec.twin.code,
            "shadow": spec.shadow,
            "rule_count": len(spec.rules),
            "window": spec.window,
            "cap": spec.cap,
        }
        for rule in spec.rules:
            assert [next(words) for _ in contract.SPEC_RULE] == list(rule)
    assert next(words, None) is None


#: the logs' states are a header and then entries, decoded as a view (sliding_log.PackedLog),
#: and a rolling window's a header and then counts (test_..._packed_ring_...)
PACKED = ("sliding-log", "concurrency", "rolling-window")


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in PACKED])
def test_the_python_twin_decodes_states_as_the_contract_says(kind: str) -> None:
    widths = contract.widths(STATE_FORMATS[kind])
    values = [7 * (i + 1) + 256**w // 3 for i, w in enumerate(widths)]
    raw = b"".join(v.to_bytes(w, "big") for v, w in zip(values, widths, strict=True))
    assert KINDS[kind].decode(raw) == tuple(values)


_FULL = {  # a state whose short form holds the same numbers, and that short form's numbers
    "fixed-window": (
        (2**55, SHORT_COUNT - 1, 2**55 + SHORT_SPAN - 1),
        (2**55, 2**16 - 1, 2**40 - 1),
    ),
    "calendar": ((2**55, 0, 2**55), (2**55, 0, 0)),
    "gcra": ((2**55 + SHORT_SPAN - 1, 0, 2**55), (2**55 + 2**40 - 1, 2**40 - 1)),
    "token-bucket": ((2**31, 2**55, 0, 2**55 - SHORT_SPAN + 1), (2**31, 2**55, 2**40 - 1)),
}


@pytest.mark.parametrize("kind", list(SHORT_FORMATS))
def test_the_python_twin_decodes_short_states_to_the_same_numbers(kind: str) -> None:
    full, short = _FULL[kind]
    widths = contract.widths(SHORT_FORMATS[kind])
    raw = b"".join(v.to_bytes(w, "big") for v, w in zip(short, widths, strict=True))
    assert KINDS[kind].decode(raw) == full


@pytest.mark.parametrize("kind", ["calendar", "quiet"])
def test_the_numbers_after_a_states_rules_are_read_as_written(kind: str) -> None:
    """The Python twin writes as many numbers after a calendar's or the quiet hours' rule
    as its module's BOUNDS says (the Lua reads that many: BOUNDS, generated from it), and
    the Lua reads them where parse_state expects them."""
    twin = KINDS[kind]
    assert "spec.bounds, at = parse_bounds(spec.code, v, at)" in _file("specs")
    rule = Rule("3/day", by="a", calendar=True, tz="UTC")
    quiet = QuietHours("21:00", "08:00", tz="UTC") if kind == "quiet" else None
    policy = Policy("p", rule if quiet is None else Rule("3/day", by="a"), quiet=quiet)
    plan = PolicyPlan(policy, "fg")
    (part,) = plan.parts_for({"a": "x"}, 1_781_200_000_000_000)
    spec = part.specs[-1]
    assert spec.twin is twin
    assert len(spec.bounds) == twin.BOUNDS  # type: ignore[attr-defined]
    assert part.spec_text.split()[-len(spec.bounds) :] == [str(b) for b in spec.bounds]


def test_the_python_twin_reads_a_packed_log_as_the_contract_says() -> None:
    width, base = 3, 10**12
    head = STATE_FORMATS["sliding-log"]
    assert contract.widths(head) == (1, 7)
    raw = width.to_bytes(1, "big") + base.to_bytes(7, "big")
    raw += b"".join(offset.to_bytes(width, "big") for offset in (0, 5, 2**20))
    assert list(TWINS[Strategy.SLIDING_LOG].decode(raw)) == [base, base + 5, base + 2**20]
    # a keep (the window and count it keeps at least) after the header, when flagged so
    assert contract.widths(sliding_log.KEEP_FORMAT) == (7, 4)
    keep, cap = 3_600_000_000, 100
    kept = (width + sliding_log.KEPT).to_bytes(1, "big") + raw[1:8]
    kept += keep.to_bytes(7, "big") + cap.to_bytes(4, "big") + raw[8:]
    log = sliding_log.decode(kept)
    assert list(log) == [base, base + 5, base + 2**20]
    assert (log.window, log.cap, log.after(base + 4)) == (keep, cap, 2)


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_the_python_twin_reads_a_packed_ring_as_the_contract_says(width: int) -> None:
    """A rolling window's header (the counts' width, grain, born, head), then its counts; a
    carry (its units and when they leave) between them when the width has its flag."""
    assert contract.widths(STATE_FORMATS["rolling-window"]) == (1, 7, 7, 7)
    assert contract.widths(rolling_window.CARRY_FORMAT) == (7, 7)
    grain, born, head, counts = 2_000_000, 2**55 + 3, 2**55 + 4_000_000, (1, 0, 256**width - 1)
    header = zip((width, grain, born, head), (1, 7, 7, 7), strict=True)
    raw = b"".join(v.to_bytes(w, "big") for v, w in header)
    packed = b"".join(count.to_bytes(width, "big") for count in counts)
    decode = KINDS["rolling-window"].decode
    assert decode(raw + packed) == (grain, born, head, counts, 0, 0, 0)
    assert decode(raw) == (grain, born, head, (), 0, 0, 0)
    carry, until = 2**56 - 1, 2**55 + 9
    flagged = (width + rolling_window.CARRIED).to_bytes(1, "big") + raw[1:]
    flagged += carry.to_bytes(7, "big") + until.to_bytes(7, "big")
    assert decode(flagged + packed) == (grain, born, head, counts, carry, until, 0)
    assert decode(flagged) == (grain, born, head, (), carry, until, 0)
    # a keep (the window it carries for at least) after the carry, when flagged so
    assert contract.widths(rolling_window.KEEP_FORMAT) == (7,)
    keep = 3_600_000_000
    both = (width + rolling_window.CARRIED + rolling_window.KEPT).to_bytes(1, "big")
    both += flagged[1:] + keep.to_bytes(7, "big")
    assert decode(both + packed) == (grain, born, head, counts, carry, until, keep)
    kept = (width + rolling_window.KEPT).to_bytes(1, "big") + raw[1:] + keep.to_bytes(7, "big")
    assert decode(kept + packed) == (grain, born, head, counts, 0, 0, keep)


@settings(max_examples=examples(100))
@given(
    width=st.integers(1, 7),
    base=st.integers(0, 2**55),
    picks=st.lists(st.integers(0, 2**56), max_size=40),
    probe=st.integers(-(2**57), 2**57),
)
def test_a_packed_log_counts_entries_after_a_time_as_its_decoded_entries_do(
    width: int, base: int, picks: list[int], probe: int
) -> None:
    """The report bisects the Lua's bytes; it counts what bisecting the numbers counts, at
    every width, below the base, past the widest offset and on an entry itself."""
    offsets = sorted(pick % 256**width for pick in picks)
    raw = width.to_bytes(1, "big") + base.to_bytes(7, "big")
    raw += b"".join(offset.to_bytes(width, "big") for offset in offsets)
    log = sliding_log.decode(raw)
    entries = [base + offset for offset in offsets]
    for t in (probe, base + probe % 256**width, *entries, base - 1, base + 256**width):
        assert log.after(t) == len(entries) - bisect.bisect_right(entries, t)
