"""The service's OpenAPI document against its checks (hypothesis): for each body, a
value the document's schema admits is one the service's decoder takes, and the reverse,
over bodies near the valid ones and random JSON of any shape. Hostile requests to the
service are in ``test_service_hostile.py``; the rig is ``hostile_rig.py``."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import msgspec
from hypothesis import assume, event, given, reject, settings
from hypothesis import strategies as st

from freqguard.service.bodies import ContextCall, CostedCall, LimitCall, ManyCall, decode
from freqguard.service.openapi import document
from freqguard.service.problems import Problem
from tests.conftest import examples
from tests.integrations.hostile_rig import NAMES, _contexts, _json_values, _scalars

BODIES: dict[str, type[msgspec.Struct]] = {
    "hit": CostedCall,
    "hit-many": ManyCall,
    "peek": ContextCall,
    "limits": ContextCall,
    "PUT limits": LimitCall,
}


COMPONENTS = document()["components"]

#: Each field's values: mostly of its type, some anything.
VALUES = {
    "context": st.one_of(_contexts(), _json_values()),
    "contexts": st.one_of(st.lists(_contexts(), max_size=3), _json_values()),
    "cost": st.one_of(st.integers(-1, 5), st.sampled_from([True, False, "1", 0.5]), _scalars()),
    "rate": st.one_of(st.sampled_from(["5/minute", "x" * 101, None, True, 5]), _scalars()),
    "ttl": st.one_of(st.sampled_from([60, 0.5, None, 0, -1, True, "60"]), _scalars()),
}


def _near(body: type[msgspec.Struct]) -> st.SearchStrategy[dict[str, Any]]:
    """Bodies with the fields ``body`` requires, some of its others, rarely one more."""
    fields = msgspec.structs.fields(body)
    required = {f.encode_name: VALUES[f.encode_name] for f in fields if f.required}
    optional = {f.encode_name: VALUES[f.encode_name] for f in fields if not f.required}
    extra = st.dictionaries(st.sampled_from(NAMES), _scalars(), max_size=1)
    near = st.fixed_dictionaries(required, optional=optional)
    return st.one_of(near, near, st.builds(lambda a, b: {**b, **a}, near, extra))


@settings(max_examples=examples(50))
@given(
    case=st.sampled_from(sorted(BODIES)).flatmap(
        lambda name: st.tuples(st.just(name), st.one_of(_near(BODIES[name]), _json_values()))
    )
)
def test_the_openapi_document_states_what_the_service_checks(case: tuple[str, Any]) -> None:
    """A body the document's schema admits is one the service's checks take, and the
    reverse, as the service reads it: JSON text (JSON Schema's "integer" admits 2.0, which
    JSON readers differ on: left out)."""
    name, data = case
    assume(not _has_integral_float(data))
    body = BODIES[name]
    schema = {"$ref": f"#/components/schemas/{body.__name__}", "components": COMPONENTS}
    admitted = jsonschema.Draft202012Validator(schema).is_valid(data)
    try:
        raw = json.dumps(data, allow_nan=False).encode()  # the bytes the service would read
    except ValueError:  # NaN and the infinities: no JSON text holds them
        reject()
    try:
        decode(raw, body)
    except Problem:
        taken = False
    else:
        taken = True
    event(f"{name}: {'taken' if taken else 'refused'}")
    assert admitted == taken, (schema, data)


def _has_integral_float(value: Any) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, dict):
        return any(_has_integral_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_integral_float(v) for v in value)
    return False
