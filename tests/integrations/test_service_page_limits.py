"""Per-key limits from the operator's page, in a real headless chromium driven over the
DevTools protocol: a context's limits listed, one set and one cleared through the page's
own form and buttons, each the API's ``PUT``/``DELETE`` (JSON, same origin), with the
token typed into the page when the service has tokens. What the page wrote is read back
through the API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integrations.service_browser import CHROMIUM, Browser
from tests.integrations.service_process import serving

CONFIG = """\
backend = "memory://"

[[policy]]
name = "sms"
rules = [
  { rate = "2/minute", by = "recipient", name = "rcpt-1m" },
  { rate = "5 per 59 seconds", by = ["recipient", "content"], name = "content-59s" },
]
"""
LINK = "/?policy=sms&recipient=%2B1555&content=hi"
ROWS = """[...document.querySelectorAll('#limits tbody tr')].map((tr) =>
  [...tr.cells].map((td) => td.querySelector('button')
    ? (td.querySelector('button').hidden ? '' : td.querySelector('button').textContent)
    : td.textContent))"""

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium (CI installs it)"),
    pytest.mark.slow,  # a real browser on a real freqguard serve, seconds each
]


def _type(browser: Browser, **values: Any) -> None:
    """Values into the page's inputs, by id (a bool ticks a checkbox)."""
    for name, value in values.items():
        element = f"document.getElementById({json.dumps(name.replace('_', '-'))})"
        prop = "checked" if isinstance(value, bool) else "value"
        browser.run(f"{element}.{prop} = {json.dumps(value)}")


def _answer(browser: Browser, start: str) -> str:
    script = f"(t => t.startsWith({json.dumps(start)}) && t)($('limit-answer').textContent)"
    found: str = browser.until(script, repr(start))
    return found


def _limits(url: str, token: str | None = None) -> dict[str, Any]:
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    body = {"context": {"recipient": "+1555"}}
    found = httpx.post(f"{url}/v1/policies/sms/limits", json=body, headers=headers)
    assert found.status_code == 200, found.text
    limits: dict[str, Any] = found.json()["limits"]
    return limits


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "limits.toml"
    path.write_text(CONFIG)
    return path


def test_the_page_lists_sets_and_clears_a_key_s_limit(config: Path, tmp_path: Path) -> None:
    with serving(config) as served, Browser(tmp_path / "p") as page:
        page.open(served.url + LINK)
        page.until("document.querySelectorAll('#limits tbody tr').length", "the limits")
        assert page.run(ROWS) == [
            ["rcpt-1m", "2/minute", "-", ""],
            ["content-59s", "5 per 59 seconds", "-", ""],
        ]
        _type(page, limit_rule="content-59s", limit_rate="7/minute", limit_ttl="3600")
        page.run("$('limit-set').click()")
        assert _answer(page, "set") == "set content-59s"
        assert page.run(ROWS)[1] == ["content-59s", "5 per 59 seconds", "7/minute", "clear"]
        assert _limits(served.url)["content-59s"] == "7/minute"

        _type(page, limit_rule="rcpt-1m", limit_rate="", limit_exempt=True, limit_ttl="")
        page.run("$('limit-set').click()")
        assert _answer(page, "set") == "set rcpt-1m"
        assert _limits(served.url)["rcpt-1m"] is None  # exempt

        page.run("document.querySelector('#limits button[data-rule=\"content-59s\"]').click()")
        assert _answer(page, "cleared") == "cleared content-59s"
        assert _limits(served.url) == {"rcpt-1m": None, "content-59s": "5 per 59 seconds"}
        assert page.run(ROWS)[1] == ["content-59s", "5 per 59 seconds", "-", ""]


def test_a_bad_rate_is_the_api_s_problem_shown_and_nothing_is_set(
    config: Path, tmp_path: Path
) -> None:
    with serving(config) as served, Browser(tmp_path / "p") as page:
        page.open(served.url + LINK)
        page.until("document.querySelectorAll('#limits tbody tr').length", "the limits")
        _type(page, limit_rule="rcpt-1m", limit_rate="often")
        page.run("$('limit-set').click()")
        assert "(field rate)" in _answer(page, "422")
        _type(page, limit_rate="")
        page.run("$('limit-set').click()")
        assert _answer(page, "give") == "give a rate, or tick exempt"  # never an exemption
        assert _limits(served.url) == {
            "rcpt-1m": "2/minute",
            "content-59s": "5 per 59 seconds",
        }


def test_with_tokens_the_page_writes_with_the_token_typed_in(config: Path, tmp_path: Path) -> None:
    with (
        serving(config, env={"FREQGUARD_TOKENS": "t0ken"}) as served,
        Browser(tmp_path / "p") as page,
    ):
        page.open(served.url + LINK)
        assert page.run("$('answer').textContent") == "this service needs a token for lookups"
        _type(page, token="t0ken")
        page.run("$('lookup').requestSubmit()")
        page.until("document.querySelectorAll('#limits tbody tr').length", "the limits")
        _type(page, limit_rule="rcpt-1m", limit_rate="4/minute")
        page.run("$('limit-set').click()")
        assert _answer(page, "set") == "set rcpt-1m"
        assert _limits(served.url, "t0ken")["rcpt-1m"] == "4/minute"

        _type(page, token="wrong")
        page.run("document.querySelector('#limits button[data-rule=\"rcpt-1m\"]').click()")
        assert _answer(page, "this service") == (
            "this service needs a token: type it in the token field above"
        )
        assert _limits(served.url, "t0ken")["rcpt-1m"] == "4/minute"  # not cleared


GLOBAL_CONFIG = """\
backend = "memory://"

[[policy]]
name = "sms"
rules = [
  { rate = "2/minute", by = "recipient", name = "rcpt-1m" },
  { rate = "100/second", by = [], name = "all" },
]
"""


def test_a_global_rule_s_limit_is_set_and_cleared_from_the_page(tmp_path: Path) -> None:
    """A global rule's limit is no recipient's: the page sent the looked-up recipient as its
    context, which the API refuses (a global rule's limit takes none), so it could not be
    set or cleared from the page. Now its context is empty; the recipient's rule still
    takes the recipient."""
    config = tmp_path / "global.toml"
    config.write_text(GLOBAL_CONFIG)
    with serving(config) as served, Browser(tmp_path / "p") as page:
        page.open(served.url + "/?policy=sms&recipient=%2B1555")
        page.until("document.querySelectorAll('#limits tbody tr').length", "the limits")
        _type(page, limit_rule="all", limit_rate="50/second", limit_ttl="")
        page.run("$('limit-set').click()")
        assert _answer(page, "set") == "set all"
        found = httpx.post(f"{served.url}/v1/policies/sms/limits", json={"context": {}})
        assert found.json()["limits"]["all"] == "50/second", found.text
        _type(page, limit_rule="rcpt-1m", limit_rate="9/minute")
        page.run("$('limit-set').click()")
        assert _answer(page, "set") == "set rcpt-1m"
        assert _limits(served.url)["rcpt-1m"] == "9/minute"
        page.until(
            "document.querySelector('#limits button[data-rule=\"all\"]') &&"
            " !document.querySelector('#limits button[data-rule=\"all\"]').hidden",
            "the global rule's clear button",
        )
        page.run("document.querySelector('#limits button[data-rule=\"all\"]').click()")
        assert _answer(page, "cleared") == "cleared all"
        found = httpx.post(f"{served.url}/v1/policies/sms/limits", json={"context": {}})
        assert found.json()["limits"]["all"] == "100/second", found.text


PARTS_CONFIG = """\
backend = "memory://"

[[policy]]
name = "api"
rules = [
  { rate = "2/minute", by = "user", name = "per-user" },
  { rate = "9/minute", by = "tenant", name = "per-tenant" },
]
"""


def test_a_rule_of_the_policy_s_second_partition_is_listed_set_and_cleared(
    tmp_path: Path,
) -> None:
    """A policy decided in two parts (by user, by tenant): the page listed and wrote the
    limits of the first partition's rules only (its limits call sent the user alone, and a
    write of the tenant's rule the user's value). Now each rule's limit is read and written
    with its own partition's value."""
    config = tmp_path / "parts.toml"
    config.write_text(PARTS_CONFIG)
    with serving(config) as served, Browser(tmp_path / "p") as page:
        page.open(served.url + "/?policy=api&user=u1&tenant=t1")
        page.until("document.querySelectorAll('#limits tbody tr').length > 1", "both rules")
        assert [row[0] for row in page.run(ROWS)] == ["per-user", "per-tenant"]
        _type(page, limit_rule="per-tenant", limit_rate="20/minute", limit_ttl="")
        page.run("$('limit-set').click()")
        assert _answer(page, "set") == "set per-tenant"
        found = httpx.post(
            f"{served.url}/v1/policies/api/limits", json={"context": {"tenant": "t1"}}
        )
        assert found.json()["limits"] == {"per-tenant": "20/minute"}, found.text
        _type(page, limit_rule="per-user", limit_rate="3/minute", limit_ttl="")
        page.run("$('limit-set').click()")
        assert _answer(page, "set") == "set per-user"
        found = httpx.post(f"{served.url}/v1/policies/api/limits", json={"context": {"user": "u1"}})
        assert found.json()["limits"] == {"per-user": "3/minute"}, found.text
        page.run("document.querySelector('#limits button[data-rule=\"per-tenant\"]').click()")
        assert _answer(page, "cleared") == "cleared per-tenant"
        found = httpx.post(
            f"{served.url}/v1/policies/api/limits", json={"context": {"tenant": "t1"}}
        )
        assert found.json()["limits"] == {"per-tenant": "9/minute"}, found.text
