"""Every error a configuration file can make, each naming the file, the line, the policy and
the rule: a key or a value a file cannot take, YAML's aliases and documents nested past
their bound (refused before they are walked), syntax, a messaging policy's mistakes, and
several rates in one rule. What files build is in ``test_config.py``; the files they share
are in ``config_rig.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from freqguard import ConfigError
from freqguard.config import load, loads
from tests.unit.config_rig import BASE, MESSAGING
from tests.unit.config_rig import _no_url as _no_url

ERRORS: list[tuple[str, str, str]] = [
    # (what is replaced, by what, the error's beginning and what it says)
    # the one meant, first (found by a new user's first hour)
    ("deny_cache = 10", "deny_cach = 10", "app.toml:2: unknown key 'deny_cach' (did you mean "),
    ("deny_cache = 10", "deny_cache = -1", "app.toml:2: deny_cache -1 is not an integer >= 0"),
    ('prefix = "app"', 'prefix = "a b"', "app.toml:1: prefix: key prefix must"),
    (
        '{ rate = "15/minute", by',
        '{ rate = "15/minuet", by',
        "app.toml:7: policy 'sms', rule 1 ('rcpt-1m'): cannot parse rate '15/minuet'",
    ),
    (
        '{ rate = "15/minute", by',
        '{ rat = "15/minute", by',
        "app.toml:7: policy 'sms', rule 1 ('rcpt-1m'): unknown key 'rat' (did you mean 'rate'? "
        "allowed: burst, by, "
        "calendar, caps, lease, name, only, rate, shadow, strategy, tiers, tz, tz_from)",
    ),
    (
        'by = ["recipient", "content"]',
        "by = 3",
        "app.toml:8: policy 'sms', rule 2 ('content-59s'): by 3 is not a string or a list",
    ),
    (  # Rule(strategy=...) takes this spelling; a file names the one to write
        'strategy = "gcra"',
        'strategy = "sliding_log"',
        "app.toml:14: policy 'vendor', rule 1 ('200/second'): strategy 'sliding_log' is not "
        "one of 'fixed-window', 'sliding-log', 'token-bucket', 'gcra', 'concurrency', "
        "'rolling-window' (did you mean 'sliding-log'?)",
    ),
    (  # written with a space: still limits' name
        'strategy = "gcra"',
        'strategy = "moving window"',
        "app.toml:14: policy 'vendor', rule 1 ('200/second'): strategy 'moving window' is not "
        "one of 'fixed-window', 'sliding-log', 'token-bucket', 'gcra', 'concurrency', "
        "'rolling-window' (limits' 'moving-window' is 'sliding-log' here)",
    ),
    (  # limits' and Flask-Limiter's name for the exact log
        'strategy = "gcra"',
        'strategy = "moving-window"',
        "app.toml:14: policy 'vendor', rule 1 ('200/second'): strategy 'moving-window' is not "
        "one of 'fixed-window', 'sliding-log', 'token-bucket', 'gcra', 'concurrency', "
        "'rolling-window' (limits' 'moving-window' is 'sliding-log' here)",
    ),
    (
        'strategy = "gcra"',
        'strategy = "leaky"',
        "app.toml:14: policy 'vendor', rule 1 ('200/second'): strategy 'leaky' is not one of",
    ),
    (
        'strategy = "gcra", burst',
        'strategy = "sliding-log", burst',
        "app.toml:14: policy 'vendor', rule 1 ('200/second'): burst applies to token-bucket "
        "and gcra only",
    ),
    (
        'on_error = "allow"',
        'on_error = "maybe"',
        "app.toml:13: policy 'vendor': on_error 'maybe' is not",
    ),
    ('name = "vendor"', 'name = "sms"', "app.toml:11: policy 'sms': a second policy named 'sms'"),
    ('name = "vendor"\n', "", "app.toml:11: policy 2: 'name' is missing"),
    (
        'rules = [{ rate = "200/second", strategy = "gcra", burst = 20 }]',
        "rules = []",
        "app.toml:14: policy 'vendor': rules needs at least 1 item(s)",
    ),
    (
        'name = "content-59s"',
        'name = "rcpt-1m"',
        "app.toml:4: policy 'sms': it has two rules with the id 'rcpt-1m'",
    ),
    (
        'on_error = "allow"',
        'on_error = { fallback = "redis://:0" }',
        "app.toml:13: policy 'vendor': on_error fallback: port must be",
    ),
    ('prefix = "app"', 'backend = "postgres://x"', "app.toml:1: backend: "),
    (
        'prefix = "app"',
        "breaker = { failures = 0 }",
        "app.toml:1: breaker.failures 0 is not an integer >= 1",
    ),
    ('prefix = "app"', 'observers = ["statsd"]', "app.toml:1: observers 'statsd' is not one of"),
    (
        'prefix = "app"',
        'observers = ["logging", "logging"]',
        "app.toml:1: observers 'logging' is listed twice",
    ),
    (
        "deny_cache = 10",
        "deny_cache = 1_000_000_000",
        "app.toml:2: deny_cache 1000000000 is not an integer >= 0 and <= 100000000",
    ),
]


ERRORS += [
    (
        'name = "rcpt-1m" }',
        'name = "rcpt-1m", tiers = { from = "plan", rates = { pro = "lots" } } }',
        "app.toml:7: policy 'sms', rule 1 ('rcpt-1m'): cannot parse rate 'lots'",
    ),
    (
        'name = "rcpt-1m" }',
        'name = "rcpt-1m", tiers = { from = "plan" } }',
        "app.toml:7: policy 'sms', rule 1 ('rcpt-1m'): tiers: 'rates' is missing",
    ),
    (
        'name = "rcpt-1m" }',
        'name = "rcpt-1m", tiers = { from = "content", rates = { a = "1/second" } } }',
        "app.toml:4: policy 'sms': ['content'] are both",
    ),
    (
        '{ rate = "15/minute", by = "recipient", name = "rcpt-1m" }',
        '{ rate = "15/minute", by = "recipient", '
        'tiers = { from = "plan", rates = { a = "1/second" } } }',
        "app.toml:7: policy 'sms', rule 1 ('15/minute'): a rule with tiers needs a name (its "
        "keys must not change with its rate): give the rule of rate '15/minute' a name",
    ),
]


@pytest.mark.parametrize(("old", "new", "expected"), ERRORS, ids=[e[1][:30] for e in ERRORS])
def test_every_error_names_the_file_line_policy_and_rule(old: str, new: str, expected: str) -> None:
    assert old in BASE
    with pytest.raises(ConfigError) as raised:
        loads(BASE.replace(old, new, 1), source="app.toml")
    assert str(raised.value).startswith(expected), str(raised.value)


def test_yaml_errors_name_the_line_of_the_node() -> None:
    text = """\
policy:
  - name: sms
    rules:
      - rate: 15/minute
        by: recipient
      - rate: 2 per 59 seconds
        by: [recipient, content]
        burst: 2
"""
    with pytest.raises(ConfigError, match=r"^app.yaml:6: policy 'sms', rule 2 .*burst applies"):
        loads(text, "yaml", "app.yaml")
    with pytest.raises(ConfigError, match=r"^app.yaml:5: policy 'sms', rule 1 .*unknown key 'bye'"):
        loads(text.replace("by: recipient", "bye: recipient"), "yaml", "app.yaml")


def test_yaml_aliases_are_refused_before_anything_walks_them() -> None:
    """Aliases of aliases make a document exponential to walk ("billion laughs")."""
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 10) + "]" for n in range(1, 9)]
    with pytest.raises(
        ConfigError, match=r"^bomb.yaml:1: this node is used again .* aliases are not supported"
    ):
        loads("\n".join(levels) + "\n", "yaml", "bomb.yaml")


@pytest.mark.parametrize(
    "deep",
    [
        "[" * 100_000,  # flow style: PyYAML's scanner is quadratic in its depth (~57 s)
        "a: " + "{a: " * 100_000 + "1" + "}" * 100_000,
        "- " * 100_000 + "x",  # block sequences on one line
        "".join(" " * i + f"k{i}:\n" for i in range(40)) + " " * 40 + "v\n",  # indented
    ],
    ids=["flow", "flow-mappings", "dashes", "indented"],
)
def test_a_yaml_document_nested_past_its_bound_is_refused_before_it_is_read_whole(
    deep: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A configuration nests a few levels; YAML nested past MAX_DEPTH (32) is refused as
    soon as the parser reaches that depth, whatever the style: the parser's events are
    counted (not timed), so a document of 100,000 levels costs what 33 do."""
    import yaml

    events = 0
    parse = yaml.SafeLoader.parse_node

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal events
        events += 1
        return parse(self, *args, **kwargs)

    monkeypatch.setattr(yaml.SafeLoader, "parse_node", counted)
    with pytest.raises(
        ConfigError, match=r"^deep.yaml:\d+: nested too deeply \(more than 32 levels\)"
    ):
        loads(deep, "yaml", "deep.yaml")
    assert events < 100


@pytest.mark.parametrize("kind", ["toml", "yaml"])
def test_a_document_nested_past_the_parsers_depth_is_a_clear_error(kind: str) -> None:
    deep = "a = " + "[" * 100_000 + "]" * 100_000 if kind == "toml" else "[" * 100_000
    with pytest.raises(ConfigError, match=rf"^deep.{kind}:(\d+:)? nested"):
        loads(deep, kind, f"deep.{kind}")


def test_syntax_errors_and_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^app.toml: not valid TOML: .*line 2"):
        loads("prefix = 'a'\nbad line\n", source="app.toml")
    with pytest.raises(ConfigError, match=r"^app.yaml: not valid YAML"):
        loads("a: [1\n", "yaml", "app.yaml")
    with pytest.raises(ConfigError, match=r"\.json: a configuration file is \.toml, \.yaml"):
        load(tmp_path / "freqguard.json")
    with pytest.raises(ConfigError, match=r"missing\.toml: cannot be read"):
        load(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match=r"is not a table of backend, breaker"):
        loads("- 1\n", "yaml")
    assert loads("", "yaml").policies == ()  # an empty file: no policies, the defaults


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('start = "21:00"', 'start = "9pm"', "push.toml:4: policy 'push': QuietHours start"),
        ('exempt = ["transactional"]', 'exempt = ["otp"]', "push.toml:1: policy 'push': "),
        ("marketing = 3", "marketing = 5", "push.toml:6: policy 'push', rule 1 ('day')"),
        ('only = ["marketing"]', 'only = ["bulk"]', "push.toml:1: policy 'push': "),
        ('end = "08:00"', 'end = "08:00", zone = "x"', "push.toml:4: policy 'push': quiet:"),
    ],
)
def test_messaging_mistakes_name_the_file_and_line(old: str, new: str, expected: str) -> None:
    assert old in MESSAGING
    with pytest.raises(ConfigError) as raised:
        loads(MESSAGING.replace(old, new, 1), source="push.toml")
    assert str(raised.value).startswith(expected), str(raised.value)


def test_several_rates_in_one_rule_table_name_the_files_fix() -> None:
    """A file's rule takes one rate; several (Flask-Limiter's "10 per minute; 100 per day")
    are refused naming the fix in the file's terms, one rule table each, not Python's
    parse_rates() (found by a new user's first hour)."""
    text = '[[policy]]\nname = "api"\nrules = [{ rate = "10 per minute; 100 per day" }]\n'
    with pytest.raises(ConfigError) as refused:
        loads(text, source="app.toml")
    message = str(refused.value)
    assert "app.toml" in message
    assert "one rule table per rate" in message
    assert "parse_rates" not in message


@pytest.mark.parametrize("joined", [", ", " | "])
def test_several_rates_joined_otherwise_name_the_files_fix_too(joined: str) -> None:
    """Review: rates join with ';', ',' or '|' (parse_rates reads all three; limits and
    Flask-Limiter write ','), but only ';' was caught: the others still named Python's
    parse_rates()."""
    rates = joined.join(["10 per minute", "100 per day"])
    text = f'[[policy]]\nname = "api"\nrules = [{{ rate = "{rates}" }}]\n'
    with pytest.raises(ConfigError) as refused:
        loads(text, source="app.toml")
    message = str(refused.value)
    assert "one rule table per rate" in message
    assert "parse_rates" not in message


def test_every_problem_of_a_file_is_told_at_once_each_at_its_place() -> None:
    """A file of several mistakes was refused at the first: fixed, the next one showed,
    one run each. Now one error lists them all, in the file's order, each with its line,
    policy and rule."""
    text = (
        BASE.replace('{ rate = "15/minute", by', '{ rate = "15/minuet", by').replace(
            'prefix = "app"', 'prefix = "a b"'
        )
        + '\n[[policy]]\nname = "sms"\nrules = [{ rate = "1/second" }]\n'
    )
    with pytest.raises(ConfigError) as refused:
        loads(text, source="app.toml")
    lines = str(refused.value).splitlines()
    assert lines[0] == "app.toml: 3 problems:"  # in the file's order (a new user's run)
    assert lines[1].startswith("  app.toml:1: prefix: key prefix must")
    assert lines[2].startswith("  app.toml:7: policy 'sms', rule 1 ('rcpt-1m'): cannot parse")
    assert lines[3] == "  app.toml:16: policy 'sms': a second policy named 'sms'"


def test_every_place_a_file_breaks_the_schema_is_told_at_once() -> None:
    """The schema's problems come first (nothing is built from a file that breaks it),
    each at its place: a typo is told once (its key's "missing" is not said again)."""
    text = (
        BASE.replace("burst = 20", "burst = 0")
        .replace("deny_cache = 10", "deny_cache = 10\nbreaker = { failures = 0 }")
        .replace('{ rate = "15/minute", by', '{ rat = "15/minute", by')
    )
    with pytest.raises(ConfigError) as refused:
        loads(text, source="app.toml")
    lines = str(refused.value).splitlines()
    assert lines[0] == "app.toml: 3 problems:"
    assert lines[1].startswith("  app.toml:3: breaker.failures 0 is not an integer >= 1")
    assert lines[2].startswith("  app.toml:8: policy 'sms', rule 1 ('rcpt-1m'): unknown key")
    assert lines[3].startswith("  app.toml:15: policy 'vendor', rule 1 ('200/second'): burst 0")


def test_a_file_of_many_problems_tells_the_first_twenty_and_that_there_are_more() -> None:
    rules = ",\n".join(f'  {{ rate = "{n}/minuet", name = "r{n}" }}' for n in range(1, 31))
    with pytest.raises(ConfigError) as refused:
        loads(f'[[policy]]\nname = "p"\nrules = [\n{rules}\n]\n', source="app.toml")
    told = str(refused.value).splitlines()
    assert told[0] == "app.toml: 20+ problems:"
    assert len(told) == 22
    assert told[-1] == "  and more"
    assert "rule 20 ('r20')" in told[20]
