"""examples/service/: the Dockerfile (not built here: no Docker daemon in CI) read and held
to what it must say, and the systemd unit checked by ``systemd-analyze verify``."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples" / "service"


def _instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (EXAMPLES / "Dockerfile").read_text())
    found = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def _exec_form(text: str) -> list[str]:
    form: list[str] = json.loads(text)
    return form


def test_the_dockerfile_runs_as_a_user_that_is_not_root() -> None:
    instructions = _instructions()
    words = [word for word, _ in instructions]
    users = [rest for word, rest in instructions if word == "USER"]
    assert users
    assert users[-1] not in {"root", "0", "0:0"}
    assert words.index("USER") < words.index("ENTRYPOINT")
    assert words[0] == "FROM"


def test_the_dockerfile_checks_health_on_the_port_it_serves() -> None:
    instructions = dict(_instructions())
    command = _exec_form(instructions["HEALTHCHECK"].partition("CMD")[2].strip())
    entry = _exec_form(instructions["ENTRYPOINT"])
    port = entry[entry.index("--port") + 1]
    assert f"http://127.0.0.1:{port}/healthz" in command[-1]
    assert entry[:2] == ["freqguard", "serve"]
    assert f"EXPOSE {port}" in (EXAMPLES / "Dockerfile").read_text()


def test_the_dockerfile_installs_the_wheel_ci_builds() -> None:
    """The wheel path it copies is where CI's own build command (.ci/run) writes it."""
    ci = (ROOT / ".ci" / "run").read_text()
    build = next(line for line in ci.splitlines() if "python -m build" in line)
    args = shlex.split(build.partition("&&")[2].partition(">")[0])
    assert "--wheel" in args
    outdir = args[args.index("--outdir") + 1]
    copies = [rest for word, rest in _instructions() if word == "COPY"]
    assert f"{outdir}/freqguard-*.whl /tmp/wheels/" in copies
    assert any(rest.startswith("examples/freqguard.toml ") for rest in copies)
    assert (ROOT / "examples" / "freqguard.toml").is_file()
    pip = next(rest for word, rest in _instructions() if word == "RUN" and "pip install" in rest)
    assert "[serve,redis,prometheus]" in pip


def test_the_dockerfile_s_health_check_is_python_that_compiles() -> None:
    command = _exec_form(dict(_instructions())["HEALTHCHECK"].partition("CMD")[2].strip())
    assert command[:2] == ["python", "-c"]
    compile(command[2], "HEALTHCHECK", "exec")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    """``systemd-analyze verify``, its ExecStart pointed at this venv's ``freqguard``."""
    unit = (EXAMPLES / "freqguard.service").read_text()
    assert "/opt/freqguard/bin/freqguard serve " in unit
    local = tmp_path / "freqguard.service"
    local.write_text(unit.replace("/opt/freqguard/bin", str(Path(sys.executable).parent)))
    verified = subprocess.run(
        ["systemd-analyze", "verify", str(local)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert verified.returncode == 0, verified.stderr
    assert verified.stderr == "", verified.stderr


def test_the_unit_waits_longer_than_the_service_s_graceful_stop() -> None:
    unit = (EXAMPLES / "freqguard.service").read_text()
    graceful = int(re.search(r"--shutdown-timeout (\d+)", unit).group(1))  # type: ignore[union-attr]
    stop = int(re.search(r"^TimeoutStopSec=(\d+)$", unit, re.M).group(1))  # type: ignore[union-attr]
    assert stop > graceful
    assert re.search(r"^User=freqguard$", unit, re.M)


def test_the_container_s_graceful_stop_fits_inside_docker_stop_s_wait() -> None:
    entry = _exec_form(dict(_instructions())["ENTRYPOINT"])
    assert int(entry[entry.index("--shutdown-timeout") + 1]) < 10  # docker stop's default
