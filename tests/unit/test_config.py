"""Configuration files: what they build (policies and settings, observers, tiers, calendar
rules, quiet hours and priorities), each a value that round-trips through its document, and
the schema editors read, held to a full JSON Schema implementation. Every error a file can
make is in ``test_config_errors.py``; the files they share are in ``config_rig.py``."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import jsonschema
import pytest
import yaml

from freqguard import AsyncGuard, ConfigError, Guard, ManualClock, Policy, Rule
from freqguard.config import SCHEMA, Config, load, loads
from freqguard.config.schema import SchemaError, check
from freqguard.observe import LoggingObserver
from freqguard.policy import Fallback
from tests.unit.config_rig import BASE, MESSAGING, ROOT
from tests.unit.config_rig import _no_url as _no_url

EXAMPLE = ROOT / "examples" / "freqguard.toml"


def test_a_file_builds_its_policies_and_settings() -> None:
    config = loads(BASE, source="app.toml")
    assert config.backend == "memory://"
    assert (config.prefix, config.deny_cache) == ("app", 10)
    assert config.policies == (
        Policy(
            "sms",
            Rule("15/minute", by="recipient", name="rcpt-1m"),
            Rule("2 per 59 seconds", by=("recipient", "content"), name="content-59s"),
        ),
        Policy("vendor", Rule("200/second", strategy="gcra", burst=20), on_error="allow"),
    )


def test_the_example_file_loads_and_its_guards_decide() -> None:
    config = load(EXAMPLE)
    clock = ManualClock(1_700_000_000)
    guard = config.guard(clock)
    assert isinstance(guard, Guard)
    decisions = [guard.hit("sms", recipient="+4917", content="otp") for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, False]
    assert [r.name for r in decisions[-1].denied_by] == ["content-59s"]
    assert isinstance(guard.on_error, str)
    vendor_on_error = guard._failover.of(guard._policies.plan("sms-vendor"))
    assert isinstance(vendor_on_error, Fallback)
    assert vendor_on_error.workers == 8
    assert isinstance(config.async_guard(clock), AsyncGuard)


def test_an_async_guard_from_a_file_decides_as_the_sync_one() -> None:
    import asyncio

    config = loads(BASE)
    guard = config.async_guard(ManualClock(1_700_000_000))

    async def main() -> list[bool]:
        return [(await guard.hit("sms", recipient="r", content="c")).allowed for _ in range(3)]

    assert asyncio.run(main()) == [True, True, False]


def test_each_guard_gets_the_configured_observers() -> None:
    config = loads('observers = ["logging"]\n' + BASE)
    for guard in (config.guard(), config.async_guard()):
        assert [type(observer) for observer in guard.observers] == [LoggingObserver]


@pytest.mark.parametrize(
    ("name", "extra"), [("prometheus", "prometheus"), ("opentelemetry", "otel")]
)
def test_an_observer_whose_library_is_missing_names_the_extra_to_install(
    name: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a new user's first hour: docs/config.md's file names the prometheus observer,
    and the base install said only that prometheus_client was missing."""
    module = sys.modules["freqguard.config.load"]  # the package's `load` is the function
    monkeypatch.setattr(module, "find_spec", lambda name: None)
    with pytest.raises(
        ConfigError, match=rf"observer '{name}' needs .* pip install -e '\.\[{extra}\]'"
    ):
        loads(f'observers = ["{name}"]\n' + BASE)


def test_metrics_observers_are_shared_by_every_configuration_of_a_process() -> None:
    pytest.importorskip("prometheus_client")
    first = loads('observers = ["prometheus"]\n' + BASE).guard()
    second = loads('observers = ["prometheus", "logging"]\n' + BASE).guard()
    assert first.observers[0] is second.observers[0]  # no "registry already holds" error


def test_a_round_trip_through_the_document_gives_the_same_configuration() -> None:
    config = load(EXAMPLE)
    document = config.document()
    again = loads(yaml.safe_dump(document), "yaml")
    assert again.policies == config.policies
    assert again.document() == document
    assert loads(json.dumps(document), "yaml").document() == document  # JSON is YAML
    jsonschema.validate(document, SCHEMA)


def test_tiers_in_a_file_decide_by_the_plan_and_round_trip() -> None:
    text = BASE.replace(
        'name = "rcpt-1m" }',
        'name = "rcpt-1m", tiers = { from = "plan", rates = { pro = "30/minute" } } }',
    )
    config = loads(text, source="app.toml")
    guard = config.guard(clock=ManualClock(1_700_000_000))
    pro = [guard.hit("sms", recipient="a", content=f"{i}", plan="pro") for i in range(31)]
    assert [d.allowed for d in pro].count(True) == 30
    free = [guard.hit("sms", recipient="b", content=f"{i}") for i in range(16)]
    assert [d.allowed for d in free].count(True) == 15
    document = config.document()
    assert document["policy"][0]["rules"][0]["tiers"] == {
        "from": "plan",
        "rates": {"pro": "30 per 60 seconds"},
    }
    assert loads(json.dumps(document), "yaml").policies == config.policies
    jsonschema.validate(document, SCHEMA)


DOCUMENTS: list[Any] = [
    {},
    {"policy": [{"name": "p", "rules": [{"rate": "1/second"}]}]},
    {"policy": [{"name": "p", "rules": []}]},
    {"policy": [{"name": "p"}]},
    {"policy": [{"rules": [{"rate": "1/second"}]}]},
    {"policy": [{"name": "p", "rules": [{"rate": 1}]}]},
    {"policy": [{"name": "p", "rules": [{"rate": "1/s", "by": ["a", 2]}]}]},
    {"policy": [{"name": "p", "rules": [{"rate": "1/s", "burst": 0}]}]},
    {"policy": [{"name": "p", "rules": [{"rate": "1/s", "shadow": 1}]}]},
    {"on_error": "deny"},
    {"on_error": "fail"},
    {"on_error": {"fallback": "memory://", "workers": 2}},
    {"on_error": {"fallback": "memory://", "workers": 0}},
    {"on_error": {"workers": 2}},
    {"breaker": False},
    {"breaker": {"cooldown": 0}},
    {"breaker": {"cooldown": 0.5, "failures": 2}},
    {"deny_cache": True},
    {"deny_cache": 1.5},
    {"deny_cache": 10**9},
    {"observers": ["logging", "logging"]},
    {"observers": ["logging", "prometheus"]},
    {"observers": "logging"},
    {"backend": 3},
    {"extra": 1},
    [],
]


@pytest.mark.parametrize("document", DOCUMENTS, ids=[json.dumps(d)[:40] for d in DOCUMENTS])
def test_the_schema_checker_agrees_with_a_full_json_schema_implementation(document: Any) -> None:
    try:
        check(document)
        ours = True
    except SchemaError:
        ours = False
    assert ours == jsonschema.Draft202012Validator(SCHEMA).is_valid(document)


def test_a_configuration_is_a_value() -> None:
    assert loads(BASE) == loads(BASE)
    assert isinstance(loads(BASE), Config)


def test_calendar_rules_in_a_file_count_per_local_day_and_round_trip() -> None:
    text = BASE.replace(
        '{ rate = "15/minute", by = "recipient", name = "rcpt-1m" }',
        '{ rate = "1/day", by = "recipient", name = "rcpt-day", calendar = true, tz_from = "tz" }',
    )
    config = loads(text, source="app.toml")
    guard = config.guard(clock=ManualClock(1_781_200_000))  # 2026-06-11 17:46:40 UTC
    shanghai = {"recipient": "a", "content": "x", "tz": "Asia/Shanghai"}
    assert guard.hit("sms", 1, **shanghai).allowed
    denied = guard.hit("sms", 1, **shanghai)
    assert [r.id for r in denied.denied_by] == ["rcpt-day"]
    midnight = datetime(2026, 6, 13, tzinfo=ZoneInfo("Asia/Shanghai")).timestamp()
    assert denied.retry_after == midnight - 1_781_200_000
    document = config.document()
    assert document["policy"][0]["rules"][0]["calendar"] is True
    assert document["policy"][0]["rules"][0]["tz_from"] == "tz"
    assert loads(json.dumps(document), "yaml").policies == config.policies
    jsonschema.validate(document, SCHEMA)
    with pytest.raises(ConfigError, match=r"^app.toml:\d+: policy 'sms', rule 1 .*unknown time"):
        loads(text.replace('tz_from = "tz"', 'tz = "Mars/Olympus"'), source="app.toml")


def test_quiet_hours_and_priorities_in_a_file_decide_and_round_trip() -> None:
    config = loads(MESSAGING, source="push.toml")
    (policy,) = config.policies
    assert policy.priorities == ("transactional", "marketing")
    assert policy.quiet is not None
    assert policy.quiet.exempt == ("transactional",)
    clock = ManualClock(datetime(2026, 6, 11, 22, tzinfo=ZoneInfo("Europe/Berlin")).timestamp())
    guard = config.guard(clock=clock)
    ctx = {"recipient": "a", "tz": "Europe/Berlin"}
    assert [r.id for r in guard.hit("push", 1, priority="marketing", **ctx).denied_by] == [
        "quiet-hours"
    ]
    assert guard.hit("push", 1, priority="transactional", **ctx).allowed
    document = config.document()
    assert document["policy"][0]["quiet"] == {
        "start": "21:00",
        "end": "08:00",
        "tz_from": "tz",
        "exempt": ["transactional"],
    }
    assert [r["name"] for r in document["policy"][0]["rules"]] == ["day", "promo"]
    assert loads(json.dumps(document), "yaml").policies == config.policies
    jsonschema.validate(document, SCHEMA)
