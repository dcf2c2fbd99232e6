"""What the operator's commands refuse, each with exit code 2 and the reason, writing
nothing: a store that keeps nothing between processes (memory://), a context word the
policy does not take (those that are the guard's own parameters among them), a flush
prefix that is not freqguard's; and what they never print: a store's password."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from redis.cluster import RedisCluster

from freqguard.config import ENV, load
from tests.conftest import flush
from tests.project.cli_run import run
from tests.servers import RedisServer

SCRIPT = Path(sys.executable).parent / "freqguard"
EXAMPLE = Path(__file__).resolve().parent.parent.parent / "examples" / "freqguard.toml"

CONFIG = """\
backend = "{url}"

[[policy]]
name = "sms"
rules = [
  {{ rate = "3/minute", by = "recipient", name = "rcpt-1m" }},
  {{ rate = "2 per 59 seconds", by = ["recipient", "content"], name = "content-59s" }},
]
"""


@pytest.fixture
def cli() -> Any:
    return run


@pytest.fixture(autouse=True)
def _no_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


@pytest.fixture
def memory_config(tmp_path: Path) -> Path:
    path = tmp_path / "memory.toml"
    path.write_text(CONFIG.format(url="memory://"))
    return path


@pytest.fixture
def redis_config(tmp_path: Path, redis_server: RedisServer) -> Path:
    flush([redis_server])
    path = tmp_path / "redis.toml"
    path.write_text(CONFIG.format(url=f"redis://127.0.0.1:{redis_server.port}/0"))
    return path


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


# -- flush: freqguard's keys, and only those ---------------------------------------------

FOREIGN = [
    "app:session:1",
    "user:42",
    "fg",
    "fg:session",
    "fg:{x}",
    "fg:{x}:sms:extra",
    "fg:{x}:",
    "fg:{x}:bad name",
    "fg:{}:sms",
    "fgx:{a}:sms",
    "xfg:{a}:sms",
    "fg:{#x}:sms",
    "fg:{=zz}:sms",
    "fg:{a}{b}:sms",
    "other:{fg}:sms",
    "fg:{*sms}:sms:other",
    "fg:{*sms}:other:bins",
    "fg:{x}:sms:bins",
]
OURS = ["fg:{r1}:sms", "fg:{#12}:sms", "fg:{*sms}:sms", "fg:{=" + "ab" * 8 + "}:sms"]


@pytest.mark.parametrize("prefix", ["*", "fg*", "f?", "[f]g", "fg:", "", "a b", "fg\\", "x" * 65])
def test_flush_refuses_a_prefix_freqguard_would_not_take(
    cli: Any, redis_config: Path, redis_server: RedisServer, prefix: str
) -> None:
    redis_server.client.set("app:session:1", "kept")
    done = cli("flush", str(redis_config), "--prefix", prefix, "--yes")
    assert done.code == 2
    assert "key prefix must be" in done.err
    assert redis_server.client.get("app:session:1") == b"kept"


def _keys(found: Any) -> list[str]:
    return sorted(k.decode() if isinstance(k, bytes) else k for k in found)


def _seed(client: Any) -> None:
    for key in FOREIGN + OURS:
        client.set(key, "v")


def test_flush_deletes_freqguards_layout_only_on_a_server(
    cli: Any, redis_config: Path, redis_server: RedisServer
) -> None:
    client: Redis = redis_server.client
    _seed(client)
    guard = load(redis_config).guard()
    guard.hit("sms", recipient="r2", content="hi")  # a real record, and its policy's claim
    guard.close()
    assert client.get("fg:{*sms}:sms:bins") == b"0"  # of its bins setting
    dry = json.loads(cli("flush", str(redis_config), "--json").out)
    assert dry == {"prefix": "fg", "keys": len(OURS) + 2, "deleted": False}
    done = json.loads(cli("flush", str(redis_config), "--yes", "--json").out)
    assert done["keys"] == len(OURS) + 2
    left = _keys(client.keys("*"))
    assert left == sorted(FOREIGN)


def test_flush_deletes_freqguards_layout_only_on_a_cluster(
    cli: Any, tmp_path: Path, redis_cluster: list[RedisServer]
) -> None:
    flush(redis_cluster)
    path = tmp_path / "cluster.toml"
    path.write_text(CONFIG.format(url=f"redis+cluster://127.0.0.1:{redis_cluster[0].port}"))
    client = RedisCluster(host="127.0.0.1", port=redis_cluster[0].port)
    try:
        _seed(client)
        done = json.loads(cli("flush", str(path), "--yes", "--json").out)
        assert done["keys"] == len(OURS)
        left = _keys(client.keys("*", target_nodes=RedisCluster.ALL_NODES))
        assert left == sorted(FOREIGN)
    finally:
        client.close()


def test_flush_under_another_prefix_keeps_the_first(
    cli: Any, redis_config: Path, redis_server: RedisServer
) -> None:
    client: Redis = redis_server.client
    _seed(client)
    client.set("app.v2:{r1}:sms", "v")
    done = json.loads(cli("flush", str(redis_config), "--prefix", "app.v2", "--yes", "--json").out)
    assert done == {"prefix": "app.v2", "keys": 1, "deleted": True}
    assert _keys(client.keys("*")) == sorted(FOREIGN + OURS)


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
    assert {ran.code for ran in runs[2 : 2 + len(OPERATIONS)]} == {1}  # a wrong password
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


def test_a_refusal_names_where_the_memory_url_came_from(
    cli: Any, memory_config: Path, redis_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "(the URL given)" in cli("flush", "memory://", "--yes").err
    assert "(the configuration's backend)" in cli("flush", str(memory_config), "--yes").err
    monkeypatch.setenv(ENV, "memory://")
    done = cli("limit", "show", str(redis_config), "sms", "recipient=a")
    assert f"({ENV})" in done.err
    assert "freqguard limit show on memory://" in done.err


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
