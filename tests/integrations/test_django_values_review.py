"""Review of b608dc9 (Django: every bad ``FREQGUARD_*`` value reported): a bad file hidden
behind FREQGUARD_BACKEND, a valid file read twice, and a setting's problem told on the line
of a configuration file's last problem."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("django")
from tests.integrations import django_site

django_site.setup()
from django.core import checks  # noqa: E402
from django.test import override_settings  # noqa: E402

import freqguard.integrations._settings as integration_settings  # noqa: E402
from freqguard import ConfigError  # noqa: E402
from freqguard.config import load  # noqa: E402
from freqguard.config.load import ENV  # noqa: E402
from freqguard.integrations._django_settings import read_settings  # noqa: E402

_BAD_FILE = 'prefix = "a b"\n\n[[policy]]\nname = "a"\nrules = [{ rate = "5/minuet" }]\n'
_GOOD_FILE = '[[policy]]\nname = "a"\nrules = [{ rate = "5/minute" }]\n'


@pytest.fixture(autouse=True)
def _no_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


def _messages() -> list[checks.CheckMessage]:
    return [m for m in checks.run_checks() if m.id and m.id.startswith("freqguard.")]


def test_a_bad_config_file_is_told_though_freqguard_backend_is_set_too(tmp_path: Path) -> None:
    """Two settings with bad values: FREQGUARD_BACKEND beside FREQGUARD_CONFIG, and the
    file FREQGUARD_CONFIG names. ``configured`` refuses the pair before it reads the file:
    one E002, and the file's mistakes show only on the run after FREQGUARD_BACKEND is
    removed (the one-at-a-time this commit ends)."""
    path = tmp_path / "app.toml"
    path.write_text(_BAD_FILE)
    with override_settings(FREQGUARD_BACKEND="memory://", FREQGUARD_CONFIG=str(path)):
        told = [m.msg for m in _messages() if m.id == "freqguard.E002"]
    assert any("not both" in msg for msg in told), told
    assert any("5/minuet" in msg for msg in told), told


def test_read_settings_reads_a_valid_config_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``read_settings`` runs every check (``configured`` among them: the file read,
    parsed and built) and then calls ``configured`` again for the Settings: every valid
    start reads and builds the file twice (before, once), and what is used is the second
    reading, not the one checked."""
    path = tmp_path / "app.toml"
    path.write_text(_GOOD_FILE)
    read: list[object] = []

    def counted(given: object) -> object:
        read.append(given)
        return load(given)  # type: ignore[arg-type]

    monkeypatch.setattr(integration_settings, "load", counted)
    with override_settings(FREQGUARD_CONFIG=str(path)):
        settings = read_settings()
    assert settings.config is not None
    assert len(read) == 1, f"the file was read {len(read)} times"


def test_a_settings_problem_is_not_told_on_the_line_of_the_files_last_problem(
    tmp_path: Path,
) -> None:
    """The middleware's error joins the problems with ``; ``; a configuration file's
    is several lines now (``app.toml: 2 problems:`` and one indented line each), so the
    header profile's problem lands at the end of the file's last line, read as one more
    thing wrong at ``app.toml:1``."""
    path = tmp_path / "app.toml"
    path.write_text(_BAD_FILE)
    with (
        override_settings(FREQGUARD_CONFIG=str(path), FREQGUARD_HEADERS="fancy"),
        pytest.raises(ConfigError) as refused,
    ):
        read_settings()
    told = str(refused.value)
    assert "unknown header profile 'fancy'" in told
    for line in told.splitlines():
        if str(path) in line:
            assert "header profile" not in line, line
