"""Review of 2340630 (a configuration file's every problem told at once): problems that are
still told one run at a time, a problem told at another policy's line, and the cost of a
file of many problems."""

from __future__ import annotations

import re

import pytest

import freqguard.config.places as places
from freqguard import ConfigError
from freqguard.config import loads
from tests.unit.config_rig import _no_url as _no_url

_BAD_FALLBACK = "unsupported backend URL scheme 'nope'"


def _told(text: str, kind: str = "toml") -> str:
    with pytest.raises(ConfigError) as refused:
        loads(text, kind, source=f"app.{kind}")
    return str(refused.value)


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        (
            "toml",
            '[[policy]]\nname = "a"\non_error = { fallback = "nope://x" }\n'
            'rules = [{ rate = "5/minuet" }]\n',
        ),
        (
            "yaml",
            "policy:\n  - name: a\n    on_error: {fallback: 'nope://x'}\n"
            "    rules: [{rate: 5/minuet}]\n",
        ),
    ],
    ids=["toml", "yaml"],
)
def test_a_policy_with_a_bad_rule_still_has_its_bad_fallback_url_told(kind: str, text: str) -> None:
    """The fallback's URL does not depend on the rules, yet a policy with a bad rule is
    skipped before ``_check_options`` sees its on_error table: only the rule is told, and
    the fallback's scheme shows on the next run (the one-error-a-run this commit ends)."""
    told = _told(text, kind)
    assert "5/minuet" in told
    assert _BAD_FALLBACK in told


def test_a_policy_with_bad_quiet_hours_still_has_its_bad_fallback_url_told() -> None:
    text = (
        '[[policy]]\nname = "a"\non_error = { fallback = "nope://x" }\n'
        'quiet = { start = "25:00", end = "07:00", tz = "UTC" }\n'
        'rules = [{ rate = "5/minute" }]\n'
    )
    told = _told(text)
    assert "25:00" in told
    assert _BAD_FALLBACK in told


def test_a_fallback_problem_is_told_at_its_own_policys_line_when_a_namesake_failed() -> None:
    """``_check_options`` maps a policy back to its place by name, the first policy of that
    name: the second 'a' (line 5), whose fallback is bad, is told at line 1, the first
    'a' (skipped for its bad rule, with no on_error at all)."""
    text = (
        '[[policy]]\nname = "a"\nrules = [{ rate = "5/minuet" }]\n'  # lines 1-3
        "\n"
        '[[policy]]\nname = "a"\non_error = { fallback = "nope://x" }\n'  # lines 5-7
        'rules = [{ rate = "5/minute" }]\n'
    )
    lines = _told(text).splitlines()
    [fallback] = [line for line in lines if _BAD_FALLBACK in line]
    assert fallback.strip().startswith("app.toml:7: policy 'a': on_error fallback:"), fallback


class _CountingRe:
    """The ``re`` module, counting the matches and searches ``places`` makes."""

    def __init__(self) -> None:
        self.calls = 0

    def __getattr__(self, name: str) -> object:
        return getattr(re, name)

    def match(self, pattern: str, text: str) -> re.Match[str] | None:
        self.calls += 1
        return re.match(pattern, text)

    def search(self, pattern: str, text: str) -> re.Match[str] | None:
        self.calls += 1
        return re.search(pattern, text)


def test_a_file_of_many_bad_rules_costs_work_in_proportion_to_its_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every bad rule's place is looked up (only 20 are shown), and each look-up scans its
    policy's lines twice: n bad rules in one policy cost n x n line matches. 4,000 such
    lines (100 KB) took 13 s; a 4 MiB file (the most read) of them, hours of
    ``freqguard check``. Before, the first bad rule ended the reading. Counted here in
    regex matches over the file's lines, not timed."""
    counting = _CountingRe()
    monkeypatch.setattr(places, "re", counting)
    n = 300
    rules = ",\n".join('  { rate = "1/minuet" }' for _ in range(n))
    text = f'[[policy]]\nname = "p"\nrules = [\n{rules}\n]\n'
    told = _told(text)
    assert told.splitlines()[0] == "app.toml: 20+ problems:"
    lines = text.count("\n")
    assert counting.calls <= 20 * lines, f"{counting.calls} regex matches for {lines} lines"


def test_the_error_of_many_problems_is_not_many_times_the_files_length() -> None:
    """Each problem's line repeats its policy's name in full: a 100 KB name over 20 bad
    rules is a 2 MB error (what ``freqguard check`` prints) from a 100 KB file. The count
    of problems is bounded, their length is not; before, the one error held it once."""
    name = "p" * 100_000
    rules = ",\n".join('  { rate = "1/minuet" }' for _ in range(20))
    text = f'[[policy]]\nname = "{name}"\nrules = [\n{rules}\n]\n'
    told = _told(text)
    assert told.splitlines()[0] == "app.toml: 20 problems:"
    assert len(told) <= 2 * len(text), f"{len(told):,} characters told of a {len(text):,} file"
