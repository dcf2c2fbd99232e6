"""Hostile configurations and rates: each is a ConfigError naming the file and the place
(and the value, and what is allowed), never another exception: windows past what a
``timedelta`` holds, numbers past Python's digit limit, NaN, duplicate YAML keys at any
depth (merge keys too), files that are not UTF-8."""

from __future__ import annotations

from pathlib import Path

import pytest

from freqguard import ConfigError, Rule, parse_rate, parse_rates
from freqguard.config import ENV, load, loads

POLICY = '[[policy]]\nname = "sms"\nrules = [{{ rate = "{rate}", by = "recipient" }}]\n'


@pytest.fixture(autouse=True)
def _no_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


@pytest.mark.parametrize(
    "text",
    [
        "1 per 100000000000000000000 days",
        "1 per 999999999999 years",
        "1 per 1000000000 days",
        "1 per 11 years",
        "1/second; 1 per 100000000000000000000 seconds",
    ],
)
def test_a_window_past_the_largest_is_refused_naming_both(text: str) -> None:
    with pytest.raises(ConfigError, match=r"10 years \(3660 days\)") as raised:
        parse_rates(text)
    assert repr(text) in str(raised.value)
    with pytest.raises(ConfigError, match=r"10 years \(3660 days\)"):
        Rule(text if ";" not in text else text.split(";")[1])


@pytest.mark.parametrize(
    "text",
    [
        "100000000000000000000000 per second",
        "9" * 5000 + " per second",
        "1 per " + "9" * 5000 + " seconds",
        "inf per second",
        "1 per inf seconds",
        "nan/minute",
        "\u0661\u0665/minute",  # Arabic-Indic digits
        "5/\u0660 minutes",  # an Arabic-Indic zero: not a multiple of 1
        "\uff11\uff15/minute",  # fullwidth digits
        "1/\u017fecond",  # a long s, which case-insensitive matching takes for an s
        "1/second" + ";" * 10 + "x",
    ],
)
def test_hostile_rates_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_rate(text)


def test_a_rate_text_longer_than_any_rate_is_refused_before_it_is_parsed() -> None:
    """The grammar's regular expression backtracks quadratically on long runs of spaces."""
    with pytest.raises(ConfigError, match=r"at most 256 characters, got one of 100002"):
        parse_rate("1" + " " * 100_000 + "x")


def test_a_rate_of_huge_window_in_a_file_names_the_file_and_rule() -> None:
    text = POLICY.format(rate="1 per 100000000000000000000 days")
    with pytest.raises(ConfigError, match=r"^big.toml:3: policy 'sms', rule 1 .*3660 days"):
        loads(text, source="big.toml")


def test_a_file_that_is_not_utf8_names_the_file_and_the_byte(tmp_path: Path) -> None:
    for name in ("bad.toml", "bad.yaml"):
        path = tmp_path / name
        path.write_bytes(b'prefix = "ok"\n# caf\xe9\n')
        with pytest.raises(ConfigError, match=rf"{name}:2: not UTF-8: byte 0xe9 at offset 19"):
            load(path)
        path.write_bytes(b'\xef\xbb\xbfprefix = "ok"\n# caf\xe9\n')  # offsets count the BOM
        with pytest.raises(ConfigError, match=rf"{name}:2: not UTF-8: byte 0xe9 at offset 22"):
            load(path)
        text = b'prefix = "ok"\n' if name.endswith(".toml") else b"prefix: ok\n"
        path.write_bytes(b"\xef\xbb\xbf" + text)  # a BOM alone is skipped
        assert load(path).prefix == "ok"


def test_a_file_too_large_to_be_a_configuration_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    with path.open("wb") as file:
        file.truncate(64 * 1024 * 1024)  # sparse: nothing is written
    with pytest.raises(ConfigError, match=r"huge.toml: .*larger than 4 MiB"):
        load(path)


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("toml", "deny_cache = " + "9" * 5000),
        ("yaml", "deny_cache: " + "9" * 5000),
        ("yaml", "deny_cache: 0x" + "f" * 5000),
        ("yaml", "deny_cache: 0o" + "7" * 5000),
        ("yaml", "deny_cache: 0b" + "1" * 20000),
        ("yaml", "deny_cache: 1_" + "9" * 5000),
        ("yaml", "deny_cache: 1:" + "9" * 5000),  # YAML 1.1's base 60
    ],
)
def test_integers_past_the_digit_limit_are_config_errors(kind: str, text: str) -> None:
    with pytest.raises(ConfigError, match=rf"^app.{kind}") as raised:
        loads(text + "\n", kind, f"app.{kind}")
    assert len(str(raised.value)) < 300  # the number is not written out


def test_yaml_names_an_integer_past_the_digit_limit_and_a_date_that_is_none() -> None:
    with pytest.raises(ConfigError, match=r"^app.yaml:2: an integer of 5000 digits is out of"):
        loads("a: 1\nb: " + "9" * 5000 + "\n", "yaml", "app.yaml")
    with pytest.raises(ConfigError, match=r"^app.yaml:1: cannot read '2020-02-30': day is out"):
        loads("prefix: 2020-02-30\n", "yaml", "app.yaml")


@pytest.mark.parametrize(
    ("kind", "text", "line"),
    [
        ("yaml", "policy:\n  - name: a\n    rules:\n      - {rate: 1/second, burst: 0x%s}\n", 4),
        ("yaml", "breaker:\n  failures: 1%s\n", 2),
        ("toml", "[breaker]\nfailures = 0x%s\n", 2),
        ("toml", "[[policy]]\nname = 'a'\nrules = [{rate = '1/second', caps = {a = 0x%s}}]\n", 3),
        ("toml", "deny_cache = -1%s\n", 1),
    ],
)
def test_integers_past_64_bits_are_refused_where_they_are(kind: str, text: str, line: int) -> None:
    """TOML allows 64-bit integers only; neither file has any use for more."""
    digits = "0" * 40 if "0x" not in text else "f" * 5000
    with pytest.raises(ConfigError, match=rf"^app.{kind}:{line}: .*from -2\^63 to 2\^63-1"):
        loads(text % digits, kind, f"app.{kind}")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_number_that_is_not_finite_is_refused_by_the_schema(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^app.toml:1: breaker.cooldown nan|inf"):
        loads(f"breaker = {{ cooldown = {value} }}\n", source="app.toml")
    with pytest.raises(ConfigError, match=r"^app.yaml:2: breaker.cooldown"):
        loads(f"breaker:\n  cooldown: .{value.replace('-', '')}\n", "yaml", "app.yaml")


RULES_YAML = """\
policy:
  - name: sms
    rules:
      - rate: 15/minute
        by: recipient
"""


@pytest.mark.parametrize(
    ("text", "line", "first", "key"),
    [
        (RULES_YAML + "    rules:\n      - rate: 1000/second\n", 6, 3, "rules"),
        (RULES_YAML + "policy: []\n", 6, 1, "policy"),
        (RULES_YAML + "        rate: 100/second\n", 6, 4, "rate"),
        ("breaker:\n  failures: 2\n  failures: 3\n", 3, 2, "failures"),
        ("prefix: a\n'prefix': b\n", 2, 1, "prefix"),
        ("breaker: {cooldown: 1, cooldown: 2}\n", 1, 1, "cooldown"),
        ("deny_cache: 1\n<<: {deny_cache: 2}\n", 2, 1, "deny_cache"),  # a merge key
        ("true: 1\nyes: 2\n", 2, 1, "True"),  # one key after construction
    ],
)
def test_duplicate_yaml_keys_are_refused_at_every_depth(
    text: str, line: int, first: int, key: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        loads(text, "yaml", "app.yaml")
    message = str(raised.value)
    assert message.startswith(f"app.yaml:{line}: "), message
    assert f"{key!r}" in message or key in message, message
    assert f"line {first}" in message, message


def test_the_attack_of_the_review_passes_no_more_than_the_cap() -> None:
    """A second ``rules:`` used to win: 100 of 100 hits passed a 15/minute rule."""
    text = RULES_YAML + "    rules:\n      - rate: 1000/minute\n        by: recipient\n"
    with pytest.raises(ConfigError, match="given twice"):
        loads(text, "yaml", "app.yaml")


def test_yaml_without_duplicates_still_loads_with_its_protections() -> None:
    assert [p.name for p in loads(RULES_YAML, "yaml").policies] == ["sms"]
    with pytest.raises(ConfigError, match="aliases are not supported"):
        loads("a: &x [1]\nb: *x\n", "yaml")
    with pytest.raises(ConfigError, match=r"nested too deeply \(more than 32 levels\)"):
        loads("[" * 100_000, "yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        loads("a: !!python/object:os.system {}\n", "yaml")


def test_a_character_yaml_does_not_allow_is_a_config_error() -> None:
    """PyYAML checks the characters as its loader is made, before parsing."""
    with pytest.raises(ConfigError, match=r"^app.yaml: not valid YAML: unacceptable character"):
        loads("a: \x00\n", "yaml", "app.yaml")


def test_a_path_that_is_not_a_file_is_refused_without_waiting(tmp_path: Path) -> None:
    """open() of a FIFO waits for a writer: for ever, for a configuration."""
    import os

    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"pipe.toml: not a file"):
        load(fifo)
    (tmp_path / "folder.toml").mkdir()
    with pytest.raises(ConfigError, match=r"folder.toml: not a file"):
        load(tmp_path / "folder.toml")


@pytest.mark.parametrize(
    "path",
    ["x" * 5000 + ".toml", "9" * 1_000_000 + ".yaml", "a\x00b.toml", "x" * 1_000_000],
    ids=["5,000 characters", "1 MB", "a NUL", "1 MB, no suffix"],
)
def test_a_path_no_file_can_have_is_a_config_error_showing_it_short(path: str) -> None:
    """A name longer than the system's (OSError "File name too long", from the check that
    the path is a file) or holding a NUL (ValueError "embedded null byte") raised past
    load(): a traceback from ``freqguard check``; a 1 MB path was a 1 MB message."""
    with pytest.raises(ConfigError) as refused:
        load(path)
    assert len(str(refused.value)) < 300, str(refused.value)[:300]


def test_a_rule_of_a_lease_shows_a_long_rate_short() -> None:
    """``lease=30`` beside a rate not 'N concurrent' printed the rate whole (a 1 MB rate
    in a configuration file, a 1 MB message)."""
    rate = "x" * 1_000_000
    with pytest.raises(ConfigError, match=r"lease=30") as refused:
        Rule(rate, lease=30)
    assert len(str(refused.value)) < 300
    text = '[[policy]]\nname = "p"\nrules = [{ rate = "' + rate + '", lease = 30 }]\n'
    with pytest.raises(ConfigError, match=r"^c.toml:3: .*lease=30") as refused:
        loads(text, source="c.toml")
    assert len(str(refused.value)) < 400
