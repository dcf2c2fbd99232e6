"""``freqguard replay`` of a log naming a policy with a concurrency rule (adversarial pass
over the places leases are taken for a user). ``replay`` is the one command that hits a
configuration's policies; a log of messages says when each call began, never when it
ended, so a concurrency rule cannot be replayed. Today the replay stops at the first line
naming such a policy (after reading every line before it, of a log that may be large),
exit 2, with the guard's error for a Python caller: "take its leases with
guard.lease('vendor', ...) (a with block gives each back)", which a shell user cannot do
and which says nothing of what replay can or cannot decide."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from freqguard.cli import main

CONFIG = """\
[[policy]]
name = "vendor"
rules = [
  { rate = "2 concurrent", lease = 60, by = "account", name = "flight" },
  { rate = "10/minute", by = "account", name = "rate" },
]
"""


def test_a_replay_of_a_concurrency_policy_says_what_replay_cannot_decide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "freqguard.toml"
    config.write_text(CONFIG)
    log = tmp_path / "log.jsonl"
    line = {"time": 1_700_000_000, "policy": "vendor", "context": {"account": "a"}}
    log.write_text(json.dumps(line) + "\n")

    code = main(["replay", "--no-progress", str(config), str(log)])
    said = capsys.readouterr().err
    if code != 0:  # refused: in the words of the command, not of the Python API
        assert "guard.lease" not in said, said
        assert "replay" in said, said
