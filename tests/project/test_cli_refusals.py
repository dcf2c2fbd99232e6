"""What the operator's commands refuse, each with exit code 2 and the reason, writing
nothing: a store that keeps nothing between processes (memory://), a context word the
policy does not take (those that are the guard's own parameters among them), an option or
a configuration they cannot use; and what they never print: a store's password. What
``serve`` refuses is in ``test_cli_serve_refusals.py``, a flush prefix that is not
freqguard's in ``test_cli_flush.py``; the rig they share is ``cli_refusal_rig.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from freqguard.config import ENV
from tests.conftest import flush
from tests.project.cli_refusal_rig import CONFIG
from tests.project.cli_refusal_rig import _no_url as _no_url
from tests.project.cli_refusal_rig import cli as cli
from tests.project.cli_refusal_rig import memory_config as memory_config
from tests.project.cli_refusal_rig import redis_config as redis_config
from tests.servers import RedisServer

SCRIPT = Path(sys.executable).parent / "freqguard"
EXAMPLE = Path(__file__).resolve().parent.parent.parent / "examples" / "freqguard.toml"


OPERATIONS = [
    ("inspect", "{config}", "sms", "recipient=a", "content=b"),
    ("reset", "{config}", "sms", "recipient=a", "content=b"),
    ("limit", "show", "{config}", "sms", "recipient=a"),
    ("limit", "set", "{config}", "sms", "rcpt-1m", "none", "recipient=a"),
    ("limit", "clear", "{config}", "sms", "rcpt-1m", "recipient=a"),
    ("flush", "{config}", "--yes"),
]


@pytest.mark.parametrize("words", OPERATIONS, ids=[" ".join(w[:2]) for w in OPERATIONS])
def test_a_command_on_a_memory_store_refuses_and_says_what_to_use(
    cli: Any, memory_config: Path, words: tuple[str, ...]
) -> None:
    done = cli(*(w.format(config=memory_config) for w in words))
    assert done.code == 2, done.err
    assert done.out == ""
    assert "memory://" in done.err
    assert "keeps nothing between processes" in done.err
    assert "redis://" in done.err
    assert ENV in done.err


def test_the_readmes_commands_act_on_the_store_freqguard_url_names(
    cli: Any, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> None:
    """The README's example file is on memory://: with FREQGUARD_URL the commands act."""
    flush([redis_server])
    example = str(EXAMPLE)
    who = "recipient=+4917612345678"
    refused = cli("limit", "set", example, "sms", "rcpt-1d", "none", who)
    assert refused.code == 2
    monkeypatch.setenv(ENV, f"redis://127.0.0.1:{redis_server.port}/0")
    assert cli("limit", "set", example, "sms", "rcpt-1d", "none", who).code == 0
    shown = json.loads(cli("limit", "show", example, "sms", who, "--json").out)
    assert shown["limits"]["rcpt-1d"] is None  # exempt, as set by the other "process"
    assert cli("limit", "clear", example, "sms", "rcpt-1d", who).code == 0
    shown = json.loads(cli("limit", "show", example, "sms", who, "--json").out)
    assert shown["limits"]["rcpt-1d"] == "50/day"


def test_check_replay_and_ping_still_run_on_memory(
    cli: Any, memory_config: Path, tmp_path: Path
) -> None:
    assert cli("check", str(memory_config)).code == 0
    assert json.loads(cli("ping", str(memory_config), "--json").out)["topology"] == "in process"
    log = tmp_path / "log.jsonl"
    log.write_text('{"time": 1, "policy": "sms", "context": {"recipient": "a", "content": "b"}}\n')
    assert cli("replay", str(memory_config), str(log)).code == 0


def test_a_refusal_names_where_the_memory_url_came_from(
    cli: Any, memory_config: Path, redis_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "(the URL given)" in cli("flush", "memory://", "--yes").err
    assert "(the configuration's backend)" in cli("flush", str(memory_config), "--yes").err
    monkeypatch.setenv(ENV, "memory://")
    done = cli("limit", "show", str(redis_config), "sms", "recipient=a")
    assert f"({ENV})" in done.err
    assert "freqguard limit show on memory://" in done.err


RESERVED = ["policy", "self", "rate", "ttl", "rule", "cost", "contexts", "timeout", "priority"]


@pytest.mark.parametrize("name", RESERVED)
def test_a_context_word_the_policy_does_not_take_is_named(
    cli: Any, redis_config: Path, redis_server: RedisServer, name: str
) -> None:
    before = redis_server.client.dbsize()
    for words in OPERATIONS[:5]:
        argv = [w.format(config=redis_config) for w in words] + [f"{name}=x"]
        done = cli(*argv)
        assert done.code == 2, (argv, done.err)
        assert f"takes no context value {name!r}" in done.err, done.err
        assert "it takes: recipient, content" in done.err
    assert redis_server.client.dbsize() == before


@pytest.mark.parametrize("ttl", ["-5", "0", "nan", "inf", "abc"])
def test_a_limits_ttl_that_is_not_seconds_is_refused_in_the_commands_words(
    cli: Any, redis_config: Path, redis_server: RedisServer, ttl: str
) -> None:
    """Found by a new user's first hour: --ttl -5 was refused in the library's words
    ("ttl must be None (for ever) ..."), which a command line has no way to give."""
    before = redis_server.client.dbsize()
    done = cli(
        "limit", "set", str(redis_config), "sms", "rcpt-1m", "5/minute", "recipient=a", "--ttl", ttl
    )
    assert done.code == 2
    assert (
        "--ttl: must be seconds > 0 (leave --ttl out for a limit that holds for ever)" in done.err
    )
    assert "None" not in done.err
    assert redis_server.client.dbsize() == before


def test_an_unknown_policy_names_the_policies_there_are(cli: Any, redis_config: Path) -> None:
    done = cli("inspect", str(redis_config), "mms", "recipient=a")
    assert done.code == 2
    assert "unknown policy 'mms'" in done.err
    assert "sms" in done.err


def test_the_commands_of_the_review_exit_2_without_a_traceback(redis_config: Path) -> None:
    """Run as the console script: what an operator sees."""
    for argv in (
        ["inspect", str(redis_config), "sms", "recipient=a", "content=b", "policy=x"],
        ["inspect", str(redis_config), "sms", "recipient=a", "content=b", "self=x"],
        ["limit", "set", str(redis_config), "sms", "rcpt-1m", "5/minute", "recipient=a", "ttl=1"],
    ):
        done = subprocess.run(
            [str(SCRIPT), *argv], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 2
        assert "Traceback" not in done.stderr
        assert done.stderr.startswith("freqguard: ")


@pytest.mark.parametrize("zone", ["America", "Etc"])
def test_a_zone_that_names_a_folder_exits_2(cli: Any, tmp_path: Path, zone: str) -> None:
    path = tmp_path / "zone.toml"
    path.write_text(
        '[[policy]]\nname = "p"\n'
        f'rules = [{{ rate = "1/day", by = "r", calendar = true, tz = "{zone}" }}]\n'
    )
    done = cli("check", str(path))
    assert done.code == 2
    assert zone in done.err


def test_an_option_without_a_command_is_named(cli: Any) -> None:
    """Found by a new user's first hour: freqguard --bogus said only that COMMAND was
    required, never naming --bogus."""
    done = cli("--bogus", "--json")
    assert done.code == 2
    assert "unrecognized arguments: --bogus --json (a COMMAND comes first)" in done.err


@pytest.mark.parametrize(
    "words",
    [
        ["check", "--bogus"],  # argparse named only the missing CONFIG
        ["check", "{config}", "--bogus"],  # it named it, under the top-level usage
        ["limit", "set", "--ttl=5", "--bogus=1", "{config}", "sms", "r", "none"],
        ["inspect", "{config}", "sms", "recipient=a", "--rule", "x"],
    ],
)
def test_an_unknown_option_of_a_command_is_named_under_that_commands_usage(
    cli: Any, memory_config: Path, words: list[str]
) -> None:
    done = cli(*[word.format(config=memory_config) for word in words])
    assert done.code == 2
    unknown = next(word for word in words[1:] if word in ("--bogus", "--bogus=1", "--rule"))
    assert f"error: unrecognized arguments: {unknown}" in done.err
    command = " ".join(words[: 2 if words[0] == "limit" else 1])
    assert f"usage: freqguard {command} " in done.err


@pytest.mark.parametrize("url", [["--url", "redis://x"], ["--url=redis://x"]])
def test_url_given_to_a_command_of_the_configurations_store_names_freqguard_url(
    cli: Any, memory_config: Path, url: list[str]
) -> None:
    """demo, ping and flush take a URL; inspect, reset and limit read the configuration's
    store: a new user's ``--url`` there is told where the store comes from."""
    done = cli("inspect", str(memory_config), "sms", "recipient=a", *url)
    assert done.code == 2
    assert "FREQGUARD_URL when it is set" in done.err


def test_known_options_abbreviated_values_like_options_and_negative_numbers_pass(
    cli: Any, memory_config: Path
) -> None:
    assert cli("check", "--js", str(memory_config)).code == 0  # argparse's abbreviation
    done = cli("limit", "set", str(memory_config), "sms", "rcpt-1m", "none", "--ttl", "-5")
    assert "--ttl" in done.err  # the value's own refusal
    assert "unrecognized" not in done.err
    done = cli("inspect", str(memory_config), "sms", "recipient=a", "--", "--x=1")
    assert "unrecognized" not in done.err


@pytest.mark.parametrize("text", ["", "# nothing yet\n", 'backend = "memory://"\n'])
def test_check_refuses_a_configuration_without_a_policy(
    cli: Any, tmp_path: Path, text: str
) -> None:
    """A configuration that declares no policy limits nothing: check says so (exit 2), as
    serve does, instead of printing an empty table (found by a new user's first hour: a
    wrong file passed)."""
    path = tmp_path / "empty.toml"
    path.write_text(text)
    for command in ("check", "serve"):
        done = cli(command, str(path))
        assert done.code == 2, done
        assert "declares no policy" in done.err
        assert "[[policy]]" in done.err


def test_a_word_that_starts_with_a_dash_and_holds_a_space_is_still_a_value(
    cli: Any, memory_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """argparse takes a word that starts with ``-`` and holds a space as a value, never an
    option (``_parse_optional``: ``' ' in arg_string``), so a file named ``-my app.toml``
    was checked; ``_Command`` named it an unknown option (review: 0.3.0 exit 0, now 2)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-my app.toml").write_text(memory_config.read_text())
    done = cli("check", "-my app.toml")
    assert "unrecognized" not in done.err
    assert done.code == 0, done.err


def test_check_warns_of_dimensions_alike_in_one_policy(cli: Any, tmp_path: Path) -> None:
    """A rule keyed by "recipent" beside ones by "recipient" passed check, and every hit of
    the served policy then failed for want of "recipent" (found by an operator's first
    hour): check says the two are alike (a warning: two such names may be meant)."""
    path = tmp_path / "typo.toml"
    path.write_text(
        'backend = "memory://"\n\n[[policy]]\nname = "sms"\nrules = [\n'
        '  { rate = "15/minute", by = "recipient" },\n'
        '  { rate = "50/day", by = "recipent" },\n]\n'
    )
    done = cli("check", str(path))
    assert done.code == 0
    assert "policy 'sms'" in done.err
    assert "'recipent' and 'recipient'" in done.err
    clean = tmp_path / "clean.toml"
    clean.write_text(
        'backend = "memory://"\n\n[[policy]]\nname = "sms"\nrules = [\n'
        '  { rate = "15/minute", by = ["user", "users_group"] },\n]\n'
    )
    assert cli("check", str(clean)).err == ""


# -- passwords ---------------------------------------------------------------------------

SECRET = "s3cr3t@hunter2"  # an @ unescaped: redis-py reads to the last one


def test_no_command_prints_the_stores_password(
    cli: Any, tmp_path: Path, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"redis://user:{SECRET}@127.0.0.1:{redis_server.port}/0"
    path = tmp_path / "secret.toml"
    path.write_text(CONFIG.format(url=url))
    unreadable = tmp_path / "slash.toml"  # a / in it: the URL cannot be read, and says so
    unreadable.write_text(CONFIG.format(url="redis://user:s3cr3t/hunter2@127.0.0.1:1/0"))
    log = tmp_path / "log.jsonl"
    log.write_text('{"time": 1, "policy": "sms", "context": {"recipient": "a", "content": "b"}}\n')
    runs = [cli("check", str(path)), cli("check", str(path), "--json")]
    runs += [cli(*(w.format(config=path) for w in words)) for words in OPERATIONS]
    runs += [cli(*(w.format(config=unreadable) for w in words)) for words in OPERATIONS]
    runs += [cli("ping", str(path)), cli("ping", url), cli("ping", url + "?socket_timeout=x")]
    runs += [cli("replay", str(path), str(log)), cli("check", str(unreadable))]
    monkeypatch.setenv(ENV, f"redis://:{SECRET}@127.0.0.1:1/0?PassWord={SECRET}&db=x")
    runs += [cli("check", str(path), "--json"), cli("inspect", str(path), "sms", "recipient=a")]
    for ran in runs:
        assert "s3cr3t" not in ran.out + ran.err, ran.out + ran.err
        assert "hunter2" not in ran.out + ran.err
        assert ran.code in (0, 1, 2)
    assert runs[-1].code == runs[-2].code == 2  # the environment's URL: db=x
    # a wrong password: the URL is wrong, a configuration error (the store says so)
    assert {ran.code for ran in runs[2 : 2 + len(OPERATIONS)]} == {2}
    shown = json.loads(runs[1].out)["backend"]
    assert shown == f"redis://user:***@127.0.0.1:{redis_server.port}/0"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("redis://u:p@ss@h:1/0", "redis://u:***@h:1/0"),
        ("at 'redis://:pw@h:1/0', got x", "at 'redis://:***@h:1/0', got x"),
        ("redis+sentinel://u:pw@h1:1,h2:2/svc", "redis+sentinel://u:***@h1:1,h2:2/svc"),
        (
            "rediss://h:1/0?ssl_password=pw&Password=pw2",
            "rediss://h:1/0?ssl_password=***&Password=***",
        ),
        ("redis://h:1/0 and redis://a:b@c:2", "redis://h:1/0 and redis://a:***@c:2"),
        ("unix:///tmp/redis.sock?db=1", "unix:///tmp/redis.sock?db=1"),
    ],
)
def test_every_url_in_a_message_is_masked(text: str, shown: str) -> None:
    from freqguard.cli.output import masked

    assert masked(text) == shown
