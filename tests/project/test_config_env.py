"""A configuration's store from the environment (``FREQGUARD_URL``) on a real server, and the
published JSON Schema kept current by its script (a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest

from freqguard import ConfigError, ManualClock
from freqguard.config import ENV, SCHEMA, loads
from tests.servers import RedisServer
from tests.unit.config_rig import BASE, ROOT


def test_the_environment_url_wins_and_a_bad_one_is_named(
    monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> None:
    monkeypatch.setenv(ENV, f"redis://127.0.0.1:{redis_server.port}/0")
    config = loads('backend = "memory://"\n' + BASE)
    assert config.backend == f"redis://127.0.0.1:{redis_server.port}/0"
    redis_server.client.flushall()
    guard = config.guard(ManualClock(1_700_000_000))
    try:
        assert [guard.hit("sms", recipient="r", content="c").allowed for _ in range(3)] == [
            True,
            True,
            False,
        ]
    finally:
        guard.close()
    monkeypatch.setenv(ENV, "redis://127.0.0.1:99999")
    with pytest.raises(ConfigError, match=rf"^{ENV}: backend: .*port"):
        loads(BASE)
    monkeypatch.setenv(ENV, "memory://")
    with pytest.raises(ConfigError, match=r"^app.toml:1: backend: .*scheme"):
        loads('backend = "mysql://x"\n' + BASE, source="app.toml")  # checked though unused


def test_the_published_schema_is_current_and_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "config_schema.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((ROOT / "docs" / "config.schema.json").read_text()) == SCHEMA
