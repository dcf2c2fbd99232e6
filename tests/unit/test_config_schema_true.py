"""The published JSON schema (``docs/config.schema.json``) stays true under hostile values:
a document with any field of a full configuration replaced by a hostile value (a wrong
type, an integer past 64 bits, a long or empty string, a NUL, a nested list) that
:func:`~freqguard.config.loads` takes, the schema takes too (an editor that checks a file
against it never refuses one freqguard loads), and every refusal of ``loads`` is a short
ConfigError naming the file."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freqguard import ConfigError
from freqguard.config import ENV, loads
from tests.conftest import examples

jsonschema = pytest.importorskip("jsonschema")
yaml = pytest.importorskip("yaml")

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "docs" / "config.schema.json").read_text()
)
#: A configuration using every field.
FULL: dict[str, Any] = {
    "backend": "memory://",
    "prefix": "fg",
    "on_error": "raise",
    "deny_cache": 0,
    "observers": ["logging"],
    "breaker": {"failures": 5, "cooldown": 1.0},
    "policy": [
        {
            "name": "sms",
            "on_error": {"fallback": "memory://", "workers": 2},
            "priorities": ["hi", "lo"],
            "quiet": {"start": "22:00", "end": "07:00", "tz": "UTC", "exempt": ["hi"]},
            "rules": [
                {
                    "rate": "5/minute",
                    "by": ["recipient"],
                    "strategy": "token-bucket",
                    "name": "r",
                    "burst": 5,
                    "shadow": False,
                    "only": ["hi", "lo"],
                    "caps": {"lo": 2},
                    "tiers": {"from": "plan", "rates": {"pro": "9/minute"}},
                },
                {"rate": "2 concurrent", "lease": 30, "name": "c"},
                {"rate": "9/day", "calendar": True, "tz": "UTC", "name": "d"},
            ],
        }
    ],
}


def _places(document: object, at: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    if isinstance(document, dict):
        for key, value in document.items():
            yield (*at, key)
            yield from _places(value, (*at, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield (*at, index)
            yield from _places(value, (*at, index))


PLACES = list(_places(FULL))
#: Values a JSON (and YAML) document can hold.
VALUES = st.one_of(
    st.sampled_from(
        [None, True, False, 0, -1, 2**64, -(2**63) - 1, 10**30, 0.0, -0.0, 1e308, 5e-324]
    ),
    st.sampled_from(["", "a\x00b", "x" * 100_000, "5/minute", "memory://", "UTC", "fg"]),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10),
    st.recursive(
        st.one_of(st.integers(), st.text(max_size=5), st.booleans()),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=6,
    ),
)


@pytest.fixture(autouse=True)
def _no_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


def test_the_full_configuration_loads_and_the_schema_takes_it() -> None:
    loads(yaml.safe_dump(FULL), "yaml", "c.yaml")
    jsonschema.validate(FULL, SCHEMA)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck))
@given(place=st.sampled_from(PLACES), value=VALUES, kind=st.sampled_from(["yaml", "json"]))
def test_what_loads_takes_the_published_schema_takes(
    place: tuple[str | int, ...], value: object, kind: str
) -> None:
    document = copy.deepcopy(FULL)
    parent: Any = document
    for step in place[:-1]:
        parent = parent[step]
    parent[place[-1]] = value
    # JSON is YAML: the schema's own language, read by the YAML loader (as YAML 1.1 reads
    # it: ``5e-324``, without a dot, is a string there)
    text = yaml.safe_dump(document) if kind == "yaml" else json.dumps(document)
    refused = None
    try:
        loads(text, "yaml", "c.yaml")
    except ConfigError as error:
        refused = str(error)
    if refused is not None:
        assert refused.startswith("c.yaml"), refused[:200]
        assert len(refused) < 2000, refused[:300]
        return
    read = yaml.safe_load(text)
    errors = [e.message[:200] for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(read)]
    assert not errors, (place, errors)
