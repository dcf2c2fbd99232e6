"""What the configuration file tests share (``test_config.py``, ``test_config_errors.py``,
and ``tests/project/test_config_env.py``): the repository's root, a file of two policies, a
file of quiet hours and priorities, and no ``FREQGUARD_URL`` from the environment (an
autouse fixture: the two unit modules import it). No I/O: text only."""

from __future__ import annotations

from pathlib import Path

import pytest

from freqguard.config import ENV

ROOT = Path(__file__).resolve().parent.parent.parent

BASE = """\
prefix = "app"
deny_cache = 10

[[policy]]
name = "sms"
rules = [
  { rate = "15/minute", by = "recipient", name = "rcpt-1m" },
  { rate = "2 per 59 seconds", by = ["recipient", "content"], name = "content-59s" },
]

[[policy]]
name = "vendor"
on_error = "allow"
rules = [{ rate = "200/second", strategy = "gcra", burst = 20 }]
"""


@pytest.fixture(autouse=True)
def _no_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


MESSAGING = """\
[[policy]]
name = "push"
priorities = ["transactional", "marketing"]
quiet = { start = "21:00", end = "08:00", tz_from = "tz", exempt = ["transactional"] }

[[policy.rules]]
rate = "5/day"
by = "recipient"
name = "day"
calendar = true
tz_from = "tz"
caps = { marketing = 3 }

[[policy.rules]]
rate = "1/hour"
by = "recipient"
name = "promo"
only = ["marketing"]
"""
