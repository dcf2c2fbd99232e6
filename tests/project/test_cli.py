"""The operator's command line against a real redis-server: each command's table and JSON,
and its exit codes, run in this process as the console script runs it; and the installed
console script itself (its version, a pipe closed early) in a process of its own."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from redis.cluster import RedisCluster

from freqguard.config import load
from tests.conftest import flush
from tests.project.cli_run import run
from tests.servers import RedisServer, free_port

SCRIPT = Path(sys.executable).parent / "freqguard"

CONFIG = """\
backend = "redis://127.0.0.1:{port}"

[[policy]]
name = "sms"
rules = [
  {{ rate = "3/minute", by = "recipient", name = "rcpt-1m" }},
  {{ rate = "2 per 59 seconds", by = ["recipient", "content"], name = "content-59s" }},
]
"""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """The command run in this process (``cli_run``: its output captured, a traceback fails
    the test), as the console script would run it: spares each test a new interpreter."""
    done = run(*args)
    return subprocess.CompletedProcess(["freqguard", *args], done.code, done.out, done.err)


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed console script itself, in a process of its own."""
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def config(tmp_path: Path, redis_server: RedisServer) -> Path:
    flush([redis_server])
    path = tmp_path / "freqguard.toml"
    path.write_text(CONFIG.format(port=redis_server.port))
    return path


def test_version_is_the_installed_packages() -> None:
    done = _script("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("freqguard ")


def test_check_lists_each_rules_guarantee(config: Path) -> None:
    table = _run("check", str(config))
    assert table.returncode == 0, table.stderr
    assert "at most 3 in any minute" in table.stdout
    data = json.loads(_run("check", str(config), "--json").stdout)
    assert [r["rule"] for r in data["rules"]] == ["rcpt-1m", "content-59s"]


def test_check_says_a_concurrency_rule_caps_calls_in_flight() -> None:
    from freqguard import Rule
    from freqguard.cli import guarantee

    assert guarantee(Rule("1 concurrent", lease=60)) == (
        "at most 1 call in flight, each lease freed after 1 minute at the latest"
    )
    assert guarantee(Rule("10 concurrent", by="user", lease=0.5)) == (
        "at most 10 calls in flight, each lease freed after 0.5 seconds at the latest"
    )


def test_check_says_a_rolling_window_never_admits_more_and_what_it_gives_up() -> None:
    from freqguard import Rule
    from freqguard.cli import guarantee

    assert guarantee(Rule("10000000 per 120 seconds", by="t", strategy="rolling-window")) == (
        "at most 10000000 in any 2 minutes (a unit counts up to 2 seconds longer than "
        "exactly: 60 sub-windows)"
    )
    assert guarantee(Rule("60/minute", strategy="rolling-window", shadow=True)) == (
        "at most 60 in any minute (a unit counts up to 1 second longer than exactly: 60 "
        "sub-windows); shadow: never blocks"
    )
    assert "up to 0.016667 seconds longer" in guarantee(Rule("5/second", strategy="rolling-window"))


def test_inspect_shows_what_the_store_holds_and_reset_forgets_it(config: Path) -> None:
    guard = load(config).guard()
    for _ in range(2):
        assert guard.hit("sms", recipient="+1555", content="hi").allowed
    guard.close()
    ctx = ("recipient=+1555", "content=hi")
    data = json.loads(_run("inspect", str(config), "sms", *ctx, "--json").stdout)
    assert data["allowed"] is False  # the content rule is used up
    used = {r["rule"]: r["used"] for r in data["rules"]}
    assert used == {"rcpt-1m": 2, "content-59s": 2}
    table = _run("inspect", str(config), "sms", *ctx)
    assert "content-59s" in table.stdout
    assert "next hit" in table.stdout
    assert _run("reset", str(config), "sms", *ctx).returncode == 0  # the content's rule
    data = json.loads(_run("inspect", str(config), "sms", *ctx, "--json").stdout)
    assert [r["used"] for r in data["rules"]] == [2, 0]
    done = _run("reset", str(config), "sms", ctx[0], "--json")  # the recipient's
    assert json.loads(done.stdout) == {"policy": "sms", "reset": True, "rules": ["rcpt-1m"]}
    data = json.loads(_run("inspect", str(config), "sms", *ctx, "--json").stdout)
    assert [r["used"] for r in data["rules"]] == [0, 0]
    for _ in range(2):
        guard = load(config).guard()
        guard.hit("sms", recipient="+1555", content="hi")
        guard.close()
    done = _run("reset", str(config), "sms", *ctx, "--rule", "content-59s", "--rule", "rcpt-1m")
    assert done.returncode == 2  # rcpt-1m is keyed by the recipient alone
    assert "keyed by (recipient)" in done.stderr
    assert _run("reset", str(config), "sms", ctx[0], "--rule", "rcpt-1m").returncode == 0
    data = json.loads(_run("inspect", str(config), "sms", *ctx, "--json").stdout)
    assert [r["used"] for r in data["rules"]] == [0, 2]


def test_an_option_between_the_policy_and_its_context(config: Path) -> None:
    """``inspect CONFIG sms --json recipient=... content=...`` (an option between the policy
    and its k=v words, as docs/cli.md's usage allows) was "unrecognized arguments:
    recipient=..." (argparse ends a list of words at the first option); the words after
    it are the context still (a new user's first hour)."""
    ctx = ("recipient=+1555", "content=hi")
    done = _run("inspect", str(config), "sms", "--json", *ctx)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["allowed"] is True
    done = _run("reset", str(config), "sms", "--rule", "rcpt-1m", ctx[0])
    assert done.returncode == 0, done.stderr
    refused = _run("inspect", str(config), "sms", "--json", *ctx, "--bogus")
    assert refused.returncode == 2
    assert "unrecognized arguments: --bogus" in refused.stderr


def test_inspect_without_a_rule_s_dimension_shows_the_rules_the_context_names(
    config: Path,
) -> None:
    """An operator asks why a recipient is refused, not knowing the message's content:
    inspect with the recipient alone shows the recipient's rules and marks the content's
    as needing it (it refused the whole command: missing dimension content); whether a
    hit would pass is not said (the content's rules decide too). A context naming none of
    a rule's dimensions is still refused, naming them, and nothing is written."""
    guard = load(config).guard()
    for _ in range(2):
        assert guard.hit("sms", recipient="+1555", content="hi").allowed
    guard.close()
    done = _run("inspect", str(config), "sms", "recipient=+1555", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["allowed"], data["needs"]) == (None, ["content"])
    rows = {r["rule"]: r for r in data["rules"]}
    assert (rows["rcpt-1m"]["used"], rows["rcpt-1m"]["needs"]) == (2, [])
    assert (rows["content-59s"]["used"], rows["content-59s"]["needs"]) == (None, ["content"])
    table = _run("inspect", str(config), "sms", "recipient=+1555").stdout
    assert "content-59s (needs content)" in table
    refused = _run("inspect", str(config), "sms", "content=hi")
    assert refused.returncode == 2
    assert "recipient" in refused.stderr
    whole = json.loads(_run("inspect", str(config), "sms", "recipient=+1555", "content=hi",
                            "--json").stdout)  # fmt: skip
    assert (whole["allowed"], whole["needs"]) == (False, [])
    guard = load(config).guard()
    assert guard.peek("sms", recipient="+1555", content="hi").rules[0].remaining == 1
    guard.close()


def test_inspect_takes_the_values_a_policy_reads(tmp_path: Path, redis_server: RedisServer) -> None:
    """A context with a value the policy's rules read (a tier's plan, a priority): inspect
    asked for the per-key limits with the whole context, which they refused, so it failed
    with exit 2 where it had printed the table (review). A rule that ``only`` skips for
    the priority still shows as shadow."""
    flush([redis_server])
    path = tmp_path / "tiers.toml"
    path.write_text(
        f'backend = "redis://127.0.0.1:{redis_server.port}"\n'
        '[[policy]]\nname = "api"\npriorities = ["tx", "bulk"]\nrules = [\n'
        '  { rate = "5/minute", by = "user", name = "base", '
        'tiers = { from = "plan", rates = { pro = "50/minute" } } },\n'
        '  { rate = "2/minute", by = "user", name = "bulk-only", only = ["bulk"] },\n]\n'
    )
    done = _run("inspect", str(path), "api", "user=a", "plan=pro", "priority=tx", "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["rule"]: r for r in json.loads(done.stdout)["rules"]}
    assert (rows["base"]["capacity"], rows["base"]["exempt"]) == (50, False)
    assert (rows["bulk-only"]["shadow"], rows["bulk-only"]["exempt"]) == (True, False)


def test_limits_are_set_shown_and_cleared(config: Path) -> None:
    done = _run("limit", "set", str(config), "sms", "rcpt-1m", "10/minute", "recipient=+1555")
    assert done.returncode == 0, done.stderr
    assert _run("limit", "set", str(config), "sms", "content-59s", "none", "recipient=+1555")
    shown = json.loads(
        _run("limit", "show", str(config), "sms", "recipient=+1555", "--json").stdout
    )
    assert shown["limits"] == {"rcpt-1m": "10/minute", "content-59s": None}
    guard = load(config).guard()  # the library sees what the command set
    assert guard.limits_for("sms", recipient="+1555")["rcpt-1m"].limit == 10  # type: ignore[union-attr]
    guard.close()
    assert _run("limit", "clear", str(config), "sms", "rcpt-1m", "recipient=+1555").returncode == 0
    shown = json.loads(
        _run("limit", "show", str(config), "sms", "recipient=+1555", "--json").stdout
    )
    assert shown["limits"]["rcpt-1m"] == "3/minute"
    # what show prints for one ("exempt") set takes as "none" does (an operator's first hour)
    done = _run("limit", "set", str(config), "sms", "rcpt-1m", "exempt", "recipient=+1555")
    assert done.returncode == 0, done.stderr
    shown = json.loads(
        _run("limit", "show", str(config), "sms", "recipient=+1555", "--json").stdout
    )
    assert shown["limits"]["rcpt-1m"] is None
    # inspect says exempt too, where it said "(shadow)" (a new user's run)
    ctx = ("recipient=+1555", "content=hi")
    table = _run("inspect", str(config), "sms", *ctx).stdout
    assert "rcpt-1m (exempt)" in table
    assert "shadow" not in table
    rows = json.loads(_run("inspect", str(config), "sms", *ctx, "--json").stdout)["rules"]
    assert [(r["rule"], r["exempt"], r["shadow"]) for r in rows] == [
        ("rcpt-1m", True, False),
        ("content-59s", True, False),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("inspect", "{config}", "sms", "content=a"), "missing dimension(s) recipient"),
        (("inspect", "{config}", "nope", "recipient=a"), "nope"),
        (("inspect", "{config}", "sms", "recipient"), "name=value"),
        (("check", "{missing}"), "missing.toml"),
        (("limit", "set", "{config}", "sms", "rcpt-1m", "often", "recipient=a"), "often"),
    ],
)
def test_mistakes_exit_2_with_the_reason(
    config: Path, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    words = [a.format(config=config, missing=tmp_path / "missing.toml") for a in args]
    done = _run(*words)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unreachable_store_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "down.toml"
    path.write_text(CONFIG.format(port=free_port()))
    done = _run("inspect", str(path), "sms", "recipient=a", "content=b")
    assert done.returncode == 1
    assert "the store failed" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_pipe_closed_early_ends_quietly() -> None:
    done = subprocess.run(
        f"'{SCRIPT}' demo | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert done.stdout.startswith("freqguard demo")
    assert done.stderr == ""


def test_ping_reaches_the_store_and_names_it(
    config: Path, redis_cluster: list[RedisServer]
) -> None:
    data = json.loads(_run("ping", str(config), "--json").stdout)
    assert data["topology"] == "standalone"
    assert data["redis_version"].startswith("7.")
    assert data["round_trip_ms"] > 0
    url = f"redis+cluster://127.0.0.1:{redis_cluster[0].port}"
    data = json.loads(_run("ping", url, "--json").stdout)
    assert data["topology"] == "cluster"
    assert len(data["primaries"]) == 3
    assert _run("ping", f"redis://127.0.0.1:{free_port()}").returncode == 1


def test_flush_deletes_the_prefixes_keys_only_and_only_with_yes(
    tmp_path: Path, redis_cluster: list[RedisServer]
) -> None:
    flush(redis_cluster)
    path = tmp_path / "cluster.toml"
    url = f"redis+cluster://127.0.0.1:{redis_cluster[0].port}"
    path.write_text(CONFIG.format(port=0).replace("redis://127.0.0.1:0", url))
    guard = load(path).guard()
    for n in range(40):  # records on every primary: one key per recipient, slots apart
        guard.hit("sms", recipient=f"r{n}", content="hi")
    guard.close()
    foreign = RedisCluster(host="127.0.0.1", port=redis_cluster[0].port)
    foreign.set("other:{x}", "kept")  # not freqguard's
    dry = json.loads(_run("flush", str(path), "--json").stdout)
    assert dry == {"prefix": "fg", "keys": 41, "deleted": False}  # and the bins claim
    done = json.loads(_run("flush", str(path), "--yes", "--json").stdout)
    assert done["keys"] == 41
    assert done["deleted"] is True
    assert json.loads(_run("flush", str(path), "--json").stdout)["keys"] == 0
    assert foreign.get("other:{x}") == b"kept"
    foreign.close()


def test_the_demo_runs_on_a_store_too(redis_server: RedisServer) -> None:
    on_redis = _run("demo", "--url", f"redis://127.0.0.1:{redis_server.port}")
    in_memory = _run("demo")
    assert on_redis.returncode == 0, on_redis.stderr
    # the same decisions, on the store's records; the header says where
    mine, theirs = on_redis.stdout.splitlines(), in_memory.stdout.splitlines()
    assert [n for n, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b] == [1]
    assert re.search(r"on redis://, prefix fgdemo-[0-9a-f]{8}$", mine[1])
    assert "23 sent, 3 blocked" in on_redis.stdout
    # a demo leaves nothing behind (found by a new user's first hour: keys for a day)
    assert not redis_server.client.keys("fgdemo-*")
