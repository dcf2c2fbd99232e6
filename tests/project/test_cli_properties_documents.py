"""Random configuration documents, by hypothesis: TOML and YAML drawn from the schema's keys
and plausible values, then bytes that are not UTF-8, duplicate keys, huge numbers and
documents nested past the bound. Each loads, or raises a ConfigError naming its file, never
another exception. Random words are in ``test_cli_properties.py``; the rig is
``cli_property_rig.py``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml
from hypothesis import assume, event, given
from hypothesis import strategies as st

from freqguard.config import SCHEMA, load
from freqguard.errors import ConfigError
from freqguard.strategy import Strategy
from tests.project.cli_property_rig import SETTINGS, TEXT


def _keys(schema: Any) -> set[str]:
    found: set[str] = set()
    for option in [schema, *schema.get("anyOf", ())]:
        for key, sub in option.get("properties", {}).items():
            found |= {key} | _keys(sub)
        if isinstance(option.get("items"), dict):
            found |= _keys(option["items"])
    return found


KEYS = st.one_of(st.sampled_from(sorted(_keys(SCHEMA))), TEXT)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**63, -(2**63) - 1, 10**30]),
    st.floats(),
    TEXT,
    st.sampled_from(["15/minute", "1 per 100000000000000000000 days", "memory://", "gcra"]),
    st.sampled_from(["redis://u:p@h:1/0", "sliding-log", "Europe/Berlin", "08:00", "logging"]),
)
VALUES_TREE = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=16,
)
PLAUSIBLE = {
    "by": st.sampled_from(["recipient", ["recipient", "content"], "cost", "tz"]),
    "strategy": st.sampled_from([s.value for s in Strategy if s is not Strategy.CONCURRENCY]),
    "burst": st.integers(min_value=-2, max_value=10**10),
    "name": st.sampled_from(["a", "b", "quiet-hours", "a b"]),
    "calendar": st.booleans(),
    "tz": st.sampled_from(["UTC", "Asia/Shanghai", "Mars/Base", ""]),
    "tz_from": st.sampled_from(["tz", "cost", "recipient"]),
    "tiers": st.just({"from": "plan", "rates": {"pro": "1 per 100000000000000000000 days"}}),
}
RULE_KEYS = SCHEMA["properties"]["policy"]["items"]["properties"]["rules"]["items"]["properties"]
RULE = st.fixed_dictionaries(
    {"rate": st.one_of(LEAVES, st.just("2 per 59 seconds"))},
    optional={
        key: st.one_of(PLAUSIBLE.get(key, VALUES_TREE), VALUES_TREE)
        for key in RULE_KEYS
        if key != "rate"
    },
)
NAMES_LIST = st.lists(st.sampled_from(["transactional", "marketing", "", "a b"]), max_size=3)
POLICY = st.fixed_dictionaries(
    {"name": st.one_of(st.just("sms"), TEXT), "rules": st.lists(RULE, max_size=3)},
    optional={
        "on_error": st.one_of(st.sampled_from(["raise", "allow", "deny"]), VALUES_TREE),
        "priorities": st.one_of(NAMES_LIST, VALUES_TREE),
        "quiet": st.one_of(
            st.fixed_dictionaries(
                {"start": st.sampled_from(["21:00", "24:00", "9"]), "end": st.just("08:00")},
                optional={"tz": PLAUSIBLE["tz"], "tz_from": PLAUSIBLE["tz_from"]},
            ),
            VALUES_TREE,
        ),
    },
)
TOP = {
    "backend": st.sampled_from(["memory://", "redis://u:p@h:1/0", "redis+cluster://h:1", "x://"]),
    "prefix": st.sampled_from(["fg", "a b", "", "*"]),
    "on_error": st.sampled_from(["raise", {"fallback": "memory://", "workers": 2}]),
    "deny_cache": st.integers(min_value=-1, max_value=10**9),
    "observers": st.sampled_from([["logging"], ["logging", "logging"], ["prometheus"]]),
    "breaker": st.sampled_from([True, False, {"failures": 2, "cooldown": math.nan}]),
}
DOCUMENTS = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            **{key: st.one_of(TOP[key], VALUES_TREE) for key in TOP},
            "policy": st.lists(POLICY, max_size=3),
        },
    ),
    st.dictionaries(KEYS, VALUES_TREE, max_size=5),
)


def _toml(value: Any) -> str:
    """A TOML value (tables inline; no writer in the standard library)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if value.bit_length() < 1000 else hex(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value).replace("inf", "inf")
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_string(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    return '""'  # TOML has no null


def _string(text: str) -> str:
    """A TOML basic string: control characters and DEL escaped, the rest as it is."""
    escaped = (
        f"\\u{ord(c):04x}" if ord(c) < 0x20 or ord(c) == 0x7F else "\\" + c if c in '"\\' else c
        for c in text
    )
    return '"' + "".join(escaped) + '"'


def _text(document: dict[Any, Any], kind: str) -> str:
    if kind == "toml":
        return "".join(f"{_string(str(k))} = {_toml(v)}\n" for k, v in document.items())
    return yaml.safe_dump(document, allow_unicode=True)


@SETTINGS
@given(
    document=DOCUMENTS,
    kind=st.sampled_from(["toml", "yaml"]),
    tail=st.one_of(
        st.just(b""),
        st.sampled_from([b"prefix = 'a'\nprefix = 'b'\n", b"prefix: a\nprefix: b\n"]),
        st.sampled_from(
            [
                b"\xff\xfe",
                b"caf\xe9",
                b"\x00",
                b"[" * 100_000,  # deep documents, in every style: refused at the bound
                b"deep: " + b"[" * 100_000,
                b"deep: " + b"{a: " * 100_000,
                b"- " * 100_000 + b"x",
                b"a = " + b"[" * 100_000 + b"]" * 100_000,
                b"a = " + b"{a = " * 100_000 + b"1" + b"}" * 100_000,
            ]
        ),
        st.sampled_from(
            [b"\nx = 0x" + b"f" * 5000, b"\nx: " + b"9" * 5000, b"\nx = " + b"9" * 5000]
        ),
        st.binary(max_size=20),
    ),
)
def test_random_documents_load_or_name_their_file(
    tmp_path: Path, document: dict[Any, Any], kind: str, tail: bytes
) -> None:
    path = tmp_path / f"app.{kind}"
    try:
        text = _text(document, kind).encode("utf-8", "surrogatepass")
    except (yaml.YAMLError, RecursionError):  # what the writer cannot write
        assume(False)
    path.write_bytes(text + tail)
    try:
        config = load(path)
    except ConfigError as exc:
        message = str(exc)
        event(message[len(str(path)) :][:24])
    else:
        event("loaded")
        assert config.source == str(path)
        return
    assert message.startswith(f"{path}"), message
