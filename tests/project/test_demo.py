"""The README's demo command works and shows each rule blocking."""

from __future__ import annotations

import subprocess
import sys

import pytest

from freqguard.cli import main


def test_demo_shows_every_blocking_rule(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    blocked = [line for line in out.splitlines() if "BLOCKED" in line]
    assert len(blocked) == 4
    assert "content-59s" in blocked[0]
    assert "alice" in blocked[0]
    assert "rcpt-1m" in blocked[1]
    assert "Deal #15" in blocked[1]
    assert "content-59m" in blocked[2]
    assert "carol" in blocked[2]
    assert "23 sent, 3 blocked" in out


def test_demo_shows_quiet_hours_and_a_capped_priority(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    scene = capsys.readouterr().out.split("Messaging:")[1].splitlines()
    lines = [line.split() for line in scene if line.startswith("  ")]
    assert lines[0][:3] == ["Thu", "21:30", "transactional"]
    assert lines[0][-1] == "sent"  # through the quiet hours
    assert " ".join(lines[1][-6:]) == "deferred to Fri 08:00 (quiet hours)"
    assert lines[3][-3:] == ["BLOCKED", "by", "day"]  # marketing's cap of 2
    assert lines[4][2] == "transactional"
    assert lines[4][-1] == "sent"


def test_demo_runs_as_a_module() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "freqguard", "demo"], capture_output=True, text=True, check=True
    )
    assert "BLOCKED" in done.stdout
