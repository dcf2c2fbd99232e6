"""What ``manage.py check`` says of DRF throttles, on the views of ``drf_check_urls.py``: a
rate that does not parse (``freqguard.E003``; ``W002`` when no freqguard throttle is seen to
read it), a scope with no rate (``E004``), a dotted path in a view's ``throttle_classes``
(``E005``), a throttle with neither a rate nor a scope (``E006``), and the views whose
``get_throttles()`` chooses (``I001``); a throttle or a view deciding in its own code is not
judged. How far the check walks a URLconf is in ``test_drf_check_walk.py``; the rig is
``drf_rig.py``."""

from __future__ import annotations

import sys
import types

import pytest

from freqguard import Guard
from freqguard.errors import ConfigError

pytest.importorskip("rest_framework", reason="the drf extra is not installed")
from tests.integrations import django_site

django_site.setup()  # done on import already: DRF's modules below read the settings
from django.core import checks  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.urls import path, resolve  # noqa: E402
from django.views import View  # noqa: E402
from rest_framework.test import APIRequestFactory  # noqa: E402

from tests.integrations import drf_check_urls  # noqa: E402
from tests.integrations.drf_rig import REST, _one  # noqa: E402
from tests.integrations.drf_rig import guard as guard  # noqa: E402


@pytest.mark.parametrize("where", ["default", "subclass", "view", "not a list"])
def test_a_throttle_rate_that_does_not_parse_is_a_check_error(where: str) -> None:
    """DRF reads a unit by its first letter (``"3/minit"`` is 3 a minute there), so a rate
    that served under DRF may not parse here: ``manage.py check`` says so
    (``freqguard.E003``), not a 500 at the first request (found by a new user's first
    hour). Checked when a freqguard throttle is a default class; a warning otherwise (a
    view may name one)."""
    classes: object = {
        "default": ["freqguard.integrations.drf.FreqGuardAnonThrottle"],
        "subclass": ["tests.integrations.drf_views.Burst"],  # a project's own, made from ours
        "view": [],
        "not a list": 5,  # DRF's own check says so: this one neither fails nor decides
    }[where]
    rest = {
        **REST,
        "DEFAULT_THROTTLE_CLASSES": classes,
        "DEFAULT_THROTTLE_RATES": {
            **REST["DEFAULT_THROTTLE_RATES"],  # the site's views read "orders"
            "anon": "3/minit",
            "user": "5/minute",
            "off": None,
        },
    }
    with override_settings(REST_FRAMEWORK=rest):
        found = [m for m in checks.run_checks() if m.id and m.id.startswith("freqguard.")]
    [message] = found  # the site's views read none of these scopes: no E004
    ours = where in ("default", "subclass")
    assert message.id == ("freqguard.E003" if ours else "freqguard.W002")
    assert "DEFAULT_THROTTLE_RATES['anon']" in message.msg
    assert "'3/minit'" in message.msg
    assert "first letter" in message.msg


#: The rates of tests/integrations/drf_check_urls.py's views.
CHECKED = {"upload": "10/hour", "reports": "5/min", "slow": "3/minit", "off": None}


def _checked(**settings: object) -> dict[str, list[str]]:
    """freqguard's check messages by id, on drf_check_urls' views and ``CHECKED``."""
    rest = {**REST, "DEFAULT_THROTTLE_RATES": CHECKED}
    urls = "tests.integrations.drf_check_urls"
    with override_settings(ROOT_URLCONF=urls, REST_FRAMEWORK=rest, **settings):
        found = [m for m in checks.run_checks() if m.id and m.id.startswith("freqguard.")]
    by_id: dict[str, list[str]] = {}
    for message in found:
        by_id.setdefault(str(message.id), []).append(message.msg)
    return by_id


def test_a_misspelt_scope_that_default_limits_cover_is_a_warning_naming_the_one_meant(
    guard: Guard,
) -> None:
    """With FREQGUARD_DEFAULT_LIMITS set, a view's scope no rate names takes the default:
    no error (E004), and so a misspelt ``throttle_scope`` (``uploads`` for ``upload``) gave
    the view 100 a minute instead of 10 an hour, without a word (a new user's run). A scope
    close to one named is a warning now, naming it (``freqguard.W005``); one close to none
    is taken as meant."""
    found = _checked(FREQGUARD_DEFAULT_LIMITS="100/minute")
    assert "freqguard.E004" not in found
    uploads = _one(found["freqguard.W005"], "Uploads (")
    assert "reads the scope 'uploads'" in uploads
    assert "did you mean 'upload'?" in uploads
    assert "FREQGUARD_DEFAULT_LIMITS instead" in uploads


def test_a_views_scope_with_no_rate_is_a_check_error_naming_the_view(guard: Guard) -> None:
    """A view whose freqguard throttle reads a scope ``DEFAULT_THROTTLE_RATES`` does not
    name (a ``throttle_scope`` misspelt) failed every request to it with ConfigError, a 500
    (DRF's own ScopedRateThrottle, ImproperlyConfigured): ``manage.py check`` says so,
    naming the view, its URL and the scope (``freqguard.E004``). Seen failing first."""
    found = _checked()
    # Uploads, UploadsToo, export, the csv action, and the anon throttle's six views in one;
    # not /unscoped, /off, /slow, the ViewSet's list
    assert len(found["freqguard.E004"]) == 5
    uploads, export, csv = (
        _one(found["freqguard.E004"], n) for n in ("Uploads (", "export", "csv")
    )
    assert "tests.integrations.drf_check_urls.Uploads (URL 'api/uploads')" in uploads
    assert "throttle_scope 'uploads'" in uploads
    assert "did you mean 'upload'?" in uploads
    assert "REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']" in uploads
    assert "tests.integrations.drf_check_urls.export (URL 'api/export')" in export  # @api_view
    assert "ExportsScope" in export
    assert "scope 'exports'" in export
    assert "drf_check_urls.Reports (URL 'reports/csv/')" in csv  # a router's ViewSet action
    assert "throttle_scope 'reports-csv'" in csv
    # what the check forestalls: the request fails (as_view(throttle_scope=None): unthrottled)
    rest = {**REST, "DEFAULT_THROTTLE_RATES": CHECKED}
    with override_settings(ROOT_URLCONF="tests.integrations.drf_check_urls", REST_FRAMEWORK=rest):
        factory = APIRequestFactory()
        with pytest.raises(ConfigError, match=r"DEFAULT_THROTTLE_RATES\['uploads'\]"):
            resolve("/api/uploads").func(factory.get("/api/uploads"))
        assert resolve("/unscoped").func(factory.get("/unscoped")).status_code == 200
    # with default limits, a scope without a rate falls back to them: no error
    assert "freqguard.E004" not in _checked(FREQGUARD_DEFAULT_LIMITS="100/minute")
    # switched off, the throttles admit every request: nothing would fail
    assert "freqguard.E004" not in _checked(FREQGUARD_ENABLED=False)
    # the fix a view's scope asks for is the view's, not a rate given the throttle class,
    # which would replace every view's scope
    assert "or give FreqGuardScopedThrottle a rate" not in uploads
    assert "fix the view's throttle_scope" in uploads


def test_a_throttles_own_scope_with_no_rate_is_one_error_naming_its_views() -> None:
    """freqguard's anon throttle on many views while ``DEFAULT_THROTTLE_RATES`` names no
    ``'anon'``: one ``freqguard.E004`` for the throttle's scope, fixed in one place, naming
    how many views use it and the first few; it was one error a view, each saying the same
    (50 views, 50 errors). A view's own misspelt ``throttle_scope`` stays an error a view,
    fixed in each view. Seen failing first."""
    found = _checked()["freqguard.E004"]
    [anon] = [message for message in found if "'anon'" in message]
    assert anon.startswith(
        "6 views, tests.integrations.drf_check_urls.Anonymous (URL 'anonymous/0'), "
        "tests.integrations.drf_check_urls.Anonymous1 (URL 'anonymous/1'), "
        "tests.integrations.drf_check_urls.Anonymous2 (URL 'anonymous/2') and 3 more: "
        "freqguard.integrations.drf.FreqGuardAnonThrottle reads the scope 'anon', which "
        "REST_FRAMEWORK['DEFAULT_THROTTLE_RATES'] does not name"
    )
    assert "every request to them would fail" in anon
    assert "Name it there ('anon': '100/hour'" in anon
    assert "or give FreqGuardAnonThrottle a rate" in anon
    uploads = [message for message in found if "throttle_scope 'uploads'" in message]
    assert len(uploads) == 2  # each view's own
    assert any(
        message.startswith("tests.integrations.drf_check_urls.UploadsToo") for message in uploads
    )


def test_a_throttle_with_no_rate_and_no_scope_is_one_check_error_naming_its_views(
    guard: Guard,
) -> None:
    """freqguard's generic throttle (or a subclass) with neither a ``rate`` nor a ``scope``
    reads ``FREQGUARD_DEFAULT_LIMITS``; unset, every request to its views failed with
    ConfigError (a 500) while ``manage.py check`` said nothing. One ``freqguard.E006`` a
    throttle class, naming how many views use it, the first three, and the fixes. A
    throttle that gives its rate in its own code (``__init__``) is not judged. Seen
    failing first."""
    rest = {**REST, "DEFAULT_THROTTLE_RATES": CHECKED}
    with override_settings(ROOT_URLCONF="tests.integrations.drf_check_urls", REST_FRAMEWORK=rest):
        factory = APIRequestFactory()  # what the check forestalls: the request fails
        with pytest.raises(ConfigError, match="FreqGuardThrottle has no rate"):
            resolve("/unrated/0").func(factory.get("/unrated/0"))
        with pytest.raises(ConfigError, match="Costly has no rate"):
            resolve("/heavy").func(factory.get("/heavy"))
        assert resolve("/coded").func(factory.get("/coded")).status_code == 200
    found = _checked()["freqguard.E006"]
    assert len(found) == 2
    generic = _one(found, "freqguard.integrations.drf.FreqGuardThrottle")
    assert generic.startswith(
        "4 views, tests.integrations.drf_check_urls.Unrated (URL 'unrated/0'), "
        "tests.integrations.drf_check_urls.Unrated1 (URL 'unrated/1'), "
        "tests.integrations.drf_check_urls.Unrated2 (URL 'unrated/2') and 1 more: "
        "freqguard.integrations.drf.FreqGuardThrottle has neither a rate nor a scope "
        "(both None), and FREQGUARD_DEFAULT_LIMITS is not set: every request to them "
        "would fail (ConfigError: FreqGuardThrottle has no rate, a 500)"
    )
    for fix in ("rate = '100/hour'", "DEFAULT_THROTTLE_RATES", "set FREQGUARD_DEFAULT_LIMITS"):
        assert fix in generic
    costly = _one(found, "Costly")
    assert costly.startswith(
        "tests.integrations.drf_check_urls.Heavy (URL 'heavy'): "
        "tests.integrations.drf_check_urls.Costly has neither"
    )
    assert "every request to the view would fail" in costly
    assert not any("Coded" in message for message in found)
    # with default limits the throttle reads them; switched off, it admits every request
    assert "freqguard.E006" not in _checked(FREQGUARD_DEFAULT_LIMITS="100/minute")
    assert "freqguard.E006" not in _checked(FREQGUARD_ENABLED=False)


def test_a_throttle_that_chooses_its_scope_in_code_is_not_judged_by_its_class_scope(
    guard: Guard,
) -> None:
    """A throttle whose ``allow_request`` sets ``self.scope`` at the request (a scope by
    method, by tenant): the check judged the class's ``scope``, which no rate names, and
    raised an E004, an Error that blocks a deploy, for a view whose every request
    succeeds. A throttle whose own code (``__init__`` or ``allow_request``) may give the
    scope is not judged, as one giving its rate there is not (E006). Seen failing first."""
    rest = {**REST, "DEFAULT_THROTTLE_RATES": CHECKED}
    with override_settings(ROOT_URLCONF="tests.integrations.drf_check_urls", REST_FRAMEWORK=rest):
        factory = APIRequestFactory()
        assert resolve("/coded-scope").func(factory.get("/coded-scope")).status_code == 200
    found = _checked()
    assert not any("ScopedInCode" in m for messages in found.values() for m in messages)


def test_a_view_choosing_its_throttles_in_code_is_not_judged_by_its_throttle_classes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DRF runs what a view's ``get_throttles()`` answers, at each request: the check, which
    cannot call it without one, judged the view's ``throttle_classes`` as if they ran (an
    E004 for Chosen's scope, which its GET never reads). A view whose ``get_throttles`` is
    not DRF's APIView's is not judged; one ``freqguard.I001`` (an Info: the override is
    DRF's idiom, not a fault) names the views the check cannot see, while freqguard's DRF
    throttles are loaded: a project without them has nothing of freqguard's there to miss.
    Seen failing first."""
    found = _checked()
    assert not any("Chosen" in message for message in found["freqguard.E004"])
    [info] = found["freqguard.I001"]
    assert info.startswith(
        "2 views, tests.integrations.drf_check_urls.Chosen (URL 'chosen'), "
        "tests.integrations.drf_check_urls.ChosenToo (URL 'chosen-too', get_throttles() "
        "of tests.integrations.drf_check_urls.Chosen): "
    )
    assert "cannot call it without a request" in info
    assert "throttle_classes" in info
    assert "SILENCED_SYSTEM_CHECKS = ['freqguard.I001']" in info
    rest = {**REST, "DEFAULT_THROTTLE_RATES": CHECKED}
    with override_settings(ROOT_URLCONF="tests.integrations.drf_check_urls", REST_FRAMEWORK=rest):
        [message] = [m for m in checks.run_checks() if m.id == "freqguard.I001"]
        assert message.level == checks.INFO  # not a WARNING: check --fail-level WARNING passes
        # what the check spares: the view's GET reads no throttle, so no scope
        factory = APIRequestFactory()
        assert resolve("/chosen").func(factory.get("/chosen")).status_code == 200
    # quiet where nothing of freqguard's DRF throttles is loaded
    monkeypatch.delitem(sys.modules, "freqguard.integrations.drf")
    assert "freqguard.I001" not in _checked()


def test_a_bad_rate_a_view_reads_is_a_check_error_not_a_warning() -> None:
    """A rate that does not parse, read by a view's freqguard throttle (its scope's, or the
    class's ``rate``), fails that view's every request: an error (``freqguard.E003``), not
    the warning ``W002`` left for scopes no freqguard throttle is seen to read."""
    found = _checked()
    assert len(found["freqguard.E003"]) == 2
    slow, misspelt = (_one(found["freqguard.E003"], n) for n in ("'slow'", "Misspelt"))
    assert "DEFAULT_THROTTLE_RATES['slow'] = '3/minit'" in slow
    assert "tests.integrations.drf_check_urls.Slow (URL 'slow')" in slow
    assert "tests.integrations.drf_check_urls.MisspeltRate.rate = '3/minit'" in misspelt
    assert "Misspelt (URL 'misspelt')" in misspelt
    assert "freqguard.W002" not in found


def test_a_bad_rate_names_how_many_views_read_it_and_the_first_three() -> None:
    """A rate that does not parse, read by many views, is one ``freqguard.E003`` (one rate
    to fix), which named only the first view reading it: it says how many read it and
    names the first three, as E004 does, for a scope's rate and a throttle's own alike.
    Seen failing first."""
    found = _checked()["freqguard.E003"]
    slow, misspelt = (_one(found, n) for n in ("'slow'", "Misspelt"))
    assert slow.endswith(
        "; 4 views, tests.integrations.drf_check_urls.Slow (URL 'slow'), "
        "tests.integrations.drf_check_urls.Slow1 (URL 'slow/1'), "
        "tests.integrations.drf_check_urls.Slow2 (URL 'slow/2') and 1 more read it"
    )
    assert misspelt.startswith(
        "2 views, tests.integrations.drf_check_urls.Misspelt (URL 'misspelt'), "
        "tests.integrations.drf_check_urls.MisspeltToo (URL 'misspelt-too'): "
        "tests.integrations.drf_check_urls.MisspeltRate.rate = '3/minit': "
    )
    assert "first letter" in misspelt


def test_a_dotted_path_in_a_views_throttle_classes_is_a_check_error() -> None:
    """DRF imports dotted paths only in ``DEFAULT_THROTTLE_CLASSES``: it calls a view's
    ``throttle_classes`` as they are, so a string there fails every request to the view
    (``'str' object is not callable``, a 500). The check imported the string and judged
    the class it names as the view's throttle (an E004 for its scope); it is an error
    naming the view, the string and the fix (``freqguard.E005``), whether the string
    imports or not. Seen failing first."""
    found = _checked()
    assert len(found["freqguard.E005"]) == 2
    dotted = _one(found["freqguard.E005"], "URL 'dotted'")
    assert "tests.integrations.drf_check_urls.Dotted (URL 'dotted')" in dotted
    assert "'tests.integrations.drf_check_urls.ExportsScope'" in dotted
    assert "'str' object is not callable" in dotted
    assert "from tests.integrations.drf_check_urls import ExportsScope" in dotted
    assert "REST_FRAMEWORK['DEFAULT_THROTTLE_CLASSES']" in dotted
    nowhere = _one(found["freqguard.E005"], "URL 'dotted-nowhere'")  # as_view(throttle_classes=)
    assert "'nowhere.Burst'" in nowhere
    assert not any("Dotted" in message for message in found["freqguard.E004"])
    # what the check forestalls
    rest = {**REST, "DEFAULT_THROTTLE_RATES": CHECKED}
    with override_settings(ROOT_URLCONF="tests.integrations.drf_check_urls", REST_FRAMEWORK=rest):
        factory = APIRequestFactory()
        with pytest.raises(TypeError, match="'str' object is not callable"):
            resolve("/dotted").func(factory.get("/dotted"))


def test_a_view_that_is_not_drfs_is_not_judged_by_a_throttle_classes_it_holds() -> None:
    """A plain Django view (no ``get_throttles``: DRF never runs it) may hold an attribute
    named ``throttle_classes`` for a framework of its own: no E005 for its dotted path, no
    E004 for a class there (review: an Error blocks a deploy of a working project)."""

    class Plain(View):
        throttle_classes = ("myframework.throttles.PerUser", drf_check_urls.ExportsScope)

    urls = types.ModuleType("tests.integrations.urls_plain_view")
    vars(urls)["urlpatterns"] = [path("plain", Plain.as_view())]
    with override_settings(ROOT_URLCONF=urls):
        found = [m for m in checks.run_checks() if m.id and m.id.startswith("freqguard.")]
    assert found == []


def test_a_throttle_giving_its_rate_by_get_rate_or_its_own_table_is_not_judged() -> None:
    """A class's own ``get_rate()`` or ``THROTTLE_RATES`` gives its rate as DRF's would
    (read at each request): the check, which cannot run it, does not judge its rate."""
    from freqguard.integrations._drf_rates import coded as _coded
    from freqguard.integrations.drf import FreqGuardThrottle

    assert not _coded(FreqGuardThrottle)
    assert _coded(type("Rated", (FreqGuardThrottle,), {"get_rate": lambda self: "1/min"}))
    assert _coded(type("Tabled", (FreqGuardThrottle,), {"THROTTLE_RATES": {"t": "1/min"}}))


def test_a_throttle_with_its_own_table_is_not_judged_by_the_settings_rate() -> None:
    """A throttle's own ``THROTTLE_RATES`` (or ``get_rate()``) gives its scope's rate: the
    settings' rate of that scope, which it never reads, was judged for it (an E003, an
    Error that blocks a deploy, for a view whose every request succeeds; found by
    review)."""
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from freqguard.integrations.drf import FreqGuardThrottle

    own = {"scope": "slow", "THROTTLE_RATES": {"slow": "3/minute"}}
    tabled = type("Tabled", (FreqGuardThrottle,), own)
    view: type[APIView] = type(
        "TabledView", (APIView,), {"throttle_classes": [tabled], "get": lambda s, r: Response()}
    )
    urls = types.ModuleType("tests.integrations.urls_tabled_view")
    vars(urls)["urlpatterns"] = [path("tabled", view.as_view())]
    rest = {**REST, "DEFAULT_THROTTLE_RATES": {"slow": "3/minit"}}
    with override_settings(ROOT_URLCONF=urls, REST_FRAMEWORK=rest):
        found = [m for m in checks.run_checks() if m.id and m.id.startswith("freqguard.")]
    assert [m.id for m in found] == ["freqguard.W002"]  # read by no freqguard throttle
