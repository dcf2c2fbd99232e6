"""A second new user's first hour (Flask-Limiter, slowapi and limits behind them): the
policy they forgot to register, named with the way to register it, wherever it is named."""

from __future__ import annotations

import pytest

from freqguard import AsyncGuard, ConfigError, Guard, MemoryBackend, Policy, Rule, capped


def test_a_hit_on_a_policy_never_registered_says_how_to_register_it() -> None:
    """``Guard().hit("sms", ...)`` said "unknown policy 'sms' (registered: none)": true, and
    no word of where a policy is registered."""
    guard = Guard(MemoryBackend())
    with pytest.raises(ConfigError, match=r"unknown policy 'sms' .*register it.*add_policy"):
        guard.hit("sms", recipient="a")
    guard.add_policy(Policy("email", Rule("1/second", by="to")))
    with pytest.raises(ConfigError, match=r"registered: email\).*register it.*add_policy"):
        guard.peek("sms", recipient="a")


def test_a_mistyped_name_keeps_its_guess_alone() -> None:
    """A typo of a registered name is answered by the name meant, not by how to register."""
    guard = Guard(MemoryBackend(), [Policy("sms", Rule("1/second", by="recipient"))])
    with pytest.raises(ConfigError) as caught:
        guard.hit("smss", recipient="a")
    assert "did you mean 'sms'?" in str(caught.value)
    assert "add_policy" not in str(caught.value)


def test_capped_on_a_policy_never_registered_says_how_to_register_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``@capped("sms", key=...)`` before any ``configure(policies=[...])``: "'sms' is neither
    a rate nor a registered policy (registered: none)" named neither ``configure`` nor
    ``guard=``, which the docs say is the fix. (A default guard of its own: another test's
    in the same process, holding ``sms2``, made it "did you mean 'sms2'?".)"""
    import freqguard.decorators.defaults as defaults

    monkeypatch.setattr(defaults, "_current", [])  # a fresh default guard, put back after
    with pytest.raises(ConfigError, match=r"'sms' is neither.*configure\(policies="):
        capped("sms", key="recipient")
    guard = Guard(MemoryBackend())
    with pytest.raises(ConfigError, match=r"'sms' is neither.*add_policy"):
        capped("sms", key="recipient", guard=guard)
    with pytest.raises(ConfigError, match=r"'sms' is neither.*add_policy"):
        capped("sms", key="recipient", guard=AsyncGuard(MemoryBackend()))


def test_capped_on_a_mistyped_policy_gets_the_one_meant() -> None:
    guard = Guard(MemoryBackend(), [Policy("sms", Rule("1/second", by="recipient"))])
    with pytest.raises(ConfigError, match=r"'smss' is neither.*did you mean 'sms'\?"):
        capped("smss", key="recipient", guard=guard)


def test_a_per_key_limit_given_the_whole_context_says_what_to_give() -> None:
    """``set_limit("sms", "rcpt-1d", ..., recipient=..., content=...)``, the context a hit
    takes: "got content, recipient" named what was given, not what to give."""
    guard = Guard(
        MemoryBackend(),
        [Policy("sms", Rule("50/day", by="recipient", name="rcpt-1d"), Rule("1/second"))],
    )
    with pytest.raises(ConfigError, match=r"got content, recipient: give recipient=\.\.\. alone"):
        guard.set_limit("sms", "rcpt-1d", "100/day", recipient="a", content="x")
    with pytest.raises(ConfigError, match=r"got recipient: give no context"):
        guard.set_limit("sms", "sl.1.1s", "2/second", recipient="a")
