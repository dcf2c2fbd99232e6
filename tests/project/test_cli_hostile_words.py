"""Hostile words in every place of every command (what the property tests' short drawn words
miss): an option value or argument of 5,000 digits, of 1 MB, holding bytes that are not
UTF-8 or a newline. Each is refused with exit 2 and a short message, the value shown cut
(``errors.shown``), on one line, never a traceback; no word makes the command slow (a
message's URL masking was quadratic in a word's length: a 1 MB word, hours)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from freqguard.cli.output import masked
from tests.project.cli_refusal_rig import _no_url as _no_url
from tests.project.cli_refusal_rig import memory_config as memory_config
from tests.project.cli_refusal_rig import redis_config as redis_config
from tests.project.cli_run import run

#: name: the word
WORDS = {
    "5,000 digits": "9" * 5000,
    "-5,000 digits": "-" + "9" * 5000,
    "1 MB": "x" * 1_000_000,
    "1 MB of digits": "9" * 1_000_000,
    "not UTF-8": os.fsdecode(b"ab\xff\xfe"),
    "a newline": "a\nb",
}
#: Where the word goes ({} is it; R the configuration on Redis, M on memory).
PLACES = [
    ["inspect", "R", "{}", "recipient=+1"],
    ["inspect", "R", "sms", "{}"],
    ["inspect", "{}", "sms"],
    ["inspect", "{}.toml", "sms"],
    ["limit", "show", "R", "{}"],
    ["limit", "set", "R", "{}", "rcpt-1m", "10/minute", "recipient=+1"],
    ["limit", "set", "R", "sms", "rcpt-1m", "10/minute", "recipient=+1", "--ttl", "{}"],
    ["limit", "set", "R", "sms", "rcpt-1m", "10/minute", "recipient=+1", "--ttl={}"],
    ["limit", "clear", "R", "{}", "rcpt-1m", "recipient=+1"],
    ["check", "{}"],
    ["check", "{}.yaml"],
    ["ping", "{}"],
    ["replay", "M", "{}"],
    ["replay", "M", "{}.jsonl"],
    ["replay", "M", "M", "--what-if", "{}"],
    ["serve", "M", "--port", "{}"],
    ["serve", "M", "--workers", "{}"],
    ["serve", "M", "--shutdown-timeout", "{}"],
    ["serve", "M", "--token-file", "{}"],
    ["serve", "M", "--host", "{}"],
    ["serve", "M", "--allow-host", "{}"],
    ["serve", "M", "--log-level", "{}"],
    ["serve", "M", "--access-log", "{}"],
    ["serve", "M", "--history", "{}"],
    ["serve", "M", "--loop", "{}"],
    ["serve", "M", "--http", "{}"],
    ["{}"],
    ["limit", "{}"],
]


@pytest.fixture(autouse=True)
def _not_served(monkeypatch: pytest.MonkeyPatch) -> None:
    """A serve that would start runs nothing: the test is of its refusals."""
    from freqguard.service import server

    monkeypatch.setattr(server, "run", lambda *args, **options: True)


def _refused_short(argv: list[str], err: str, code: int) -> None:
    assert code == 2, (argv[:3], err[-300:])
    assert "Traceback" not in err, err[-2000:]
    lines = err.splitlines()
    assert lines
    assert lines[-1].startswith("freqguard"), lines[-1:]
    assert len(lines[-1]) < 400, lines[-1][:400]
    assert len(err) < 2000, err[-400:]


@pytest.mark.parametrize("place", [" ".join(p) for p in PLACES])
@pytest.mark.parametrize("word", list(WORDS))
def test_a_hostile_word_is_refused_in_one_short_line(
    tmp_path: Path,
    memory_config: Path,
    redis_config: Path,
    place: str,
    word: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if word == "not UTF-8" and place.startswith("replay M M"):
        return  # a path of such a name is a file that is not there: refused, shown escaped
    given = {"R": str(redis_config), "M": str(memory_config)}
    argv = [given.get(w, w.replace("{}", WORDS[word])) for w in place.split(" ")]
    monkeypatch.chdir(tmp_path)  # put back after: the suite's other tests read the clone
    started = time.perf_counter()
    done = run(*argv)
    assert time.perf_counter() - started < 5.0
    _refused_short(argv, done.err, done.code)


def test_masking_a_long_word_is_linear() -> None:
    """``masked`` found URLs with ``[A-Za-z][A-Za-z0-9+.\\-]*://``, from every position of
    a word without one: 1 MB of letters, 10^12 steps (30,000: seconds; linear: 1 ms)."""
    started = time.perf_counter()  # a hang detector, not a speed test: linear is ~30 ms
    assert masked("x" * 1_000_000) == "x" * 1_000_000
    assert time.perf_counter() - started < 10.0
    assert masked("at redis://u:secret@h:1/0 and") == "at redis://u:***@h:1/0 and"


def test_a_long_word_not_utf8_in_argv_exits_2_without_a_traceback(memory_config: Path) -> None:
    """As the shell gives them (os.fsencode): 100 KB (an argument is at most 128 KiB)."""
    script = Path(sys.executable).parent / "freqguard"
    long = b"\xff" * 100_000
    for argv in (
        [b"serve", bytes(memory_config), b"--port", b"9" * 100_000],
        [b"serve", bytes(memory_config), b"--log-level", long],
        [b"check", long + b".toml"],
        [b"replay", bytes(memory_config), long + b".jsonl"],
    ):
        done = subprocess.run([bytes(script), *argv], capture_output=True, timeout=60, check=False)
        assert done.returncode == 2, done.stderr[-300:]
        assert b"Traceback" not in done.stderr, done.stderr[-2000:]
        assert len(done.stderr) < 2000, done.stderr[-300:]
