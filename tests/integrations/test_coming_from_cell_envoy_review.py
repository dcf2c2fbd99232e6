"""A redis-cell user and an Envoy ratelimit user porting what they run (a review's run):
each test is an idiom of theirs that freqguard refused without naming its own way, or
refused for a reason its message got wrong. The peers' numbers are their documented
ones (neither is installed here); freqguard runs on a pinned clock.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rule, TierRates
from freqguard.config import load
from tests.conftest import START


def _file(tmp_path: Path, text: str, name: str = "edge.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_value_of_its_own_dimension_is_a_tier() -> None:
    """Envoy: a descriptor's key alone (`remote_address`) limits every value, and the same
    key with a value (`remote_address: 50.0.0.5`) gives that one value its own rate, in the
    file. freqguard's way to write a rate per value in code or a file is a tier; keyed by
    the rule's own dimension it was refused as the policy was made, by a message that
    blamed "another rule's rate_for" (there was none) and called the rule's own key a
    value read besides the keys."""
    rule = Rule(
        "2/second",
        by="remote_address",
        strategy="fixed-window",
        name="per-ip",
        rate_for=TierRates("remote_address", {"50.0.0.5": "5/second"}),
    )
    guard = Guard(MemoryBackend(), [Policy("edge", rule)], clock=ManualClock(START))
    special = [guard.hit("edge", remote_address="50.0.0.5").allowed for _ in range(6)]
    anyone = [guard.hit("edge", remote_address="10.0.0.1").allowed for _ in range(3)]
    assert special == [True] * 5 + [False]
    assert anyone == [True, True, False]
    assert rule.reads == ()  # the value keys the rule; nothing else is read


def test_a_tier_on_the_rules_own_key_loads_from_a_file(tmp_path: Path) -> None:
    """The same, as Envoy writes it: in the configuration file."""
    path = _file(
        tmp_path,
        "policy:\n"
        "  - name: edge\n"
        "    rules:\n"
        "      - rate: 2/second\n"
        "        by: remote_address\n"
        "        strategy: fixed-window\n"
        "        name: per-ip\n"
        "        tiers: {from: remote_address, rates: {'50.0.0.5': 5/second}}\n",
    )
    guard = load(path).guard()
    assert [guard.hit("edge", remote_address="50.0.0.5").allowed for _ in range(5)] == [True] * 5


@pytest.mark.parametrize(
    ("key", "told"),
    [
        ("unlimited: true", r"per-key limit.*freqguard limit set .* none"),
        ("max_burst: 15", r"redis-cell's max_burst.*burst = max_burst \+ 1"),
        ("requests_per_unit: 10", r"rate = '10/minute'|rate.*N/unit"),
        ("replaces: [{name: per-ip}]", r"Envoy.s replaces.*tiers ="),
    ],
)
def test_a_peers_rule_key_names_ours(tmp_path: Path, key: str, told: str) -> None:
    """Envoy's `unlimited: true` (a value exempt, in the file), `requests_per_unit`,
    `replaces`, and redis-cell's `max_burst`, written in a rule out of habit: the error
    listed the keys a rule takes and nothing more, so an Envoy user learnt no way to exempt
    a value (a per-key limit of none, set at run time, since limits are not part of a file)
    and a redis-cell user writing `burst` next would silently get one less than
    max_burst + 1."""
    path = _file(
        tmp_path,
        f"policy:\n  - name: edge\n    rules:\n      - {{rate: 10/second, by: a, {key}}}\n",
    )
    with pytest.raises(ConfigError, match=told):
        load(path)


def test_an_envoy_file_names_where_its_parts_go(tmp_path: Path) -> None:
    """An Envoy ratelimit file (`domain`, `descriptors`) given to freqguard: the error
    listed freqguard's top-level keys only."""
    path = _file(
        tmp_path,
        "domain: edge\ndescriptors:\n  - key: remote_address\n"
        "    rate_limit: {unit: second, requests_per_unit: 10}\n",
    )
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert "a policy's name" in str(caught.value)
    assert "rules" in str(caught.value).split("unknown key 'descriptors'")[1]


def test_a_policys_error_names_the_policy_once(tmp_path: Path) -> None:
    """A policy that cannot be made: the place already says `policy 'edge'`, and the
    message said it again (`policy 'edge': policy 'edge' has two rules...`)."""
    path = _file(
        tmp_path,
        "policy:\n  - name: edge\n    rules:\n"
        "      - {rate: 10/second, by: a, name: x}\n"
        "      - {rate: 10/minute, by: a, name: x}\n",
    )
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert str(caught.value).count("policy 'edge'") == 1, str(caught.value)
