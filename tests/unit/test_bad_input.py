"""Bad input gets a clear error naming the value, and changes no state."""

from __future__ import annotations

from datetime import timedelta

import pytest

from freqguard import (
    ConfigError,
    FreqGuardError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rate,
    Rule,
    parse_rate,
    parse_rates,
)
from tests.conftest import SMS


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: parse_rate("15 per fortnight"), "cannot parse rate '15 per fortnight'"),
        (lambda: parse_rate("0/minute"), "limit 0"),
        (lambda: parse_rate("5/0 minutes"), "window of 0"),
        (lambda: parse_rate("1/second; 2/minute"), "expected one rate, got 2"),
        (lambda: parse_rate(15), "must be a string"),  # type: ignore[arg-type]
        # Flask-Limiter's list of rates: found by a new user's first hour
        (
            lambda: parse_rates(["10 per minute", "100 per day"]),  # type: ignore[arg-type]
            "several rates join with ';' in one string: '10 per minute; 100 per day'",
        ),
        (lambda: Rate(0, timedelta(seconds=1)), "got 0"),
        (lambda: Rate(-3, timedelta(seconds=1)), "got -3"),
        (lambda: Rate(True, timedelta(seconds=1)), "got True"),
        (lambda: Rate(5, timedelta(0)), "longer than 0"),
        (lambda: Rate(5, timedelta(days=20 * 365)), "at most 10 years"),
        (lambda: Rule("5/minute", strategy="leaky"), "unknown strategy 'leaky'"),
        # limits' names, found by a new user's first hour: each named with ours
        (
            lambda: Rule("5/minute", strategy="moving-window"),
            "limits' 'moving-window' is strategy='sliding-log' here",
        ),
        (
            lambda: Rule("5/minute", strategy="sliding-window-counter"),
            "'rolling-window' here",
        ),
        # throttled-py's names, found by a new user's first hour
        (
            lambda: Rule("5/minute", strategy="leaking_bucket"),
            "throttled-py's 'leaking-bucket' is strategy='token-bucket' here",
        ),
        (
            lambda: Rule("5/minute", strategy="sliding_window"),
            "throttled-py's 'sliding-window'",
        ),
        (  # limits' identifiers are positional: found by a new user's first hour
            lambda: Guard(MemoryBackend(), [Policy("api", Rule("5/minute", by="user"))]).hit(
                "api",
                "u",  # type: ignore[arg-type]
            ),
            "the context is given by name: user='u'",
        ),
        (  # and a cost written as text
            lambda: Guard(MemoryBackend(), [Policy("api", Rule("5/minute", by="user"))]).peek(
                "api",
                "3",  # type: ignore[arg-type]
            ),
            "a cost is an integer: 3, not '3'",
        ),
        (lambda: Rule("5/minute", strategy="gcra", burst=0), "burst must be an integer"),
        (lambda: Rule("5/minute", burst=3), "burst applies to token-bucket and gcra only"),
        (lambda: Rule("5/minute", by="bad name"), "dimension 'bad name'"),
        (  # found by a new user's first hour
            lambda: Rule("5/minute", by="recipient, content"),
            "several dimensions are a list: by=['recipient', 'content']",
        ),
        (lambda: Rule("5/minute", by="cost"), "dimension 'cost'"),
        (lambda: Rule("5/minute", by="class"), "dimension 'class'"),
        (lambda: Rule("5/minute", by=("a", "a")), "distinct"),
        (lambda: Rule("5/minute", name="a:b"), "rule name"),
        (lambda: Policy("sms"), "at least one rule"),
        (lambda: Policy("s{1}", Rule("5/minute")), "policy name"),
        (lambda: Policy("p", Rule("5/minute"), Rule("5/minute")), "two rules with the id"),
        (lambda: Policy("p", Rule("5/minute", name="x"), Rule("6/hour", name="x")), "'x'"),
        (lambda: Guard(MemoryBackend(), prefix="fg:{x}"), "key prefix"),
        (  # a policy object where its name goes: found by a new user's first hour
            lambda: Guard(MemoryBackend()).hit(Policy("api", Rule("5/minute"))),  # type: ignore[arg-type]
            "hit takes a policy's name, got Policy(",
        ),
    ],
)
def test_invalid_configuration_is_refused(make: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        make()  # type: ignore[operator]


@pytest.mark.parametrize(
    "name", ["policy", "cost", "contexts", "timeout", "self", "rule", "rules", "rate", "ttl"]
)
def test_no_dimension_or_read_value_takes_the_name_of_a_guard_argument(name: str) -> None:
    """A context value named as a parameter of hit, acquire, reset or set_limit could never
    be passed beside it (``hit("p", cost=1, **{"cost": ...})``): refused where it is named."""
    from freqguard import TierRates

    with pytest.raises(ConfigError, match=f"dimension {name!r} is not allowed"):
        Rule("5/minute", by=name)
    with pytest.raises(ConfigError, match=f"dimension {name!r} is not allowed"):
        Rule("5/minute", by="u", name="r", rate_for=TierRates(name, {"a": "6/minute"}))
    with pytest.raises(ConfigError, match=f"dimension {name!r} is not allowed"):
        Rule("5/day", by="u", calendar=True, tz_from=name)


def test_config_errors_are_freqguard_and_value_errors() -> None:
    with pytest.raises(FreqGuardError):
        parse_rate("nope")
    with pytest.raises(ValueError, match="nope"):
        parse_rate("nope")


@pytest.fixture
def guard() -> Guard:
    return Guard(MemoryBackend(), [SMS], clock=ManualClock(1e9))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda g: g.hit("sms", recipient="a"), "missing dimension.s. content"),
        (lambda g: g.hit("sms", recipient="a", content="b", extra=1), "unknown dimension.s. extra"),
        (  # a misspelt keyword argument is a dimension too: named as what it was meant
            lambda g: g.hit("sms", recipient="a", content="b", cots=2),
            r"unknown dimension\(s\) cots \(did you mean cost=\?\)",
        ),
        (  # a batch's context is any mapping: a key that is not text is named, not a crash
            lambda g: g.hit_many("sms", [{"recipient": "a", "content": "b", 1: "x"}]),
            r"unknown dimension\(s\) 1 \(it takes",
        ),
        (  # a keyword of another call: no echo of itself as the fix
            lambda g: g.hit("sms", recipient="a", content="b", timeout=2),
            r"unknown dimension\(s\) timeout \(an argument of another call, not of this one\)",
        ),
        (
            lambda g: g.acquire("sms", recipient="a", content="b", timout=2),
            r"unknown dimension\(s\) timout \(did you mean timeout=\?\)",
        ),
        (
            lambda g: g.hit("sms", recipient="a", contnet="b"),
            r"missing dimension\(s\) content; unknown dimension\(s\) contnet \(did you mean "
            r"content\?\)",
        ),
        (lambda g: g.hit("sms", recipient=None, content="b"), "must be a str or an int, got None"),
        (lambda g: g.hit("sms", recipient=1.5, content="b"), "got 1.5"),
        (lambda g: g.hit("sms", recipient=True, content="b"), "got True"),
        (  # past Python's int-to-text limit: not its bare ValueError
            lambda g: g.hit("sms", recipient="a", content=10**5000),
            "dimension 'content' of policy 'sms' must be an int of at most 4300 digits",
        ),
        (lambda g: g.peek("sms", recipient=-(10**4400), content="b"), "at most 4300 digits"),
        (
            lambda g: g.hit("sms", -1, recipient="a", content="b"),
            "cost must be an integer >= 0, got -1",
        ),
        (lambda g: g.hit("sms", 1.0, recipient="a", content="b"), "got 1.0"),
        (lambda g: g.hit("sms", 3, recipient="a", content="b"), "cost 3 exceeds the capacity 2"),
        (lambda g: g.hit("nope", recipient="a"), "unknown policy 'nope'"),
        (lambda g: g.acquire("sms", timeout=-1, recipient="a", content="b"), "timeout"),
        (
            lambda g: g.hit_many("sms", [{"recipient": "a", "content": "b"}, {"recipient": "a"}]),
            "missing",
        ),
        (lambda g: g.refund("sms", -2, recipient="a", content="b"), "got -2"),
    ],
)
def test_bad_calls_are_refused_and_change_nothing(guard: Guard, call: object, message: str) -> None:
    before = guard.peek("sms", recipient="a", content="b")
    with pytest.raises(ConfigError, match=message):
        call(guard)  # type: ignore[operator]
    after = guard.peek("sms", recipient="a", content="b")
    assert after == before
    assert len(guard.backend) == 0  # type: ignore[arg-type]


def test_a_different_policy_under_a_known_name_is_refused(guard: Guard) -> None:
    guard.add_policy(SMS)  # the same one again: fine
    with pytest.raises(ConfigError, match="already registered"):
        guard.add_policy(Policy("sms", Rule("1/second", by="recipient")))


@pytest.mark.parametrize(
    "rate_for",
    [
        "table",  # TierRates of rates, which a concurrency rule cannot count
        "function",
    ],
)
def test_a_concurrency_rule_refuses_rate_for_at_construction(rate_for: str) -> None:
    """Review: a concurrency rule's tier (``TierRates("plan", {"pro": Rate(4, 60 s)})``, or a
    function's rate) was taken, then dropped at the first lease with a warning about a
    per-key limit "set for rule 'cc'" that nobody set: the pro caller's cap stayed the rule's
    2, silently. ("4 concurrent", the way a concurrency rule's limit is written, did not
    even parse in the table.)"""
    from freqguard import TierRates

    tiers: object = TierRates("plan", {"pro": "4/minute"})
    if rate_for == "function":
        tiers = lambda context: "4/minute"  # noqa: E731
    with pytest.raises(ConfigError, match=r"rate_for.*concurrency rule.*set_limit"):
        Rule("2 concurrent", by="user", lease=60, name="cc", rate_for=tiers)  # type: ignore[arg-type]
