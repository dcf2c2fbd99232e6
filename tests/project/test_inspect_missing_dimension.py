"""inspect with a context that leaves out a dimension (a review of design note 114's
session): what a row needing the missing value says is not decided by a value made up."""

from __future__ import annotations

import json
from pathlib import Path

from freqguard.config import load
from tests.conftest import flush
from tests.project.cli_run import run
from tests.servers import RedisServer

CONFIG = """\
backend = "redis://127.0.0.1:{port}"

[[policy]]
name = "p"
rules = [
  {{ rate = "5/minute", by = "user", name = "own" }},
  {{ rate = "2/minute", by = "region", name = "regional" }},
  {{ rate = "3/minute", by = ["user", "region"], name = "both" }},
]
"""


def test_a_row_needing_a_dimension_says_nothing_of_its_exemption(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """``regional`` is exempt for region eu (a per-key limit): inspect with the user alone
    said ``"exempt": false`` for it, read for no region at all; it depends on the region
    left out, so it is null, as its numbers are. ``both`` needs the region too, but its
    per-key limit is kept per user (its partition), given: exempt for u, it says so."""
    flush([redis_server])
    path = tmp_path / "f.toml"
    path.write_text(CONFIG.format(port=redis_server.port))
    guard = load(path).guard()
    guard.set_limit("p", "regional", None, region="eu")
    guard.set_limit("p", "both", None, user="u")
    guard.close()
    done = run("inspect", str(path), "p", "user=u", "--json")
    assert done.code == 0, done.err
    rows = {r["rule"]: r for r in json.loads(done.out)["rules"]}
    assert (rows["regional"]["needs"], rows["regional"]["exempt"]) == (["region"], None)
    assert (rows["both"]["needs"], rows["both"]["exempt"]) == (["region"], True)
    assert (rows["own"]["needs"], rows["own"]["exempt"], rows["own"]["used"]) == ([], False, 0)
