"""What the command line's property tests share (``test_cli_properties.py``,
``test_cli_properties_documents.py``, ``test_cli_properties_logs.py``): a configuration of
two policies, Hypothesis' settings for them, and random text that names no folder of the
zone databases (a zone named by one is clock.py's to refuse)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.conftest import examples

CONFIG = """\
backend = "{url}"

[[policy]]
name = "sms"
rules = [
  {{ rate = "3/minute", by = "recipient", name = "rcpt-1m" }},
  {{ rate = "2 per 59 seconds", by = ["recipient", "content"], name = "content-59s" }},
  {{ rate = "5/day", by = "recipient", name = "day", calendar = true, tz_from = "tz" }},
]

[[policy]]
name = "vendor"
rules = [{{ rate = "20/second", strategy = "gcra", burst = 5, name = "vendor" }}]
"""


def _zone_folders() -> frozenset[str]:
    """The folders of the zone databases ("America", "Etc"): a zone named by one is
    clock.py's to refuse (another change), so these tests do not generate them."""
    import importlib.util
    import zoneinfo

    roots = [Path(p) for p in zoneinfo.TZPATH]
    spec = importlib.util.find_spec("tzdata")
    if spec is not None and spec.origin is not None:
        roots.append(Path(spec.origin).parent / "zoneinfo")
    return frozenset(
        str(p.relative_to(root))
        for root in roots
        if root.is_dir()
        for p in root.rglob("*")
        if p.is_dir()
    )


FOLDERS = _zone_folders()
SETTINGS = settings(
    max_examples=examples(100),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    deadline=None,
)

TEXT = st.text(max_size=12).filter(lambda s: s not in FOLDERS)
