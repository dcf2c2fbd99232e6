"""Decisions over time from a real ``freqguard serve --workers 2`` on a real redis-server,
where a known sequence of hits, on connections either worker may accept, comes back
exactly, whichever worker answers (once both wrote: each writes its counts at most every
``INTERVAL`` seconds); the page's chart of them in a real browser; and ``--history off``
served. The rig is ``history_rig.py``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from freqguard.script.keys import context_digest
from freqguard.service.history import INTERVAL
from tests.conftest import flush
from tests.integrations.history_rig import _digest, _series
from tests.integrations.service_browser import CHROMIUM, Browser
from tests.integrations.service_process import serving, sms_config
from tests.servers import RedisServer


@pytest.fixture
def service(tmp_path: Path, redis_server: RedisServer) -> Iterator[str]:
    """``freqguard serve`` with two workers on a shared Redis, stopped by its PID."""
    flush([redis_server])
    with serving(sms_config(tmp_path, redis_server.port), "--workers", "2") as served:
        yield served.url


def _minute_now() -> int:
    return int(time.time() // 60)


def _until_written(service: str, decided: int, seconds: float = 10) -> None:
    """Until the store holds ``decided`` decisions in its last two minutes (the calls may
    have crossed a minute's edge: the caller then sends them again): each worker writes
    its counts at most every ``INTERVAL`` seconds (bounded polling)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        read = httpx.get(f"{service}/v1/stats/history").json()
        allowed, denied = _series(read)["sms", None]
        if sum(allowed[-2:]) + sum(denied[-2:]) >= decided:
            return
        time.sleep(INTERVAL)
    raise AssertionError(f"the store never held {decided} decisions this minute")


def _now_counts(service: str) -> tuple[dict[str, int], dict[Any, tuple[int, int]]]:
    """The keys denied in the current minute, and each series' current minute."""
    top = httpx.get(f"{service}/v1/stats/top?minutes=1").json()
    series = _series(httpx.get(f"{service}/v1/stats/history").json())
    return (
        {row["key"]: row["denied"] for row in top["keys"]},
        {name: (allowed[-1], denied[-1]) for name, (allowed, denied) in series.items()},
    )


def _written(service: str) -> int:
    """The policy's decisions in the last two minutes, as :func:`_until_written` sums them."""
    allowed, denied = _series(httpx.get(f"{service}/v1/stats/history").json())["sms", None]
    return sum(allowed[-2:]) + sum(denied[-2:])


@pytest.mark.slow  # a real freqguard serve, a real browser, seconds each
def test_two_workers_share_the_counts_exactly(service: str) -> None:
    """The counts of a sequence of calls, read from either worker, are the store's: each
    worker's, added up. A sequence that crossed a minute's edge is sent again; what it left
    in the new minute is read before the next one starts, and taken off (the CI run that
    met such an edge counted the leftovers as the new sequence's)."""
    hit = f"{service}/v1/policies/sms/hit"
    for attempt in range(3):
        minute = _minute_now()
        keys_before, series_before = _now_counts(service)
        already = _written(service)  # in the last two minutes: what _until_written sums
        answers = []
        for recipient in ("a", "b"):  # 3/minute per recipient (the SMS of sms_config)
            one = {"context": {"recipient": f"{recipient}{attempt}", "content": "x"}}
            # each on a new connection, which either worker may accept
            answers += [httpx.post(hit, json=one).json()["allowed"] for _ in range(5)]
        batch = {"contexts": [{"recipient": f"c{attempt}", "content": "x"}] * 4}
        batched = httpx.post(f"{service}/v1/policies/sms/hit-many", json=batch).json()
        _until_written(service, 14 + already)
        reads = [httpx.get(f"{service}/v1/stats/history").json() for _ in range(6)]
        keys_after, _ = _now_counts(service)
        if _minute_now() == minute:
            break
    else:
        raise AssertionError("three sequences in a row crossed a minute's edge")
    assert answers == [True, True, True, False, False] * 2
    assert [d["allowed"] for d in batched["decisions"]] == [True, True, True, False]
    mine = {_digest(f"a{attempt}"): 2, _digest(f"b{attempt}"): 2, _digest(f"c{attempt}"): 1}
    assert {key: keys_after.get(key, 0) - keys_before.get(key, 0) for key in mine} == mine
    assert {k: v for k, v in keys_after.items() if k not in mine} == keys_before
    assert httpx.get(f"{service}/v1/stats/top").json()["digested"] is False  # no tokens
    untouched = [0] * 59 if attempt == 0 else None  # a crossed sequence left counts before
    for read in reads:  # whichever worker answered
        assert read["minutes"][-1] == minute * 60
        series = _series(read)
        for rule, allowed, denied in [(None, 9, 5), ("rcpt-1m", 9, 5), ("content-59s", 14, 0)]:
            got_allowed, got_denied = series["sms", rule]
            was_allowed, was_denied = series_before.get(("sms", rule), (0, 0))
            assert (got_allowed[-1] - was_allowed, got_denied[-1] - was_denied) == (
                allowed,
                denied,
            )
            if untouched is not None:
                assert got_allowed[:-1] == got_denied[:-1] == untouched


def _one_rule(directory: Path) -> Path:
    """A configuration on memory:// (one worker): policy sms, 2/minute per recipient."""
    config = directory / "sms.toml"
    config.write_text(
        'backend = "memory://"\n[[policy]]\nname = "sms"\n'
        'rules = [{ rate = "2/minute", by = "recipient", name = "rcpt-1m" }]\n'
    )
    return config


@pytest.mark.slow  # a real freqguard serve, a real browser, seconds each
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (CI installs it)")
def test_the_page_charts_each_policy_and_refreshes(tmp_path: Path) -> None:
    config = _one_rule(tmp_path)
    totals = """[...document.querySelectorAll('svg.chart polyline')].map((line) =>
      line.dataset.values.split(',').map(Number).reduce((a, b) => a + b, 0))"""
    with serving(config) as served, Browser(tmp_path / "profile") as page:
        hit = f"{served.url}/v1/policies/sms/hit"
        for _ in range(3):
            httpx.post(hit, json={"context": {"recipient": "a"}})
        page.open(served.url + "/")
        assert page.run("document.querySelectorAll('svg.chart').length") == 1
        assert page.run(totals) == [2, 1]  # allowed, denied
        title = page.run("document.querySelector('.history-title').textContent")
        assert title == "sms: 2 allowed, 1 denied (denied by rcpt-1m 1)"
        top = "[...document.querySelectorAll('#top tbody td')].map((td) => td.textContent)"
        key = context_digest({"recipient": "a"}, ("recipient",))
        assert page.run(top) == ["sms", key, "1"]  # a digest, never the context
        page.open(served.url + "/?policy=sms&recipient=a")  # a context looked up: matched
        page.until("document.body.dataset.ready === '1'", "the page", seconds=20)
        assert page.run(top) == ["sms", "recipient=a", "1"]
        assert "denied 1 times in the last 5 minutes" in page.run("$('answer').textContent")
        httpx.post(hit, json={"context": {"recipient": "b"}})
        # the page asks again every five seconds: polled, bounded
        page.until(f"JSON.stringify({totals}) === '[3,1]'", "the refreshed chart", seconds=20)


@pytest.mark.slow  # a real freqguard serve, a real browser, seconds each
def test_serve_history_off_keeps_none(tmp_path: Path, redis_server: RedisServer) -> None:
    flush([redis_server])
    with serving(sms_config(tmp_path, redis_server.port), "--history", "off") as served:
        hit = httpx.post(
            f"{served.url}/v1/policies/sms/hit",
            json={"context": {"recipient": "a", "content": "x"}},
            timeout=5,
        )
        assert hit.status_code == 200, hit.text
        read = httpx.get(f"{served.url}/v1/stats/history", timeout=5)
        assert read.status_code == 404
        assert "history is off" in read.json()["detail"]
    assert not [k for k in redis_server.client.keys("*") if b":stats:" in k]


@pytest.mark.slow  # a real freqguard serve, a real browser, seconds each
@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium)")
def test_with_the_history_off_the_page_says_so(tmp_path: Path) -> None:
    """Not a quiet chart nor an empty top list: both say the history is off."""
    config = _one_rule(tmp_path)
    with (
        serving(config, "--history", "off") as served,
        Browser(tmp_path / "profile") as page,
    ):
        for _ in range(3):
            httpx.post(f"{served.url}/v1/policies/sms/hit", json={"context": {"recipient": "a"}})
        page.open(served.url + "/")
        off = "(the decisions' history is off (freqguard serve --history off))"
        page.until(f"document.getElementById('top-note').textContent === {json.dumps(off)}", "top")
        assert page.run("document.getElementById('history-at').textContent") == off
        assert page.run("document.querySelectorAll('svg.chart').length") == 0
