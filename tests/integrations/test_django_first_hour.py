"""A new user's first hour with docs/django.md: ``django-admin startproject``, the settings
the page shows, its views (the blocks of the page, as written), and requests as a client
sends them (CSRF checks on, as curl or a browser meets them): a capped view, a method's
cap behind the page's ``csrf_exempt``, a ``block=False`` view, DRF's throttles; and
``manage.py check`` clean. A project of its own, so a process of its own: slow."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rest_framework", reason="the drf extra is not installed")

ROOT = Path(__file__).resolve().parent.parent.parent
PAGE = (ROOT / "docs" / "django.md").read_text()


def _block(after: str) -> str:
    """The first ```python block after the heading or text ``after``."""
    rest = PAGE[PAGE.index(after) :]
    found = re.search(r"^```python\n(.*?)^```", rest, re.M | re.S)
    assert found is not None, after
    return found[1]


SETTINGS = """
INSTALLED_APPS += ["rest_framework", "freqguard.integrations.django.FreqGuardConfig"]
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1,
    "freqguard.integrations.django.FreqGuardMiddleware",
)
"""

URLS = """
from django.urls import path

from mysite import views

urlpatterns = [
    path("send-code", views.send_code, name="send-code"),
    path("search", views.search, name="search"),
    path("quotes", views.Quotes.as_view(), name="quotes"),
    path("orders", views.Orders.as_view(), name="orders"),
    path("health", views.health, name="health"),
    path("login", views.login, name="login"),
    path("api/orders", views.OrderList.as_view(), name="api-orders"),
    path("api/uploads", views.Uploads.as_view(), name="api-uploads"),
]
"""

VISIT = """
import json

import django

django.setup()
from django.test import Client
from django.test.utils import setup_test_environment

setup_test_environment()  # the test client's host, testserver, allowed
client = Client(enforce_csrf_checks=True)  # as curl and browsers meet CSRF
seen = {
    "send-code": [client.get("/send-code").status_code for _ in range(6)],
    "orders": [client.post("/orders").status_code for _ in range(11)],
    "login": [client.get("/login").content.decode() for _ in range(6)],
    "quotes": [client.get("/quotes", headers={"x-api-key": "k"}).status_code],
    "health": [client.get("/health").status_code for _ in range(3)],
    "api-uploads": [client.post("/api/uploads").status_code for _ in range(6)],
    "api-orders": client.get("/api/orders").status_code,
}
limited = client.post("/orders")
seen["refusal"] = [limited["Content-Type"], limited["Retry-After"]]
print(json.dumps(seen))
"""


@pytest.mark.slow
def test_startproject_then_the_page_as_written(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "mysite.settings"}
    made = subprocess.run(
        [sys.executable, "-m", "django", "startproject", "mysite", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    package = tmp_path / "mysite"
    settings = package / "settings.py"
    settings.write_text(
        settings.read_text()
        + SETTINGS
        + _block("```python\n# settings.py\nINSTALLED_APPS").split("]\n\n", 2)[-1]
        + _block("## Django REST framework")
    )
    (package / "views.py").write_text(
        _block("## `@capped` views") + _block("### Deciding without refusing")
    )
    drf = _block("DRF's modules read a configured Django project's settings")
    with (package / "views.py").open("a") as views:
        views.write("\n" + drf)
    (package / "urls.py").write_text(URLS)
    checked = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    visited = subprocess.run(
        [sys.executable, "-c", VISIT],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert visited.returncode == 0, visited.stderr
    seen = json.loads(visited.stdout.splitlines()[-1])
    assert seen["send-code"] == [200] * 5 + [429]  # @capped("5/minute")
    assert seen["orders"] == [201] * 10 + [429]  # the method's cap, CSRF-exempt as shown
    assert seen["login"] == ["signed in"] * 5 + ["Too many attempts: try again in 60 s"]
    assert seen["quotes"] == [200]
    assert seen["health"] == [200] * 3
    assert seen["api-uploads"] == [201] * 5 + [429]  # DEFAULT_THROTTLE_RATES["uploads"]
    assert seen["api-orders"] == 200
    assert seen["refusal"] == ["application/problem+json", "60"]
