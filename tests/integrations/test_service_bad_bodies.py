"""The decision service's answer to a body it cannot take: a 422 problem+json naming the
field, in JSON's words (true, null, a number out of range), for bad values, numbers JSON
cannot hold, fields a call does not take (naming the ones it does), a field given twice and
brackets left open. In process; the rig is ``service_rig.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integrations.service_rig import _call


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", "body"),
        ([1, 2], "body"),
        ({"context": "x"}, "context"),
        ({"context": {"recipient": 1.5, "content": "x"}}, "context.recipient"),
        ({"context": {"recipient": True, "content": "x"}}, "context.recipient"),
        ({"context": {"recipient": "a", "content": "x"}, "cost": -1}, "cost"),
        ({"context": {"recipient": "a"}}, "context.content"),  # a missing dimension
        ({"context": {"recipient": "a", "content": "x", "plan": "pro"}}, "context.plan"),
    ],
)
def test_a_bad_body_is_a_422_naming_the_field(body: Any, field: str) -> None:
    (response,) = _call([("POST", "/v1/policies/sms/hit", body, {})])
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["field"] == field


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ([1, 2], "body: an object, got an array"),
        ({"context": {"recipient": True, "content": "x"}}, "a string or an integer, got true"),
        ({"context": {"recipient": None, "content": "x"}}, "a string or an integer, got null"),
        (
            {"context": {"recipient": "a", "content": "x"}, "cost": True},
            "cost: an integer, got a boolean",
        ),
        (
            {"context": {"recipient": "a", "content": "x"}, "cost": "2"},
            "cost: an integer, got a string",
        ),
        (
            {"context": {"recipient": "a", "content": "x"}, "cost": None},
            "cost: an integer, got null",
        ),
        ({"context": {"recipient": "a", "content": "x"}, "cost": -1}, "cost: an integer >= 0"),
        ({"context": {"recipient": "a", "content": "x"}, "cost": 1.0}, "cost: an integer, got 1.0"),
        (
            b'{"context": {"recipient": "a", "content": "x"}, "cost": 1e400}',
            "cost: got a number out of range",
        ),
    ],
)
def test_a_422_speaks_json_not_python(body: Any, detail: str) -> None:
    # a client wrote true and null, numbers and strings: "got True", "Expected `int`" are
    # Python's words (and msgspec's) for what it sent
    (response,) = _call([("POST", "/v1/policies/sms/hit", body, {})])
    assert response.status_code == 422
    assert detail in response.json()["detail"]


@pytest.mark.parametrize(
    ("raw", "field", "detail"),
    [
        (
            b'{"context": {"recipient": 1e400, "content": "x"}}',
            "context.recipient",
            "got a number out of range",
        ),
        (
            b'{"contexts": [{"recipient": "a", "content": -1e999}]}',
            "contexts[0].content",
            "got a number out of range",
        ),
        (
            b'{"context": {"recipient": "a", "content": "x"}, "cost": 2.5}',
            "cost",
            "an integer, got 2.5",
        ),
    ],
)
def test_a_number_json_cannot_hold_is_named_by_its_field(
    raw: bytes, field: str, detail: str
) -> None:
    # msgspec said "Number out of range" at the context, not the name holding it
    path = "/v1/policies/sms/hit-many" if b"contexts" in raw else "/v1/policies/sms/hit"
    (response,) = _call([("POST", path, raw, {})])
    assert response.status_code == 422
    assert response.json()["field"] == field
    assert detail in response.json()["detail"]


LONG = "cost" + "t" * 100_000  # a field name of 100 kB


@pytest.mark.parametrize(
    ("raw", "field", "detail"),
    [
        (
            b'{"context": {"recipient": "a", "content": "x"}, "costt": 1}',
            "costt",
            "costt: not a field of this call (did you mean cost? it takes: context, cost)",
        ),
        (
            b'{"contexts": [{"recipient": "a", "content": "x"}], "priority": 1}',
            "priority",
            "priority: not a field of this call (it takes: contexts, cost)",
        ),
        (  # a long name: matched by its first 64 characters, shown cut
            b'{"context": {"recipient": "a", "content": "x"}, "' + LONG.encode() + b'": 1}',
            f"[{json.dumps(LONG[:64])}]",
            f"[{json.dumps(LONG[:64])}]: not a field of this call (it takes: context, cost)",
        ),
    ],
)
def test_a_field_the_call_does_not_take_names_the_fields_it_does(
    raw: bytes, field: str, detail: str
) -> None:
    """A misspelt field ("costt") was "not a field of this call", with no word of the ones
    there are (a new user's run)."""
    path = "/v1/policies/sms/hit-many" if b"contexts" in raw else "/v1/policies/sms/hit"
    (response,) = _call([("POST", path, raw, {})])
    assert (response.status_code, response.json()["field"]) == (422, field)
    assert response.json()["detail"] == detail


@pytest.mark.parametrize(
    ("raw", "detail"),
    [  # msgspec refuses the first; Python's reader keeps the last (or refuses NaN)
        (b'{"cost": 1.5, "cost": 1, "context": {}}', "cost: an integer, got a number"),
        (b'{"cost": 1.5, "cost": NaN, "context": {}}', "cost: an integer, got a number"),
    ],
)
def test_a_field_given_twice_is_refused_by_the_value_msgspec_refused(
    raw: bytes, detail: str
) -> None:
    (response,) = _call([("POST", "/v1/policies/sms/hit", raw, {})])
    assert response.status_code == 422
    assert response.json()["detail"] == detail


def test_a_body_that_opens_more_than_it_closes_is_a_422_not_a_500() -> None:
    # msgspec refused cost first; the reader that names the field went down every bracket
    raw = b'{"cost": 1.5, "context": {"recipient": "a"}, "x": ' + b"[" * 5000 + b"]"
    (response,) = _call([("POST", "/v1/policies/sms/hit", raw, {})])
    assert response.status_code == 422
    assert response.json()["field"] == "body"
