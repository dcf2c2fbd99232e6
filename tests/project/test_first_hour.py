"""A new user's first hour, as the issue tried it: every install line works (freqguard is
not on PyPI), and the messages say what is true, in the words of the surface they come
from: ``reset``'s flag, ``serve``'s refusal in one sentence, the Django extra by name,
``ping`` writing nothing, ``flush`` deleting only freqguard's keys, every command's
``--help`` saying what it does (``serve``'s defaults too), ``memory://`` taking no
options."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis import Redis

from freqguard import ConfigError, backend_from_url
from freqguard.config import ENV
from tests.conftest import examples, flush
from tests.project.cli_refusal_rig import CONFIG
from tests.project.cli_run import run
from tests.servers import RedisServer

ROOT = Path(__file__).resolve().parent.parent.parent
#: an install of freqguard from the package index, which has no freqguard
FROM_THE_INDEX = re.compile(r"""pip install[^\n`]*?["']?freqguard\[""")


@pytest.fixture(autouse=True)
def _no_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


def _written(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "freqguard.toml"
    path.write_text(CONFIG.format(url=url))
    return path


def test_no_page_message_or_unit_installs_freqguard_from_the_index() -> None:
    places = [*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), *ROOT.glob("freqguard/**/*.py")]
    places += [*ROOT.glob("examples/**/*"), *ROOT.glob("scripts/*")]
    found = [
        f"{path.relative_to(ROOT)}: {match[0]}"
        for path in places
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix not in (".png", ".pyc")
        for match in FROM_THE_INDEX.finditer(path.read_text())
    ]
    assert found == []


def test_reset_without_values_names_its_flag(tmp_path: Path, redis_server: RedisServer) -> None:
    flush([redis_server])
    config = _written(tmp_path, f"redis://127.0.0.1:{redis_server.port}/0")
    done = run("reset", str(config), "sms", "content=x")
    assert done.code == 2
    assert "--rule RULE" in done.err
    assert "rules=[" not in done.err


def test_serve_refuses_workers_on_memory_in_one_sentence(tmp_path: Path) -> None:
    done = run("serve", str(_written(tmp_path, "memory://")), "--workers", "2")
    assert done.code == 2
    assert "every cap: run one worker, or name a shared store: backend = " in done.err
    assert "or: memory" not in done.err


def test_ping_writes_nothing(tmp_path: Path, redis_server: RedisServer) -> None:
    flush([redis_server])
    done = run("ping", f"redis://127.0.0.1:{redis_server.port}/0")
    assert done.code == 0, done.err
    assert Redis(port=redis_server.port).keys("*") == []


@pytest.mark.parametrize("command", ["demo", "ping", "limit", "serve", "flush", "reset"])
def test_every_commands_help_says_what_it_does(command: str) -> None:
    listed = run("--help").out
    said = re.search(rf"^\s+{command}\s+(\S.*)$", listed, re.M)
    assert said is not None
    shown = " ".join(run(command, "--help").out.split())
    assert " ".join(said[1].split())[:30] in shown


def test_serve_help_shows_its_defaults_and_flush_help_what_it_deletes() -> None:
    serve = " ".join(run("serve", "--help").out.split())
    assert "(default 127.0.0.1)" in serve
    assert "(default 8080)" in serve
    flushed = " ".join(run("flush", "--help").out.split())
    assert "freqguard's keys under the prefix" in flushed
    assert "never another program's" in flushed


@pytest.mark.parametrize("url", ["memory://?anything", "memory://host", "memory:///0"])
def test_memory_takes_no_options(url: str) -> None:
    with pytest.raises(ConfigError, match="memory:// takes no host, path or options"):
        backend_from_url(url)


@settings(max_examples=examples(40))
@given(rest=st.text(min_size=1, max_size=20).filter(lambda s: s != "/"))
def test_anything_after_memory_is_refused_by_name(rest: str) -> None:
    with pytest.raises(ConfigError, match="memory://"):
        backend_from_url("memory://" + rest)
    done = run("ping", "memory://" + rest)
    assert done.code == 2


def test_the_django_integration_without_django_names_its_extra() -> None:
    code = (
        "import sys; sys.modules['django'] = None\n"
        "try:\n    import freqguard.integrations.django\n"
        "except ImportError as e:\n    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "needs Django" in done.stdout, done.stdout + done.stderr
    assert "pip install -e '.[django]'" in done.stdout
    assert "asgiref" not in done.stdout


def test_a_test_that_runs_a_tool_of_the_venv_finds_it_unactivated() -> None:
    """The OpenAPI client's generator runs ruff from PATH: its test hands it this venv's,
    so it passes with the venv not activated."""
    source = (ROOT / "tests/integrations/test_service_openapi.py").read_text()
    assert "Path(sys.executable).parent), PATH" in source


def test_the_docs_hosts_are_visibly_illustrative() -> None:
    """A store address a reader might take for theirs (10.0.0.5) is written as one that is
    plainly not (redis.example.internal); address ranges (10.0.0.0/8) stay."""
    pages = [*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), ROOT / "examples/freqguard.toml"]
    found = [
        f"{page.relative_to(ROOT)}: {address}"
        for page in pages
        for address in re.findall(r"\b(?:10|192\.168)\.[0-9.]+[0-9](?![0-9./])", page.read_text())
    ]
    assert found == []


def test_the_readmes_commands_run_after_the_docs_bins_snippet(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/redis.md's bins example claims its own prefix: the README's commands on the same
    store (the default prefix, no bins) run after it without a flush."""
    flush([redis_server])
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    page = (ROOT / "docs" / "redis.md").read_text()
    block = next(
        found[1]
        for found in re.finditer(r"^```python\n(.*?)^```", page, re.M | re.S)
        if "bins=1048576" in found[1]
    )
    namespace: dict[str, object] = {}
    exec(re.sub(r"redis://[^\s\"'/]+", url.rsplit("/", 1)[0], block), namespace)
    namespace["guard"].close()  # type: ignore[attr-defined]
    monkeypatch.setenv(ENV, url)
    example = str(ROOT / "examples" / "freqguard.toml")
    who = "recipient=+4917612345678"
    for words in (
        ("inspect", example, "sms", who, "content=hello"),
        ("limit", "set", example, "sms", "rcpt-1d", "none", who),
        ("reset", example, "sms", who),
    ):
        done = run(*words)
        assert done.code == 0, (words, done.err)
