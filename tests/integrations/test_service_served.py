"""The decision service as a real ``freqguard serve`` with two uvicorn workers on a shared
Redis, called over loopback HTTP and stopped by its PID: counts across workers, in the
metrics and the stats whichever worker answers, and the curl and JavaScript examples
speaking the contract. The API in process is in ``test_service.py``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import flush
from tests.integrations.service_process import serving, sms_config
from tests.servers import RedisServer


@pytest.fixture
def service(tmp_path: Path, redis_server: RedisServer) -> Iterator[str]:
    """``freqguard serve`` with two workers on a shared Redis, stopped by its PID."""
    flush([redis_server])
    tokens = tmp_path / "tokens"
    tokens.write_text("t0ken\n")
    config = sms_config(tmp_path, redis_server.port)
    with serving(config, "--workers", "2", "--token-file", str(tokens)) as served:
        yield served.url


@pytest.mark.slow  # a real freqguard serve with workers
def test_a_served_policy_counts_across_workers(service: str) -> None:
    auth = {"authorization": "Bearer t0ken"}
    with httpx.Client(base_url=service, headers=auth, timeout=10) as http:
        one = {"context": {"recipient": "a", "content": "x"}}
        hit = f"{service}/v1/policies/sms/hit"
        # each on a new connection, which either worker may accept: the count is the store's
        answers = [httpx.post(hit, json=one, headers=auth).json()["allowed"] for _ in range(5)]
        assert answers == [True, True, True, False, False]
        batch = http.post(
            "/v1/policies/sms/hit-many", json={"contexts": [{"recipient": "b", "content": "x"}] * 4}
        )
        assert [d["allowed"] for d in batch.json()["decisions"]] == [True, True, True, False]
        assert http.get("/openapi.json").status_code == 200
    # every worker's counts in every scrape, whichever worker answers it (each scrape on a
    # new connection): one worker's alone flipped between scrapes (an operator's first hour)
    scrapes = [_decided(httpx.get(f"{service}/metrics").text) for _ in range(8)]
    assert scrapes == [{"allowed": 6.0, "denied": 3.0}] * 8
    stats = [httpx.get(f"{service}/v1/stats").json()["rows"][0] for _ in range(4)]
    assert {(row["allowed"], row["denied"]) for row in stats} == {(6, 3)}
    assert (
        httpx.post(
            f"{service}/v1/policies/sms/hit", json={"context": {"recipient": "a"}}
        ).status_code
        == 401
    )


def _decided(metrics: str) -> dict[str, float]:
    """``freqguard_decisions_total`` summed by outcome, from a scrape's text."""
    found: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith("freqguard_decisions_total{"):
            outcome = line.split('outcome="')[1].split('"')[0]
            found[outcome] = found.get(outcome, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples" / "service"


def _four_times(command: list[str], service: str) -> list[subprocess.CompletedProcess[str]]:
    """An example client run four times against the service, as one recipient."""
    env = {**os.environ, "FREQGUARD_SERVICE": service, "FREQGUARD_TOKEN": "t0ken"}
    return [
        subprocess.run(command, capture_output=True, text=True, env=env, timeout=30, check=False)
        for _ in range(4)
    ]


@pytest.mark.slow  # a real freqguard serve with workers
@pytest.mark.skipif(shutil.which("curl") is None, reason="no curl on this machine")
def test_the_curl_example_speaks_the_contract(service: str) -> None:
    runs = _four_times(["sh", str(EXAMPLES / "hit.sh"), "sms", "c", "hi"], service)
    assert [run.returncode for run in runs] == [0, 0, 0, 1]
    assert json.loads(runs[3].stdout)["denied_by"] == ["rcpt-1m"]


@pytest.mark.slow  # a real freqguard serve with workers
@pytest.mark.skipif(shutil.which("curl") is None, reason="no curl on this machine")
def test_the_curl_example_sends_any_content(service: str) -> None:
    """A content with quotes, a backslash and a newline (a message as users write it) is
    sent as JSON: printf's "%s" inside a JSON string made a 422 of it (exit 2)."""
    content = 'Say "hi" \\o/\nbye'
    runs = _four_times(["sh", str(EXAMPLES / "hit.sh"), "sms", "e", content], service)
    assert [run.returncode for run in runs] == [0, 0, 0, 1], runs[0].stderr


@pytest.mark.slow  # a real freqguard serve with workers
@pytest.mark.skipif(shutil.which("node") is None, reason="no node on this machine")
def test_the_javascript_example_speaks_the_contract(service: str) -> None:
    runs = _four_times(["node", str(EXAMPLES / "client.mjs"), "sms", "d", "hi"], service)
    assert [run.returncode for run in runs] == [0, 0, 0, 1], runs[-1].stderr
    assert runs[0].stdout.strip() == "send: 2 left"
    assert runs[3].stdout.startswith("blocked by rcpt-1m; retry in ")
    env = {**os.environ, "FREQGUARD_SERVICE": service, "FREQGUARD_TOKEN": "t0ken"}
    command = ["node", str(EXAMPLES / "client.mjs"), "smz", "d", "hi"]
    wrong = subprocess.run(command, capture_output=True, text=True, env=env, timeout=30)
    assert wrong.returncode == 2  # an error is not a denial (it exited 1, a stack trace)
    assert wrong.stderr.startswith("404 Not Found: no policy 'smz'"), wrong.stderr
