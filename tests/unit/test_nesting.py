"""``deeper_than`` against the depth of the JSON value the text encodes, for any value,
strings full of brackets and escaped quotes included, at every bound."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard.config.nesting import deeper_than
from tests.conftest import examples

TEXT = st.text(st.sampled_from('[]{}"\\ax'), max_size=6)
VALUES = st.recursive(
    st.one_of(st.none(), st.integers(), TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=40,
)


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


@settings(max_examples=examples(150))
@given(value=VALUES, most=st.integers(0, 12), wrap=st.integers(0, 40))
def test_it_says_what_the_value_s_depth_says(value: Any, most: int, wrap: int) -> None:
    value = [[value]] if wrap % 3 == 0 else value
    for _ in range(wrap):
        value = {"k": value} if wrap % 2 else [value, 1]
    text = json.dumps(value)
    expected = _depth(value) > most
    assert deeper_than(text, most) is expected
    assert deeper_than(text.encode(), most) is expected


def test_deep_bodies_and_brackets_that_do_not_pair() -> None:
    assert deeper_than(b"[" * 100_000 + b"]" * 100_000, 32)
    assert not deeper_than(b"[" * 32 + b"]" * 32, 32)
    assert deeper_than(b"[" * 33 + b"]" * 33, 32)
    # never closed: a recursive reader still goes down every level before it refuses the
    # text (Python's json.loads: a RecursionError), so they count as nesting
    assert deeper_than(b"[" * 100_000, 32)
    assert deeper_than(b'{"a": 1.5, "b": ' + b"[" * 40, 32)
    assert not deeper_than(b"[" * 32, 32)
    assert deeper_than(b"[" * 20 + b"[" * 13 + b"]" * 13, 32)  # open around a closed part
    assert not deeper_than(b"[" * 20 + b"[" * 12 + b"]" * 12, 32)
    assert not deeper_than(b'["' + b"[" * 100 + b'"]', 32)  # text, not nesting
    assert not deeper_than(b'"\\"' + b"[" * 100, 32)  # an escaped quote keeps a string open
    assert not deeper_than(b'["' + b"[" * 100, 32)  # a string never closed: text to the end
