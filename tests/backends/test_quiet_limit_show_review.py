"""An adversarial review of 29d1a61 (quiet hours "no quota of a billion in headers or
inspect") on a real Redis: the command line's other reading of a policy's rules. A failing
test; its own redis-server (``tests/conftest.py``), the command run in process."""

from __future__ import annotations

from pathlib import Path

import pytest

from freqguard.config import ENV
from tests.conftest import flush
from tests.project.cli_run import run
from tests.servers import RedisServer


def test_limit_show_gives_quiet_hours_no_rate_of_a_billion(
    tmp_path: Path, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A configuration ``[[policy]] name = "push"``, ``quiet = { start = "21:00", end =
    "08:00", tz = "UTC" }``, ``rules = [{ rate = "3/day", by = "recipient" }]``; ``freqguard
    limit show push.toml push recipient=dana`` (docs/cli.md: "each rule's rate for one
    partition value") on Redis prints ``quiet-hours  1000000000/day`` (``--json``:
    ``"quiet-hours": "1000000000/day"``): ``operate.limit_show`` writes every rate
    ``limits_for`` returns, the quiet hours' internal stand-in too. 29d1a61 made
    ``freqguard inspect`` (the same module) show that pseudo-rule without numbers, "no
    quota of a billion"; ``limit show`` was left as it was. Expected: no 1000000000 in the
    output."""
    flush([redis_server])
    monkeypatch.setenv(ENV, f"redis://127.0.0.1:{redis_server.port}/0")
    config = tmp_path / "push.toml"
    config.write_text(
        "[[policy]]\n"
        'name = "push"\n'
        'quiet = { start = "21:00", end = "08:00", tz = "UTC" }\n'
        'rules = [{ rate = "3/day", by = "recipient" }]\n'
    )
    done = run("limit", "show", str(config), "push", "recipient=dana")
    assert done.code == 0, done.err
    assert "3/day" in done.out, done.out  # the rules' rates; the quiet hours have none
    assert "1000000000" not in done.out, done.out
