"""What ``freqguard limit show`` prints is what ``limit set`` takes: each rule's rate as the
operator writes it for that rule, a concurrency rule's ``N concurrent`` (its lease apart)
included, so a value shown can be set back as it is; the service's ``limits`` answer says
the same (``test_service_limits_written.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import flush
from tests.project.cli_refusal_rig import _no_url as _no_url
from tests.project.cli_refusal_rig import cli as cli
from tests.servers import RedisServer

CONFIG = """\
backend = "redis://127.0.0.1:{port}/0"

[[policy]]
name = "llm"
rules = [
  {{ rate = "5 concurrent", by = "user", name = "inflight", lease = 30 }},
  {{ rate = "2 per 59 seconds", by = "user", name = "calls" }},
]
"""


def test_limit_show_writes_a_concurrency_rule_as_limit_set_takes_it(
    cli: Any, tmp_path: Path, redis_server: RedisServer
) -> None:
    flush([redis_server])
    config = tmp_path / "llm.toml"
    config.write_text(CONFIG.format(port=redis_server.port))
    shown = cli("limit", "show", str(config), "llm", "user=u1", "--json")
    assert shown.code == 0, shown.err
    limits = json.loads(shown.out)["limits"]
    assert limits == {"inflight": "5 concurrent", "calls": "2 per 59 seconds"}
    assert cli("limit", "set", str(config), "llm", "inflight", "2 concurrent", "user=u1").code == 0
    shown = cli("limit", "show", str(config), "llm", "user=u1")
    assert "2 concurrent" in shown.out, shown.out
    for rule, rate in limits.items():  # what was shown, set back as it is
        done = cli("limit", "set", str(config), "llm", rule, rate, "user=u1")
        assert done.code == 0, done.err
