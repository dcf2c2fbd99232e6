"""Hostile input to every entry point of the command line, by hypothesis: random words for
every command (against a real redis-server and on memory), random configuration documents
(TOML and YAML, bytes that are not UTF-8 among them), random log lines (JSON Lines and CSV).
Each ends in exit 0 or 2 (1 only where the store is really down), never a traceback; a
refused command writes nothing to the store; every ConfigError names its file (and its
line, for a log)."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from freqguard.config import ENV, SCHEMA, load
from freqguard.errors import ConfigError
from freqguard.strategy import Strategy
from tests.conftest import examples, flush
from tests.project.cli_run import run
from tests.servers import RedisServer, free_port

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


def _state(server: RedisServer) -> dict[Any, Any]:
    client = server.client
    return {key: (client.dump(key), client.pttl(key) > 0) for key in client.keys("*")}


# -- (a) words ---------------------------------------------------------------------------

TEXT = st.text(max_size=12).filter(lambda s: s not in FOLDERS)
NUMBERS = st.sampled_from(
    ["0", "-1", "1e400", "nan", "inf", "9" * 30, "9" * 5000, "0x10", "1_000", "\u0661", "3.5"]
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


# -- (b) configuration documents ---------------------------------------------------------


def _keys(schema: Any) -> set[str]:
    found: set[str] = set()
    for option in [schema, *schema.get("anyOf", ())]:
        for key, sub in option.get("properties", {}).items():
            found |= {key} | _keys(sub)
        if isinstance(option.get("items"), dict):
            found |= _keys(option["items"])
    return found


KEYS = st.one_of(st.sampled_from(sorted(_keys(SCHEMA))), TEXT)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**63, -(2**63) - 1, 10**30]),
    st.floats(),
    TEXT,
    st.sampled_from(["15/minute", "1 per 100000000000000000000 days", "memory://", "gcra"]),
    st.sampled_from(["redis://u:p@h:1/0", "sliding-log", "Europe/Berlin", "08:00", "logging"]),
)
VALUES_TREE = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=16,
)
PLAUSIBLE = {
    "by": st.sampled_from(["recipient", ["recipient", "content"], "cost", "tz"]),
    "strategy": st.sampled_from([s.value for s in Strategy if s is not Strategy.CONCURRENCY]),
    "burst": st.integers(min_value=-2, max_value=10**10),
    "name": st.sampled_from(["a", "b", "quiet-hours", "a b"]),
    "calendar": st.booleans(),
    "tz": st.sampled_from(["UTC", "Asia/Shanghai", "Mars/Base", ""]),
    "tz_from": st.sampled_from(["tz", "cost", "recipient"]),
    "tiers": st.just({"from": "plan", "rates": {"pro": "1 per 100000000000000000000 days"}}),
}
RULE_KEYS = SCHEMA["properties"]["policy"]["items"]["properties"]["rules"]["items"]["properties"]
RULE = st.fixed_dictionaries(
    {"rate": st.one_of(LEAVES, st.just("2 per 59 seconds"))},
    optional={
        key: st.one_of(PLAUSIBLE.get(key, VALUES_TREE), VALUES_TREE)
        for key in RULE_KEYS
        if key != "rate"
    },
)
NAMES_LIST = st.lists(st.sampled_from(["transactional", "marketing", "", "a b"]), max_size=3)
POLICY = st.fixed_dictionaries(
    {"name": st.one_of(st.just("sms"), TEXT), "rules": st.lists(RULE, max_size=3)},
    optional={
        "on_error": st.one_of(st.sampled_from(["raise", "allow", "deny"]), VALUES_TREE),
        "priorities": st.one_of(NAMES_LIST, VALUES_TREE),
        "quiet": st.one_of(
            st.fixed_dictionaries(
                {"start": st.sampled_from(["21:00", "24:00", "9"]), "end": st.just("08:00")},
                optional={"tz": PLAUSIBLE["tz"], "tz_from": PLAUSIBLE["tz_from"]},
            ),
            VALUES_TREE,
        ),
    },
)
TOP = {
    "backend": st.sampled_from(["memory://", "redis://u:p@h:1/0", "redis+cluster://h:1", "x://"]),
    "prefix": st.sampled_from(["fg", "a b", "", "*"]),
    "on_error": st.sampled_from(["raise", {"fallback": "memory://", "workers": 2}]),
    "deny_cache": st.integers(min_value=-1, max_value=10**9),
    "observers": st.sampled_from([["logging"], ["logging", "logging"], ["prometheus"]]),
    "breaker": st.sampled_from([True, False, {"failures": 2, "cooldown": math.nan}]),
}
DOCUMENTS = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            **{key: st.one_of(TOP[key], VALUES_TREE) for key in TOP},
            "policy": st.lists(POLICY, max_size=3),
        },
    ),
    st.dictionaries(KEYS, VALUES_TREE, max_size=5),
)


def _toml(value: Any) -> str:
    """A TOML value (tables inline; no writer in the standard library)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if value.bit_length() < 1000 else hex(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value).replace("inf", "inf")
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_string(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    return '""'  # TOML has no null


def _string(text: str) -> str:
    """A TOML basic string: control characters and DEL escaped, the rest as it is."""
    escaped = (
        f"\\u{ord(c):04x}" if ord(c) < 0x20 or ord(c) == 0x7F else "\\" + c if c in '"\\' else c
        for c in text
    )
    return '"' + "".join(escaped) + '"'


def _text(document: dict[Any, Any], kind: str) -> str:
    if kind == "toml":
        return "".join(f"{_string(str(k))} = {_toml(v)}\n" for k, v in document.items())
    return yaml.safe_dump(document, allow_unicode=True)


@SETTINGS
@given(
    document=DOCUMENTS,
    kind=st.sampled_from(["toml", "yaml"]),
    tail=st.one_of(
        st.just(b""),
        st.sampled_from([b"prefix = 'a'\nprefix = 'b'\n", b"prefix: a\nprefix: b\n"]),
        st.sampled_from(
            [
                b"\xff\xfe",
                b"caf\xe9",
                b"\x00",
                b"[" * 100_000,  # deep documents, in every style: refused at the bound
                b"deep: " + b"[" * 100_000,
                b"deep: " + b"{a: " * 100_000,
                b"- " * 100_000 + b"x",
                b"a = " + b"[" * 100_000 + b"]" * 100_000,
                b"a = " + b"{a = " * 100_000 + b"1" + b"}" * 100_000,
            ]
        ),
        st.sampled_from(
            [b"\nx = 0x" + b"f" * 5000, b"\nx: " + b"9" * 5000, b"\nx = " + b"9" * 5000]
        ),
        st.binary(max_size=20),
    ),
)
def test_random_documents_load_or_name_their_file(
    tmp_path: Path, document: dict[Any, Any], kind: str, tail: bytes
) -> None:
    path = tmp_path / f"app.{kind}"
    try:
        text = _text(document, kind).encode("utf-8", "surrogatepass")
    except (yaml.YAMLError, RecursionError):  # what the writer cannot write
        assume(False)
    path.write_bytes(text + tail)
    try:
        config = load(path)
    except ConfigError as exc:
        message = str(exc)
        event(message[len(str(path)) :][:24])
    else:
        event("loaded")
        assert config.source == str(path)
        return
    assert message.startswith(f"{path}"), message


# -- (c) log lines -----------------------------------------------------------------------

JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([10**400, -(10**30), 2**63]),  # 400 digits: within repr's limit
    st.floats(),  # nan and inf: json.dumps writes NaN and Infinity
    TEXT,
    st.sampled_from(["sms", "vendor", "UTC", "2026-06-11T21:30:00+02:00", "1e400", "-5"]),
)
JSON_TREE = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=10,
)
CONTEXTS = st.dictionaries(
    st.one_of(st.sampled_from(["recipient", "content", "tz", "cost", "policy", "self"]), TEXT),
    JSON_TREE,
    max_size=4,
)
LINES = st.fixed_dictionaries(
    {},
    optional={
        "time": JSON_TREE,
        "policy": st.one_of(st.just("sms"), JSON_TREE),
        "context": st.one_of(CONTEXTS, JSON_TREE),
        "cost": JSON_TREE,
        "extra": JSON_TREE,
    },
)
TIMES = st.one_of(
    st.integers(min_value=1_781_200_000, max_value=1_781_300_000),
    st.floats(min_value=1_781_200_000, max_value=1_781_300_000),
    st.sampled_from(["2026-06-11T21:30:00+02:00", "2026-06-11T21:30:00", "1781200000.5"]),
    JSON_TREE,
)
ZONES = st.sampled_from(["UTC", "Asia/Tokyo", "Mars/Base", "", "posixrules", "UTC "])
PLAUSIBLE_LINES = st.fixed_dictionaries(
    {
        "time": TIMES,
        "policy": st.one_of(st.sampled_from(["sms", "vendor"]), JSON_TREE),
        "context": st.one_of(
            st.fixed_dictionaries(
                {"recipient": st.one_of(TEXT, JSON_TREE), "content": TEXT, "tz": ZONES},
                optional={"cost": JSON_TREE, "priority": TEXT, "x": JSON_TREE},
            ),
            st.just({}),
            CONTEXTS,
        ),
    },
    optional={"cost": st.one_of(st.integers(min_value=-2, max_value=8), JSON_TREE)},
)
RAW = st.one_of(
    PLAUSIBLE_LINES.map(lambda line: json.dumps(line).encode()),
    LINES.map(lambda line: json.dumps(line).encode()),
    st.binary(max_size=30),
    st.sampled_from([b"[" * 5000, b"{}", b"", b"\xef\xbb\xbf{}", b'"a"', b"1e400"]),
)
CELLS = st.one_of(
    st.sampled_from(["1781200000", "sms", "vendor", "a", "UTC", "1", "", "nan", "-3", "x,y"]),
    # Python 3.10's csv writer cannot write a NUL without an escapechar (the raw lines
    # below send NULs and every other byte)
    TEXT.filter(lambda s: "\x00" not in s),
)
ROWS = st.one_of(
    st.lists(CELLS, min_size=6, max_size=6).map(lambda cells: _csv_line(cells)),
    st.lists(CELLS, max_size=8).map(lambda cells: _csv_line(cells)),
    st.binary(max_size=30),
)


def _csv_line(cells: list[str]) -> bytes:
    text = io.StringIO()
    csv.writer(text, lineterminator="").writerow(cells)
    return text.getvalue().encode("utf-8", "surrogatepass")


def _line_number(err: str) -> int | None:
    found = re.match(r"freqguard: line (\d+): ", err)
    return None if found is None else int(found.group(1))


@SETTINGS
@given(
    kind=st.sampled_from(["jsonl", "csv"]),
    lines=st.lists(RAW, min_size=1, max_size=5),
    rows=st.lists(ROWS, min_size=1, max_size=5),
)
def test_random_log_lines_exit_2_naming_the_line(
    tmp_path: Path, kind: str, lines: list[bytes], rows: list[bytes]
) -> None:
    config = tmp_path / "a.toml"
    config.write_text(CONFIG.format(url="memory://"))
    log = tmp_path / f"log.{kind}"
    if kind == "csv":
        lines = [b"time,policy,recipient,content,tz,cost", *rows]
    log.write_bytes(b"\n".join(lines) + b"\n")
    done = run("replay", str(config), str(log), "--no-progress")
    event(f"exit {done.code}: {done.err[:40]}")
    assert done.code in (0, 2), done.err
    if done.code == 2:
        number = _line_number(done.err)
        assert number is not None, done.err
        assert 1 <= number <= log.read_bytes().count(b"\n") + 1, done.err
