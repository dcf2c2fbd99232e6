"""What ``freqguard serve`` refuses, with exit code 2 and the reason, before it serves: more
than one worker on a store that keeps nothing between processes, options it cannot use, a
bad token file, a host or a port it cannot bind; and what it says when it serves: where it
listens, and that serving beyond loopback without a token lets anyone in. uvicorn is not
run (``served``: what it would be handed). The rig is ``cli_refusal_rig.py``."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.project.cli_refusal_rig import _no_url as _no_url
from tests.project.cli_refusal_rig import cli as cli
from tests.project.cli_refusal_rig import memory_config as memory_config
from tests.project.cli_refusal_rig import redis_config as redis_config


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What ``serve`` would hand uvicorn (``service.server.run``: it binds, then serves)."""
    from freqguard.service import server

    calls: list[dict[str, Any]] = []

    def run(wire: Any, host: str, port: int, workers: int, bound: Any, **settings: Any) -> bool:
        # the environment the workers would inherit (cli_run puts the process's back)
        calls.append({"host": host, "port": port, "workers": workers, **settings})
        calls[-1]["environ"] = dict(os.environ)
        bound()  # as the socket binds
        return True

    monkeypatch.setattr(server, "run", run)
    return calls


def test_serve_on_memory_is_one_process_or_refused(
    cli: Any, memory_config: Path, served: list[dict[str, Any]]
) -> None:
    done = cli("serve", str(memory_config), "--workers", "2")
    assert done.code == 2
    assert "2 workers" in done.err
    assert "run one worker, or name a shared store" in done.err
    assert served == []
    done = cli("serve", str(memory_config), "--port", "8123")
    assert done.code == 0, done.err
    assert [call["workers"] for call in served] == [1]
    assert "listening on http://127.0.0.1:8123" in done.err
    assert "no token" in done.err  # the start line says whether calls need one


def test_serve_says_how_many_tokens_it_requires(
    cli: Any, memory_config: Path, served: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FREQGUARD_TOKENS", "s3cretA\ns3cretB")
    done = cli("serve", str(memory_config), "--port", "8123")
    assert done.code == 0, done.err
    assert "2 tokens" in done.err
    assert "s3cret" not in done.err


def test_serve_with_workers_on_a_shared_store_says_where_it_listens(
    cli: Any, redis_config: Path, served: list[dict[str, Any]]
) -> None:
    done = cli("serve", str(redis_config), "--workers", "3", "--host", "::1", "--port", "9000")
    assert done.code == 0, done.err
    assert served[0]["workers"] == 3
    assert "listening on http://[::1]:9000 (3 workers, loop " in done.err


def test_serve_beyond_loopback_without_tokens_says_so_and_a_bad_token_file_is_refused(
    cli: Any,
    redis_config: Path,
    served: list[dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FREQGUARD_TOKENS", raising=False)
    monkeypatch.delenv("FREQGUARD_TOKENS_FILE", raising=False)
    done = cli("serve", str(redis_config), "--host", "0.0.0.0")
    assert done.code == 0, done.err
    assert "with no token: anyone who can reach this address" in done.err
    assert "with no token" not in cli("serve", str(redis_config)).err  # loopback: quiet
    # on loopback, the workers answer only its names (DNS rebinding), and --allow-host's
    assert cli("serve", str(redis_config), "--allow-host", "limits.internal").code == 0
    hosts = served[-1]["environ"]["FREQGUARD_SERVE_HOSTS"]
    assert hosts == "localhost,127.0.0.1,::1,limits.internal"
    tokens = tmp_path / "tokens"
    tokens.write_text("good-token-1\nk,9fQ2secret\n")
    monkeypatch.delenv("FREQGUARD_TOKENS_FILE", raising=False)
    done = cli("serve", str(redis_config), "--host", "0.0.0.0", "--token-file", str(tokens))
    assert done.code == 2
    assert "line 2" in done.err
    assert "9fQ2secret" not in done.err
    tokens.write_text("good-token-1\n")
    done = cli("serve", str(redis_config), "--host", "0.0.0.0", "--token-file", str(tokens))
    assert done.code == 0, done.err
    assert "with no token" not in done.err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--port", "0"), "--port"),
        (("--port", "70000"), "--port"),
        (("--workers", "0"), "--workers"),
        (("--workers", "-3"), "--workers"),
        (("--workers", "100000"), "--workers"),
        (("--log-level", "loud"), "--log-level"),
        (("--token-file", "/nonexistent/tokens"), "--token-file"),
        (("--allow-host", "evil/path"), "--allow-host"),
    ],
)
def test_serve_refuses_options_it_cannot_use(
    cli: Any, redis_config: Path, served: list[dict[str, Any]], flags: tuple[str, ...], named: str
) -> None:
    done = cli("serve", str(redis_config), *flags)
    assert done.code == 2
    assert named in done.err
    assert served == []


def test_serve_that_cannot_listen_exits_2(cli: Any, memory_config: Path) -> None:
    """serve binds its socket before uvicorn starts: a host it cannot bind is refused."""
    done = cli("serve", str(memory_config), "--host", "nonexistent.invalid")
    assert done.code == 2
    assert "cannot serve on nonexistent.invalid:8080" in done.err
    assert "serve: listening on http" not in done.err


def test_serve_on_a_taken_port_is_refused_without_saying_it_listens(
    cli: Any, memory_config: Path
) -> None:
    """Found by a new user's first hour: serve said "listening on" a port another process
    held, then that it could not serve there."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("serve", str(memory_config), "--port", str(port))
    assert done.code == 2
    assert f"cannot serve on 127.0.0.1:{port}" in done.err
    assert "serve: listening on http" not in done.err
