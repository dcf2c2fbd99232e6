"""Flask: what ``fg.capped`` and ``fg.exempt`` refuse, as a ConfigError naming the
mistake: a target that is neither a view nor a Blueprint, arguments that cannot apply (at
decoration), exempt and capped with defaults (in either order), and a shared cap over a
view's own cap or a nested cap with defaults (at ``init_app`` or at the first request).
What blueprint caps do is in ``test_flask_blueprints.py``; the rig is
``blueprint_rig.py``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from flask import Blueprint, Flask

from freqguard import ConfigError, ManualClock
from freqguard.integrations.flask import FreqGuard
from tests.integrations.blueprint_rig import _app, _page


def _class_view() -> type:
    class View:
        pass

    return View


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (lambda: Flask(__name__), "got <Flask .*FREQGUARD_DEFAULT_LIMITS"),
        (lambda: "api", "fg.capped takes a view function or a Blueprint, got 'api'"),
        (_class_view, "got the class '_class_view.<locals>.View'; for a class-based view"),
    ],
)
def test_capping_what_is_neither_a_view_nor_a_blueprint_fails(
    target: Callable[[], object], message: str
) -> None:
    fg = FreqGuard()
    with pytest.raises(ConfigError, match=message):
        fg.capped("1/minute")(target())  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match=message.replace("capped", "exempt")):
        fg.exempt(target())  # type: ignore[call-overload]


def test_arguments_that_cannot_apply_fail_at_decoration() -> None:
    fg = FreqGuard()
    api = Blueprint("api", __name__)

    def view() -> str:
        return "view"

    with pytest.raises(
        ConfigError, match="name='api' names one view's policy: blueprint 'api' has one per route"
    ):
        fg.capped("1/minute", name="api")(api)
    with pytest.raises(ConfigError, match="shared= and defaults= apply to a Blueprint"):
        fg.capped("1/minute", shared=True)(view)
    with pytest.raises(ConfigError, match="shared= and defaults= apply to a Blueprint"):
        fg.capped("1/minute", defaults=True)(view)
    with pytest.raises(ConfigError, match="shared=True with defaults=True"):
        fg.capped("1/minute", shared=True, defaults=True)
    with pytest.raises(ConfigError, match="shared must be True or False, got 'yes'"):
        fg.capped("1/minute", shared="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="cost must be an integer >= 0, got -1"):
        fg.capped("1/minute", cost=-1)
    fg.capped("1/minute")(api)
    with pytest.raises(ConfigError, match="blueprint 'api' is capped already"):
        fg.capped("1/day")(api)


def test_exempt_and_capped_with_defaults_is_refused_in_either_order() -> None:
    fg = FreqGuard()
    first, second = Blueprint("first", __name__), Blueprint("second", __name__)
    fg.capped("1/minute", defaults=True)(first)
    with pytest.raises(ConfigError, match="blueprint 'first' is exempt and capped with defaults"):
        fg.exempt(first)
    fg.exempt(second)
    with pytest.raises(ConfigError, match="blueprint 'second' is exempt and capped"):
        fg.capped("1/minute", defaults=True)(second)
    fg.capped("1/minute")(second)  # exempt, and its own cap holds: as for a view


def _shared_with_a_capped_view(fg: FreqGuard) -> Blueprint:
    api = Blueprint("api", __name__, url_prefix="/api")
    fg.capped("10/minute", shared=True)(api)

    @api.post("/sms")
    @fg.capped("1/minute")
    def sms() -> str:
        return "sent"

    return api


def test_a_shared_cap_over_a_capped_view_fails_at_init_app() -> None:
    app = Flask(__name__)
    fg = FreqGuard()
    app.register_blueprint(_shared_with_a_capped_view(fg))
    with pytest.raises(ConfigError, match=r"route 'api.sms': blueprint 'api' is capped with "):
        fg.init_app(app)


def test_a_shared_cap_over_a_capped_view_fails_at_the_first_request(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        app.register_blueprint(_shared_with_a_capped_view(fg))  # after init_app
        _page(app)

    app = _app(clock, None, build)
    app.testing = True  # the error reaches the test, not a 500 page
    with pytest.raises(ConfigError, match=r"its view's @fg.capped holds for this route only"):
        app.test_client().get("/page")  # any route: every route is checked at the first


def test_a_shared_cap_over_a_nested_cap_with_defaults_fails(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        api = Blueprint("api", __name__, url_prefix="/api")
        admin = Blueprint("admin", __name__, url_prefix="/admin")
        fg.capped("10/minute", shared=True)(api)
        fg.capped("1/minute", defaults=True)(admin)
        admin.add_url_rule("/", "panel", lambda: "panel")
        api.register_blueprint(admin)
        app.register_blueprint(api)

    app = _app(clock, None, build)
    app.testing = True
    with pytest.raises(ConfigError, match=r"the cap of blueprint 'api.admin' holds for this"):
        app.test_client().get("/api/admin/")
