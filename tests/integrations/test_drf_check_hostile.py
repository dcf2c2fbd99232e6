"""The DRF throttle checks on hostile views: whatever a project's views hold in
``throttle_classes``, ``throttle_scope``, ``get_throttles`` and ``as_view(...)``, and
whatever ``DEFAULT_THROTTLE_RATES`` and ``DEFAULT_THROTTLE_CLASSES`` hold, ``manage.py
check`` answers messages (no traceback): a dotted path in a view's ``throttle_classes`` is
an E005 naming it, and a view whose ``get_throttles()`` is its own is judged by nothing."""

from __future__ import annotations

import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("rest_framework", reason="the drf extra is not installed")
from tests.integrations import django_site

django_site.setup()
from django.core import checks  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from rest_framework.throttling import AnonRateThrottle  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from freqguard.integrations import drf  # noqa: E402
from freqguard.integrations._drf_throttles import throttle_checks  # noqa: E402
from tests.conftest import examples  # noqa: E402

REST = django_site.SETTINGS["REST_FRAMEWORK"]
#: Any text: control characters, lone surrogates, dots where a path has them.
_TEXT = st.text(st.characters(exclude_categories=()), max_size=40)
#: A class's name: any text a class may have (no NUL, no lone surrogate).
_NAME = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"))
_HUGE = st.integers(10_000, 100_000).map(lambda size: "x." * size)
_THROTTLES = st.sampled_from(
    [
        drf.FreqGuardThrottle,
        drf.FreqGuardScopedThrottle,
        drf.FreqGuardAnonThrottle,
        type("Bad", (drf.FreqGuardThrottle,), {"rate": "3/minit"}),
        type("Odd", (drf.FreqGuardThrottle,), {"scope": 5}),
        AnonRateThrottle,
        APIView,  # not a throttle at all
    ]
)
_ENTRY = st.one_of(_TEXT, _HUGE, _THROTTLES, st.integers(), st.none(), st.lists(_TEXT, max_size=2))
_CLASSES = st.one_of(
    st.lists(_ENTRY, max_size=4),
    st.lists(_ENTRY, max_size=4).map(tuple),
    _TEXT,
    st.integers(),
    st.dictionaries(_TEXT, _TEXT, max_size=2),
)
_SCOPE = st.one_of(st.none(), _TEXT, _HUGE, st.integers(), st.lists(_TEXT, max_size=2))
_CHOOSER = st.sampled_from(["DRF's", "its own", "None", "5"])
_VIEW = st.fixed_dictionaries(
    {
        "name": _NAME,
        "route": _TEXT.map(lambda text: text.translate({60: None, 62: None})),  # no <...>
        "throttle_classes": _CLASSES,
        "throttle_scope": _SCOPE,
        "get_throttles": _CHOOSER,
        "as_view": st.booleans(),  # the attributes given by as_view(**initkwargs)
    }
)
_RATES = st.one_of(
    st.dictionaries(st.one_of(_TEXT, st.integers()), st.one_of(_TEXT, st.none(), st.integers())),
    _TEXT,
    st.none(),
)
#: Default classes drawn from paths that import no real module (an import runs its code).
_DEFAULTS = st.one_of(
    st.lists(st.one_of(_TEXT.map(lambda text: f"nowhere_{text}.X"), _THROTTLES), max_size=3),
    st.sampled_from(["", ".", "a..b", "\ud800.X", 5, None]),
)


def _view(n: int, drawn: dict[str, Any]) -> Any:
    """The drawn view (its name the nth's, whatever it draws) and its URL pattern."""
    attrs: dict[str, Any] = {
        "throttle_classes": drawn["throttle_classes"],
        "throttle_scope": drawn["throttle_scope"],
    }
    chooser = drawn["get_throttles"]
    if chooser != "DRF's":
        attrs["get_throttles"] = {"its own": lambda self: [], "None": None, "5": 5}[chooser]
    view: type[APIView] = type(f"V{n}{drawn['name']}", (APIView,), attrs)
    init = {k: attrs[k] for k in ("throttle_classes", "throttle_scope")} if drawn["as_view"] else {}
    return view, path(drawn["route"], view.as_view(**init))


@settings(max_examples=examples(60))
@given(
    views=st.lists(_VIEW, min_size=1, max_size=3),
    rates=_RATES,
    defaults=_DEFAULTS,
    limits=st.sampled_from([None, "100/minute"]),
)
def test_hostile_views_and_settings_are_answered_with_messages(
    views: list[dict[str, Any]], rates: object, defaults: object, limits: object
) -> None:
    made = [_view(n, drawn) for n, drawn in enumerate(views)]
    urls = types.ModuleType("tests.integrations.hostile_urls")
    vars(urls)["urlpatterns"] = [pattern for _, pattern in made]
    rest = {**REST, "DEFAULT_THROTTLE_RATES": rates, "DEFAULT_THROTTLE_CLASSES": defaults}
    with override_settings(ROOT_URLCONF=urls, REST_FRAMEWORK=rest, FREQGUARD_DEFAULT_LIMITS=limits):
        found = throttle_checks()
    for message in found:
        assert isinstance(message, checks.CheckMessage)
        assert str(message.id).startswith("freqguard.")
        assert isinstance(message.msg, str)
        assert message.msg
    # a dotted path in a view's throttle_classes: one E005 a view and path, naming both,
    # unless the view chooses its throttles in get_throttles() (then none of it runs)
    e005 = [message.msg for message in found if message.id == "freqguard.E005"]
    expected = set()
    for (view, _), drawn in zip(made, views, strict=True):
        classes = drawn["throttle_classes"]
        if drawn["get_throttles"] == "DRF's" and isinstance(classes, (list, tuple)):
            expected |= {(view, entry) for entry in classes if isinstance(entry, str)}
    assert len(e005) == len(expected)
    for view, entry in expected:
        assert any(repr(entry) in message and view.__name__ in message for message in e005)
    # a view choosing its throttles in code is judged by nothing of its throttle_classes
    judged = [
        m.msg for m in found if m.id in ("freqguard.E003", "freqguard.E004", "freqguard.E006")
    ]
    for (view, _), drawn in zip(made, views, strict=True):
        if drawn["get_throttles"] != "DRF's":
            assert not any(f".{view.__name__} (URL " in message for message in judged)
