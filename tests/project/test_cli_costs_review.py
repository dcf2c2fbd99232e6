"""An adversarial review of 33ca5c9 (design note 107: a cost judged by the capacity as
decided for its hit, its tier's rate) at ``freqguard replay``, run in this process as the
console script runs it. Each finding a failing test."""

from __future__ import annotations

import json
from pathlib import Path

from tests.project.cli_run import run

CONFIG = """\
[[policy]]
name = "t"

[[policy.rules]]
rate = "10/minute"
by = ["u"]
name = "r"
tiers = {{ from = "plan", rates = {{ pro = "{pro}/minute" }} }}
"""


def test_replay_what_if_names_the_configuration_that_refuses_a_line_s_cost(
    tmp_path: Path,
) -> None:
    """``now.toml``: rule 'r' of policy 't', 10/minute, tier pro 100/minute; ``next.toml``
    the same with pro at 30/minute. A log of one line, ``{"time": 1700000000, "policy":
    "t", "context": {"u": "a", "plan": "pro"}, "cost": 40}``. ``freqguard replay now.toml
    log.jsonl`` decides it (allowed, exit 0: 33ca5c9 let a tier's cost through). With
    ``--what-if next.toml`` the run stops, exit 2, saying only ``freqguard: line 1: cost 40
    exceeds the capacity 30 of rule 'r' (policy 't') for this hit ...``: neither file is
    named, and the one given first (whose pro tier takes 100) reads as the one at fault.
    Expected: the refusal names the what-if configuration (``next.toml`` or
    ``--what-if``)."""
    now, then = tmp_path / "now.toml", tmp_path / "next.toml"
    now.write_text(CONFIG.format(pro=100))
    then.write_text(CONFIG.format(pro=30))
    log = tmp_path / "log.jsonl"
    line = {"time": 1_700_000_000, "policy": "t", "context": {"u": "a", "plan": "pro"}}
    log.write_text(json.dumps({**line, "cost": 40}) + "\n")
    alone = run("replay", str(now), str(log), "--no-progress", "--json")
    assert alone.code == 0, alone.err  # the first configuration takes the line
    both = run("replay", str(now), str(log), "--what-if", str(then), "--no-progress", "--json")
    assert both.code == 2
    assert "next.toml" in both.err or "what-if" in both.err, both.err
