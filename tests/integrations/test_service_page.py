"""The operator's page of ``freqguard serve``, driven in a real headless browser (Debian's
chromium, which CI installs): it lists the policies, the decisions and denials per policy
and rule, and looks one context up (its use per rule, its per-key limit); with tokens, a
lookup needs one and the page says so."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from tests.integrations.service_browser import CHROMIUM, headless
from tests.servers import free_port

SCRIPT = Path(sys.executable).parent / "freqguard"
CONFIG = """\
[[policy]]
name = "sms"
rules = [
  { rate = "2/minute", by = "recipient", name = "rcpt-1m" },
  { rate = "5 per 59 seconds", by = ["recipient", "content"], name = "content-59s" },
]

[[policy]]
name = "vendor"
rules = [{ rate = "200/second", strategy = "gcra", name = "vendor" }]

[[policy]]
name = "promo"
priorities = ["transactional", "marketing"]
quiet = { start = "21:00", end = "08:00", tz = "Europe/Berlin", exempt = ["transactional"] }
rules = [
  { rate = "50/day", by = "user", calendar = true, tz = "UTC", name = "daily" },
  { rate = "10 concurrent", by = "user", lease = 90, name = "open" },
  { rate = "3 per 2 hours", by = "user", caps = { marketing = 1 }, name = "two-hours" },
]
"""

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium (CI installs it)"),
    pytest.mark.slow,  # a real browser on a real freqguard serve, seconds each
]


class Tables(HTMLParser):
    """Each table's body rows, by the table's id, as lists of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.texts: dict[str, str] = {}
        self._table: str | None = None
        self._in: str | None = None
        self._body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "table":
            self._table = found.get("id")
            self.tables[self._table or ""] = []
        elif tag == "tbody":
            self._body = True
        elif tag == "tr" and self._body:
            self.tables[self._table or ""].append([])
        elif tag == "td" and self._body:
            self.tables[self._table or ""][-1].append("")
        if found.get("id"):
            self._in = found["id"]

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self._body = False

    def handle_data(self, data: str) -> None:
        if self._body and self.tables.get(self._table or "") and self.tables[self._table or ""][-1]:
            self.tables[self._table or ""][-1][-1] += data
        if self._in is not None:
            self.texts[self._in] = self.texts.get(self._in, "") + data


def _serve(config: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [str(SCRIPT), "serve", str(config), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # bounded polling for the server to start
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGTERM)
    raise AssertionError("the service did not start in 30 s")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    config = tmp_path / "page.toml"
    config.write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FREQGUARD_TOKENS")}
    proc, url = _serve(config, env)
    try:
        yield url, tmp_path
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def _browse(url: str, profile: Path, screenshot: Path | None = None) -> Tables:
    """The page's DOM after its script ran, in headless chromium."""
    args = headless(profile)
    if screenshot is not None:
        args += ["--window-size=1100,760", f"--screenshot={screenshot}"]
    else:
        args += ["--dump-dom"]
    done = subprocess.run([*args, url], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    tables = Tables()
    tables.feed(done.stdout)
    return tables


def test_the_page_lists_policies_counts_and_looks_a_context_up(served: tuple[str, Path]) -> None:
    url, tmp = served
    with httpx.Client(base_url=url) as http:
        for _ in range(3):
            http.post(
                "/v1/policies/sms/hit", json={"context": {"recipient": "+1555", "content": "hi"}}
            )
        http.put(
            "/v1/policies/sms/limits/content-59s",
            json={"context": {"recipient": "+1555"}, "rate": "9/minute"},
        )
    page = _browse(f"{url}/?policy=sms&recipient=%2B1555&content=hi", tmp / "profile")
    promo = "promo (priorities: transactional, marketing)"
    assert page.tables["policies"] == [
        ["sms", "rcpt-1m", "recipient", "2/minute", "sliding-log", "-"],
        ["sms", "content-59s", "recipient, content", "5 per 59 seconds", "sliding-log", "-"],
        ["vendor", "vendor", "-", "200/second", "gcra", "-"],
        [promo, "daily", "user", "50/day", "calendar", "calendar in UTC"],
        [promo, "open", "user", "10 concurrent, lease 1.5 min", "concurrency", "-"],
        [promo, "two-hours", "user", "3 per 2 hours", "sliding-log", "caps marketing 1"],
        [
            promo,
            "quiet-hours",
            "user",
            "quiet 21:00-08:00 Europe/Berlin",
            "fixed-window",
            "exempt transactional",
        ],
    ]
    assert page.tables["stats"] == [["sms", "(all)", "2", "1"], ["sms", "rcpt-1m", "", "1"]]
    usage = {row[0]: row for row in page.tables["usage"]}
    assert usage["rcpt-1m"][1:4] == ["2", "0", "2"]
    assert usage["rcpt-1m"][5].startswith("in ")
    assert usage["content-59s"][6] == "9/minute"  # its per-key limit, as written
    assert re.search(r"denied by rcpt-1m", page.texts["answer"])


def test_with_tokens_a_lookup_asks_for_one(tmp_path: Path) -> None:
    config = tmp_path / "page.toml"
    config.write_text(CONFIG)
    proc, url = _serve(config, {**os.environ, "FREQGUARD_TOKENS": "t0ken"})
    try:
        page = _browse(f"{url}/?policy=sms&recipient=a&content=b", tmp_path / "profile")
        assert len(page.tables["policies"]) == 7  # the page itself is open, read-only
        assert page.texts["answer"].strip() == "this service needs a token for lookups"
        assert page.tables["usage"] == []
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
