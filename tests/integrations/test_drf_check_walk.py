"""How far the DRF throttle checks walk a URLconf: past 20,000 URL patterns, a warning naming
where they stopped (``freqguard.W003``); includes nested deeper than 32, a warning naming
the first (``W004``); a URLconf that does not import, left to Django's own check. The views
are ``drf_check_urls.py``'s; the rig is ``drf_rig.py``."""

from __future__ import annotations

import types
from collections.abc import Sequence

import pytest

pytest.importorskip("rest_framework", reason="the drf extra is not installed")
from tests.integrations import django_site

django_site.setup()  # done on import already: DRF's modules below read the settings
from django.core import checks  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.urls import URLPattern, URLResolver, include, path  # noqa: E402

from tests.integrations import drf_check_urls  # noqa: E402
from tests.integrations.drf_rig import _one  # noqa: E402


def _urlconf(patterns: Sequence[object]) -> types.ModuleType:
    """A URLconf of these patterns, then a view on freqguard's anon throttle, whose scope the
    site's rates do not name (an E004 when the walk reaches it)."""
    urls = types.ModuleType(f"tests.integrations.urls_{len(patterns)}")
    vars(urls)["urlpatterns"] = [*patterns, path("last", drf_check_urls.Anonymous.as_view())]
    return urls


def test_a_urlconf_past_the_walks_bound_is_a_warning_naming_where_it_stopped() -> None:
    """The check walks at most 20,000 URL patterns (a bound on its time): past them it
    stopped without a word, so a view there was not checked (its E004 missing) and nothing
    said so. A warning (``freqguard.W003``) says how many patterns it walked and the first
    it did not, its URL and view. Seen failing first."""
    plain = [path(f"p{n}", drf_check_urls.plain) for n in range(20_000)]
    with override_settings(ROOT_URLCONF=_urlconf(plain)):
        found = [m for m in checks.run_checks() if m.id and m.id.startswith("freqguard.")]
    [warning] = found
    assert warning.id == "freqguard.W003"
    assert warning.level == checks.WARNING
    assert "after 20000 URL patterns" in warning.msg
    assert "URL 'last' (tests.integrations.drf_check_urls.Anonymous)" in warning.msg
    assert "SILENCED_SYSTEM_CHECKS = ['freqguard.W003']" in warning.msg
    # 20,000 patterns are walked whole: the last view checked, and no warning
    with override_settings(ROOT_URLCONF=_urlconf(plain[1:])):
        found = [m for m in checks.run_checks() if m.id and m.id.startswith("freqguard.")]
    assert [m.id for m in found] == ["freqguard.E004"]
    assert "Anonymous (URL 'last')" in found[0].msg


def _nested(includes: int, bottom: list[URLPattern | URLResolver]) -> types.ModuleType:
    """A URLconf of ``includes`` includes one inside another (``n0/n1/...``), ``bottom``
    in the innermost."""
    patterns = bottom
    for level in reversed(range(includes)):
        patterns = [path(f"n{level}/", include(patterns))]
    urls = types.ModuleType(f"tests.integrations.nested_{includes}")
    vars(urls)["urlpatterns"] = patterns
    return urls


def test_includes_nested_past_the_walks_bound_are_a_warning_naming_the_first() -> None:
    """The check follows includes 32 deep (a bound on includes nesting without end): an
    include deeper was skipped without a word, so its views were not checked (an E004
    missing). A warning (``freqguard.W004``) says how many it did not descend into and
    names the first, its URL and what it includes; the walk goes on past them. Seen
    failing first."""
    view = drf_check_urls.Anonymous.as_view()
    listed = path("a/", include([path("x", view)]))
    module = path("b/", include("tests.integrations.drf_check_urls"))
    with override_settings(ROOT_URLCONF=_nested(32, [module, listed])):
        found = [m for m in checks.run_checks() if m.id and m.id.startswith("freqguard.")]
    [warning] = found
    assert warning.id == "freqguard.W004"
    assert warning.level == checks.WARNING
    route = "".join(f"n{level}/" for level in range(32))
    assert (
        f"2 includes nested deeper than 32, the first at URL '{route}b/' (an include of "
        "'tests.integrations.drf_check_urls')"
    ) in warning.msg
    assert "were not checked" in warning.msg
    assert "SILENCED_SYSTEM_CHECKS = ['freqguard.W004']" in warning.msg
    # 32 includes deep are walked whole: the view there checked, no warning
    with override_settings(ROOT_URLCONF=_nested(31, [listed])):
        found = [m for m in checks.run_checks() if m.id and m.id.startswith("freqguard.")]
    assert [m.id for m in found] == ["freqguard.E004"]
    assert f"Anonymous (URL '{route[: -len('n31/')]}a/x')" in found[0].msg
    # the walk goes on past an include it does not descend into
    deep = _nested(32, [listed])
    vars(deep)["urlpatterns"].append(path("last", view))
    with override_settings(ROOT_URLCONF=deep):
        found = [m for m in checks.run_checks() if m.id and m.id.startswith("freqguard.")]
    assert sorted(str(m.id) for m in found) == ["freqguard.E004", "freqguard.W004"]
    assert "Anonymous (URL 'last')" in _one([m.msg for m in found], "Anonymous")
    assert "1 include nested deeper than 32, the first at URL" in _one(
        [m.msg for m in found], "deeper"
    )


def test_a_urlconf_that_does_not_import_is_left_to_djangos_check() -> None:
    from freqguard.integrations._django_settings import check_settings

    with override_settings(ROOT_URLCONF="tests.integrations.no_such_urlconf"):
        assert check_settings() == []
