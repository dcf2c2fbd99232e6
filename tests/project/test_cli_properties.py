"""Hostile input to every entry point of the command line, by hypothesis: random words for
every command (against a real redis-server and on memory), and words that are not UTF-8.
Each ends in exit 0 or 2 (1 only where the store is really down), never a traceback; a
refused command writes nothing to the store. Random configuration documents are in
``test_cli_properties_documents.py``, random log lines in ``test_cli_properties_logs.py``;
what they share is in ``cli_property_rig.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from freqguard.config import ENV, load
from tests.conftest import flush
from tests.project.cli_property_rig import CONFIG, SETTINGS, TEXT
from tests.project.cli_run import run
from tests.servers import RedisServer, free_port


def _state(server: RedisServer) -> dict[Any, Any]:
    client = server.client
    return {key: (client.dump(key), client.pttl(key) > 0) for key in client.keys("*")}


NUMBERS = st.sampled_from(
    [
        "0",
        "-1",
        "1e400",
        "1e303",
        "nan",
        "inf",
        "9" * 30,
        "9" * 5000,
        "0x10",
        "1_000",
        "\u0661",
        "3.5",
    ]
)
NAMES = st.sampled_from(
    [
        *("recipient", "content", "tz", "priority", "policy", "self", "rate", "ttl", "rule"),
        *("cost", "contexts", "timeout", "", "a b", "ü", "__class__", "1x", "config", "json"),
    ]
)
VALUES = st.one_of(TEXT, NUMBERS, st.sampled_from(["+4917612345678", "UTC", "Asia/Tokyo"]))
PAIRS = st.builds(lambda n, v: f"{n}={v}", st.one_of(NAMES, TEXT), VALUES)
FLAGS = st.sampled_from(
    [
        *("--json", "--yes", "--ttl", "--prefix", "--workers", "--port", "--host", "--what-if"),
        *("--policy", "--decisions", "--log-level", "--token-file", "--no-progress", "--url"),
        *("--help", "-x", "--", "--json=1"),
        *("--history", "--history=maybe", "--access-log", "--loop", "--http", "--allow-host"),
        *("--shutdown-timeout", "--rule"),
    ]
)
WORDS = st.one_of(
    PAIRS,
    FLAGS,
    NUMBERS,
    TEXT,
    st.sampled_from(["sms", "vendor", "rcpt-1m", "content-59s", "day", "none", "15/minute"]),
    st.sampled_from(["1 per 100000000000000000000 days", "*", "fg", "fg*", "memory://"]),
)
COMMANDS = [
    ["inspect", "{config}"],
    ["reset", "{config}"],
    ["limit", "show", "{config}"],
    ["limit", "set", "{config}"],
    ["limit", "clear", "{config}"],
    ["check", "{config}"],
    ["ping", "{config}"],
    ["flush", "{config}"],
    ["serve", "{config}"],
    ["replay", "{config}", "{log}"],
    ["demo"],
    [],
]


@pytest.fixture
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The commands run in a folder of the test's own: a drawn word can be a file they write
    (replay's --decisions), which landed in the checkout."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> None:
    from freqguard.service import server

    monkeypatch.setattr(server, "run", lambda *args, **options: True)
    monkeypatch.delenv(ENV, raising=False)


@pytest.fixture
def configs(tmp_path: Path, redis_server: RedisServer) -> dict[str, Path]:
    made = {}
    for name, url in [
        ("redis", f"redis://127.0.0.1:{redis_server.port}/0"),
        ("memory", "memory://"),
        ("down", f"redis://127.0.0.1:{free_port()}/0?socket_connect_timeout=0.2"),
    ]:
        made[name] = tmp_path / f"{name}.toml"
        made[name].write_text(CONFIG.format(url=url))
    log = tmp_path / "log.jsonl"
    context = {"recipient": "a", "content": "b", "tz": "UTC"}
    log.write_text(json.dumps({"time": 1781200000, "policy": "sms", "context": context}) + "\n")
    made["log"] = log
    return made


PLAUSIBLE_WORDS = {
    "inspect": ["sms", "recipient=+1", "content=hi", "tz=UTC"],
    "reset": ["sms", "recipient=+1", "content=hi", "tz=UTC"],
    "limit show": ["sms", "recipient=+1"],
    "limit set": ["sms", "rcpt-1m", "10/minute", "recipient=+1", "--ttl", "60"],
    "limit clear": ["sms", "rcpt-1m", "recipient=+1"],
    "flush": ["--yes", "--prefix", "fg"],
    "serve": ["--workers", "2", "--port", "8081"],
}


@SETTINGS
@given(
    command=st.sampled_from(COMMANDS),
    store=st.sampled_from(["redis", "memory", "down"]),
    plausible=st.booleans(),
    words=st.lists(WORDS, max_size=7),
    at=st.integers(min_value=0, max_value=7),
)
def test_random_words_exit_0_or_2_and_a_refusal_writes_nothing(
    served: None,
    in_tmp: None,
    configs: dict[str, Path],
    redis_server: RedisServer,
    command: list[str],
    store: str,
    plausible: bool,
    words: list[str],
    at: int,
) -> None:
    head = [w.format(config=configs[store], log=configs["log"]) for w in command]
    if command and command[0] == "demo":  # no --url to a store: in memory only
        words = [w for w in words if w != "--url"]
    if plausible:  # a command that may well run, with a word or two of noise
        key = " ".join(w for w in command[:2] if not w.startswith("{"))
        base = PLAUSIBLE_WORDS.get(key, [])
        argv = head + base[:at] + words[:2] + base[at:]
    else:
        argv = head[:1] + words[:at] + head[1:] + words[at:]
    flush([redis_server])
    redis_server.client.set("app:session:1", "kept")
    with load(configs["redis"]).guard() as guard:  # a record to read, reset, flush
        guard.hit("sms", recipient="+1", content="hi", tz="UTC")
    before = _state(redis_server)
    done = run(*argv)
    event(f"{' '.join(command[:2])}: exit {done.code}")
    allowed = {0, 2} | ({1} if store == "down" else set())
    assert done.code in allowed, (argv, done.err)
    assert "Traceback" not in done.err
    if done.code != 0:
        assert _state(redis_server) == before, argv
    assert redis_server.client.get("app:session:1") == b"kept"  # never another's key


def test_words_that_are_not_utf8_print_escaped(tmp_path: Path) -> None:
    """Python reads such words with surrogate escapes, which a strict stream cannot write."""
    import subprocess
    import sys

    script = Path(sys.executable).parent / "freqguard"
    config = tmp_path / "memory.toml"
    config.write_text(CONFIG.format(url="memory://"))
    for argv in (
        [b"inspect", bytes(config), b"sms\xff", b"recipient=\xfe"],
        [b"check", bytes(tmp_path / "caf\xe9.toml")],
        [b"replay", bytes(config), b"\xff.jsonl"],
    ):
        done = subprocess.run([bytes(script), *argv], capture_output=True, timeout=60, check=False)
        assert done.returncode == 2, done.stderr
        assert b"Traceback" not in done.stderr
