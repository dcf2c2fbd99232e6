"""``freqguard replay``, run as the installed console script: a log decided again agrees, decision
for decision, with a Guard on a ManualClock; ``--what-if`` counts what another configuration
would have changed; CSV reads as JSON Lines do; a bad line is an error naming it."""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from freqguard import Guard, ManualClock, MemoryBackend
from freqguard.config import loads
from tests.project.cli_run import run

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


GOOD = json.dumps(
    {
        "time": 1781200000,
        "policy": "sms",
        "context": {"recipient": "a", "content": "x", "tz": "UTC"},
    }
)
BAD_LINES = [
    ('{"time": NaN, "policy": "sms", "context": {}}', "NaN"),
    ('{"time": Infinity, "policy": "sms", "context": {}}', "Infinity"),
    ('{"time": "nan", "policy": "sms", "context": {}}', "time is epoch seconds"),
    ('{"time": "inf", "policy": "sms", "context": {}}', "time is epoch seconds"),
    ('{"time": "1e400", "policy": "sms", "context": {}}', "time must be from 0 to"),
    ('{"time": 1e400, "policy": "sms", "context": {}}', "time must be from 0 to"),
    ('{"time": -1, "policy": "sms", "context": {}}', "time must be from 0 to"),
    ('{"time": 9000000000000, "policy": "sms", "context": {}}', "time must be from 0 to"),
    ('{"time": 1' + "0" * 400 + ', "policy": "sms", "context": {}}', "time must be from 0 to"),
    ('{"time": "0001-01-01T00:00:00+01:00", "policy": "sms", "context": {}}', "time must be"),
    ('{"time": true, "policy": "sms", "context": {}}', "time is epoch seconds"),
    (GOOD[:-1] + ', "cost": 1e400}', "cost is an integer"),
    (GOOD[:-1] + ', "cost": 1.5}', "cost is an integer"),
    (GOOD[:-1] + ', "cost": "2x"}', "cost is an integer"),
    (GOOD[:-1] + ', "cost": ' + "9" * 5000 + "}", "not JSON"),
    (GOOD[:-1] + ', "costs": 2}', "unknown key 'costs'"),
    (GOOD.replace('"tz": "UTC"', '"tz": "UTC", "cost": 2'), "takes no context value 'cost'"),
    (GOOD.replace('"tz": "UTC"', '"tz": "UTC", "policy": "x"'), "takes no context value 'policy'"),
    (GOOD.replace('"tz": "UTC"', '"tz": "UTC", "self": 1'), "takes no context value 'self'"),
    (GOOD.replace('"a"', '["a"]'), "must be a str or an int"),
    (GOOD.replace('"a"', "1.5"), "must be a str or an int"),
    (GOOD.replace('"policy": "sms"', '"policy": 5'), "policy is a policy's name"),
    (GOOD.replace('"policy": "sms"', '"policy": ["sms"]'), "policy is a policy's name"),
    (GOOD.replace('"policy": "sms"', '"policy": "mms"'), "unknown policy 'mms'"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"time": 1, "context": {"a": ' * 2000 + "1" + "}}" * 2000, "nested too deeply"),
    ('{"a": ' * 33 + "1" + "}" * 33, "nested too deeply (more than 32 levels)"),
    ("[" * 33 + "]" * 33, "nested too deeply (more than 32 levels)"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_LINES, ids=[b[:40] for b, _ in BAD_LINES])
def test_a_hostile_line_exits_2_naming_it(tmp_path: Path, bad: str, message: str) -> None:
    (tmp_path / "a.toml").write_text(CONFIG.format(minute=3))
    log = tmp_path / "bad.jsonl"
    log.write_text(GOOD + "\n\n" + bad + "\n" + GOOD + "\n")
    done = run("replay", str(tmp_path / "a.toml"), str(log))
    assert done.code == 2, done.err
    assert done.err.startswith("freqguard: line 3: "), done.err
    assert message in done.err, done.err


def test_a_log_that_is_not_utf8_names_the_line_and_byte(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(CONFIG.format(minute=3))
    for name in ("bad.jsonl", "bad.csv"):
        log = tmp_path / name
        head = b"time,policy,recipient,content,tz\n" if name.endswith(".csv") else b""
        line = (
            b"1,sms,caf\xe9,x,UTC\n"
            if head
            else GOOD.replace('"a"', '"caf\xe9"').encode("latin-1") + b"\n"
        )
        log.write_bytes(head + line)
        done = run("replay", str(tmp_path / "a.toml"), str(log))
        assert done.code == 2
        number = 2 if head else 1
        assert f"line {number}: not UTF-8: byte 0xe9" in done.err, done.err


BAD_CSV = [
    ("time,policy,recipient,content,tz\n1,sms,a,x,UTC,extra\n", 2, "more fields than the header"),
    ("time,policy,recipient,content,tz\n1,sms,a\n", 2, "fewer fields than the header"),
    ("time,policy,recipient,recipient,tz\n1,sms,a,b,UTC\n", 1, "'recipient' twice"),
    ("policy,recipient,content,tz\nsms,a,x,UTC\n", 1, "no time column"),
    (
        'time,policy,recipient,content,tz\n1,sms,"' + "a" * 200_000 + '",x,UTC\n',
        2,
        "field larger than field limit",
    ),
    ("time,policy,recipient,content,tz,cost\n1,sms,a,x,UTC,1.5\n", 2, "cost is an integer"),
    ("time,policy,recipient,content,tz,policy\n1,sms,a,x,UTC,sms\n", 1, "'policy' twice"),
    ("time,policy,recipient,content,tz,self\n1,sms,a,x,UTC,1\n", 2, "no context value 'self'"),
    ("time,policy,recipient,content,tz\nnan,sms,a,x,UTC\n", 2, "time is epoch seconds"),
    ("time,policy,recipient,content,tz\n-5,sms,a,x,UTC\n", 2, "time must be from 0 to"),
]


@pytest.mark.parametrize(("text", "line", "message"), BAD_CSV, ids=[m for *_, m in BAD_CSV])
def test_a_hostile_csv_exits_2_naming_the_line(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    (tmp_path / "a.toml").write_text(CONFIG.format(minute=3))
    log = tmp_path / "bad.csv"
    log.write_text(text)
    done = run("replay", str(tmp_path / "a.toml"), str(log))
    assert done.code == 2, done.err
    assert done.err.startswith(f"freqguard: line {line}: "), done.err
    assert message in done.err, done.err


def test_brackets_inside_strings_do_not_count_as_nesting(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(CONFIG.format(minute=3))
    log = tmp_path / "ok.jsonl"
    log.write_text(GOOD.replace('"x"', json.dumps('[{\\"' * 40)) + "\n")
    done = run("replay", str(tmp_path / "a.toml"), str(log))
    assert done.code == 0, done.err


def test_a_line_longer_than_a_mebibyte_is_refused_unparsed(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(CONFIG.format(minute=3))
    log = tmp_path / "long.jsonl"
    log.write_text(GOOD + "\n" + " " * (2 << 20) + GOOD + "\n")
    done = run("replay", str(tmp_path / "a.toml"), str(log))
    assert done.code == 2
    assert "line 2: longer than 1048576 bytes" in done.err


def test_a_bom_and_crlf_lines_read_as_plain_ones(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(CONFIG.format(minute=3))
    log = tmp_path / "bom.csv"
    log.write_bytes(b"\xef\xbb\xbftime,policy,recipient,content,tz\r\n1781200000,sms,a,x,UTC\r\n")
    done = run("replay", str(tmp_path / "a.toml"), str(log), "--json")
    assert done.code == 0, done.err
    assert json.loads(done.out)["policies"][0]["hits"] == 1
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_bytes(b"\xef\xbb\xbf" + GOOD.encode() + b"\r\n")
    assert run("replay", str(tmp_path / "a.toml"), str(jsonl)).code == 0


def test_files_that_cannot_be_opened_exit_2(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(CONFIG.format(minute=3))
    log = tmp_path / "log.jsonl"
    log.write_text(GOOD + "\n")
    config = str(tmp_path / "a.toml")
    done = run("replay", config, str(log), "--decisions", str(tmp_path / "no" / "out.jsonl"))
    assert done.code == 2
    assert "out.jsonl: cannot be written" in done.err
    assert run("replay", config, str(tmp_path)).code == 2  # a directory
    log.chmod(0)
    try:
        if not os.access(log, os.R_OK):  # root reads anything
            done = run("replay", config, str(log))
            assert done.code == 2
            assert "cannot be read" in done.err
    finally:
        log.chmod(0o644)
