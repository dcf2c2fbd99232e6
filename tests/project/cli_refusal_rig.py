"""What the command refusal tests share (``test_cli_refusals.py``,
``test_cli_serve_refusals.py``, ``test_cli_flush.py``): a configuration of one policy, the
command line run in this process (``cli``), no ``FREQGUARD_URL`` from the environment (an
autouse fixture: each module imports it), and the configuration on memory:// or on the
suite's Redis server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from freqguard.config import ENV
from tests.conftest import flush
from tests.project.cli_run import run
from tests.servers import RedisServer

CONFIG = """\
backend = "{url}"

[[policy]]
name = "sms"
rules = [
  {{ rate = "3/minute", by = "recipient", name = "rcpt-1m" }},
  {{ rate = "2 per 59 seconds", by = ["recipient", "content"], name = "content-59s" }},
]
"""


@pytest.fixture
def cli() -> Any:
    return run


@pytest.fixture(autouse=True)
def _no_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


@pytest.fixture
def memory_config(tmp_path: Path) -> Path:
    path = tmp_path / "memory.toml"
    path.write_text(CONFIG.format(url="memory://"))
    return path


@pytest.fixture
def redis_config(tmp_path: Path, redis_server: RedisServer) -> Path:
    flush([redis_server])
    path = tmp_path / "redis.toml"
    path.write_text(CONFIG.format(url=f"redis://127.0.0.1:{redis_server.port}/0"))
    return path
