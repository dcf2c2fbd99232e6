"""What the service's tests of hostile input share (``test_service_hostile.py``,
``test_service_openapi_checks.py``): few values for a context, names that collide with the
API's, and hypothesis strategies for scalars, JSON values of any shape and depth, and
contexts near the valid ones."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

#: Few values, so that what a request could have changed is all looked at after it.
RECIPIENTS = ["a", "b", 7]
CONTENTS = ["x", "y"]
USERS = ["u", "v"]
#: Zones, valid and not (a zone that names a directory, "America", is the hardening tests':
#: it needs clock.py's own fix to be a 422).
ZONES = ["UTC", "Europe/Berlin", "Nope/Nowhere", "", "../x", "UTC\x00"]
NAMES = ["context", "contexts", "cost", "rate", "ttl", "recipient", "content", "user", "tz"]
NAMES += ["policy", "rule", "self", "priority", "costt", ""]


def _scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=10**20, max_value=10**30),
        st.floats(),  # NaN and the infinities included: json.dumps writes them as literals
        st.text(max_size=8),
        st.sampled_from([*RECIPIENTS, *CONTENTS, *USERS, *ZONES, "5/minute", "often", "0/s"]),
        st.just("z" * 5000),  # quoted by a message, it must not come back whole
    )


def _json_values() -> st.SearchStrategy[Any]:
    return st.recursive(
        _scalars(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(
                st.one_of(st.sampled_from(NAMES), st.text(max_size=4)), inner, max_size=4
            ),
        ),
        max_leaves=12,
    )


def _contexts() -> st.SearchStrategy[Any]:
    """Contexts near the valid ones: the right names with some values and names changed."""
    sms = st.fixed_dictionaries(
        {"recipient": st.sampled_from(RECIPIENTS), "content": st.sampled_from(CONTENTS)}
    )
    daily = st.fixed_dictionaries({"user": st.sampled_from(USERS), "tz": st.sampled_from(ZONES)})
    base = st.one_of(sms, daily, st.fixed_dictionaries({"recipient": st.sampled_from(RECIPIENTS)}))
    extra = st.dictionaries(st.sampled_from(NAMES), _scalars(), max_size=2)
    return st.one_of(base, st.builds(lambda a, b: {**a, **b}, base, extra), _json_values())
