"""``freqguard replay``, run as the installed console script: a log decided again agrees, decision
for decision, with a Guard on a ManualClock; ``--what-if`` counts what another configuration
would have changed; CSV reads as JSON Lines do; a bad line is an error naming it."""

from __future__ import annotations

import csv
import json
import random
import subprocess
import sys
from pathlib import Path

from freqguard import Guard, ManualClock, MemoryBackend
from freqguard.config import loads

SCRIPT = Path(sys.executable).parent / "freqguard"

CONFIG = """\
[[policy]]
name = "sms"
rules = [
  {{ rate = "{minute}/minute", by = "recipient", name = "rcpt-1m" }},
  {{ rate = "2 per 59 seconds", by = ["recipient", "content"], name = "content-59s" }},
  {{ rate = "3/day", by = "recipient", name = "rcpt-day", calendar = true, tz_from = "tz" }},
]
"""


def _log(count: int, seed: int = 5) -> list[dict[str, object]]:
    rng = random.Random(seed)
    now, lines = 1_781_200_000.0, []
    for _ in range(count):
        now += rng.choice([0.0, 0.5, 3.0, 20.0, 900.0])
        recipient = rng.choice(["a", "b", "c"])
        context = {"recipient": recipient, "content": rng.choice(["x", "y"])}
        context["tz"] = {"a": "Europe/Berlin", "b": "Asia/Tokyo", "c": "America/New_York"}[
            recipient
        ]
        lines.append({"time": now, "policy": "sms", "context": context})
    return lines


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=False
    )


def _expected(config_text: str, lines: list[dict[str, object]]) -> list[bool]:
    clock = ManualClock(0)
    guard = Guard(MemoryBackend(), loads(config_text).policies, clock=clock)
    out = []
    for line in lines:
        clock.set(float(line["time"]), backwards=True)  # type: ignore[arg-type]
        out.append(guard.hit("sms", **line["context"]).allowed)  # type: ignore[arg-type]
    return out


def test_replay_agrees_with_a_guard_decision_for_decision(tmp_path: Path) -> None:
    lines = _log(2000)
    log = tmp_path / "week.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = tmp_path / "a.toml"
    config.write_text(CONFIG.format(minute=3))
    decisions = tmp_path / "decisions.jsonl"
    done = _run("replay", str(config), str(log), "--decisions", str(decisions), "--json")
    assert done.returncode == 0, done.stderr
    got = [json.loads(row)["allowed"] for row in decisions.read_text().splitlines()]
    expected = _expected(CONFIG.format(minute=3), lines)
    assert got == expected
    assert 0 < sum(expected) < len(expected)
    report = json.loads(done.stdout)
    assert report["policies"] == [{"policy": "sms", "hits": 2000, "allowed": sum(expected)}]
    assert {r["rule"] for r in report["rules"]} == {"rcpt-1m", "content-59s", "rcpt-day"}


def test_what_if_counts_the_decisions_another_config_changes(tmp_path: Path) -> None:
    lines = _log(1500, seed=9)
    log = tmp_path / "week.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    (tmp_path / "a.toml").write_text(CONFIG.format(minute=3))
    (tmp_path / "b.toml").write_text(CONFIG.format(minute=1))
    done = _run(
        "replay",
        str(tmp_path / "a.toml"),
        str(log),
        "--what-if",
        str(tmp_path / "b.toml"),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    (policy,) = json.loads(done.stdout)["policies"]
    a = _expected(CONFIG.format(minute=3), lines)
    b = _expected(CONFIG.format(minute=1), lines)
    assert policy["allowed"] == sum(a)
    assert policy["what_if_allowed"] == sum(b)
    assert policy["newly_blocked"] == sum(x and not y for x, y in zip(a, b, strict=True)) > 0
    assert policy["newly_allowed"] == sum(y and not x for x, y in zip(a, b, strict=True))
    table = _run(
        "replay", str(tmp_path / "a.toml"), str(log), "--what-if", str(tmp_path / "b.toml")
    )
    assert "newly blocked" in table.stdout


def test_a_csv_log_reads_as_json_lines_do(tmp_path: Path) -> None:
    lines = _log(300, seed=3)
    log = tmp_path / "week.csv"
    with log.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["time", "policy", "recipient", "content", "tz"])
        for line in lines:
            ctx = line["context"]
            writer.writerow([line["time"], "sms", ctx["recipient"], ctx["content"], ctx["tz"]])  # type: ignore[index]
    (tmp_path / "a.toml").write_text(CONFIG.format(minute=3))
    decisions = tmp_path / "d.jsonl"
    done = _run("replay", str(tmp_path / "a.toml"), str(log), "--decisions", str(decisions))
    assert done.returncode == 0, done.stderr
    got = [json.loads(row)["allowed"] for row in decisions.read_text().splitlines()]
    assert got == _expected(CONFIG.format(minute=3), lines)


def test_a_bad_line_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(CONFIG.format(minute=3))
    log = tmp_path / "bad.jsonl"
    good = json.dumps(_log(1)[0])
    for bad, message in [
        ("{not json", "line 2: not JSON"),
        ('{"time": "yesterday", "policy": "sms", "context": {}}', "line 2: time is epoch"),
        ('{"time": 1, "policy": "sms", "context": {"recipient": "a"}}', "line 2: policy 'sms'"),
    ]:
        log.write_text(good + "\n" + bad + "\n")
        done = _run("replay", str(tmp_path / "a.toml"), str(log))
        assert done.returncode == 2
        assert message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
