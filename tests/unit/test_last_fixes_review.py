"""An adversarial review of 2425d75, d26d76c and 3fe6a62 (the deny cache's rule for a
denial at another rate, a refused with-block, ``ManualClock.advance``'s refusals, quiet
hours shown without their pseudo-rule's billion, burst advice, an option beside a URL).
Each finding a failing test; memory
backend, pinned time, no I/O."""

from __future__ import annotations

import pytest

from freqguard import (
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    QuietHours,
    Rule,
    TierRates,
    backend_from_url,
    capped,
)
from freqguard.backends.urls import parse_url
from freqguard.rates import parse_rates
from tests.conftest import START
from tests.unit.test_peer_fixes_second_review import _NIGHT

# -- 3fe6a62: the deny cache and a tier's denial, by the guard's path to the store ----------------


def _free_tier_denied_twice(on_error: str) -> list[str]:
    """A free caller's four hits on a tiered rule of 2/minute for the free tier: the
    sources of the last two (both denied)."""
    clock = ManualClock(START)
    rule = Rule("100/minute", by="u", name="r", rate_for=TierRates("plan", {"free": "2/minute"}))
    policy = Policy("t", rule, on_error=on_error)
    guard = Guard(MemoryBackend(clock), [policy], clock, deny_cache=100)
    decisions = [guard.hit("t", u="ann", plan="free") for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, False, False]
    return [d.source for d in decisions[2:]]


def test_a_tier_s_denial_is_remembered_whatever_the_policy_s_on_error() -> None:
    """``Policy("t", Rule("100/minute", by="u", name="r", rate_for=TierRates("plan",
    {"free": "2/minute"})), on_error=...)``, ``Guard(MemoryBackend(clock), ..., clock,
    deny_cache=100)``, time pinned at START, no per-key limit anywhere. A free caller hits
    four times: two admitted, the third denied by the store at the tier's rate (retry 60
    s), the fourth, at the same instant, answered by the deny cache (``source ==
    "deny-cache"``) with ``on_error="raise"`` (asserted first). With ``on_error="allow"``
    (or ``"deny"``) the hit is not sent as a lone call,
    so ``Hits.hit_done`` gets a Decision, passes ``stored=None`` to ``Denials.remember``,
    and a rule at another rate than its own with "not known" limits is never remembered:
    the fourth hit goes to the store again. Design note 107 names one case of "not
    known": "a denial made of several parts' replies"; this policy has one part and no
    per-key limit. Expected: the fourth hit answered by the deny cache, as with
    ``on_error="raise"``."""
    assert _free_tier_denied_twice("raise") == ["backend", "deny-cache"]
    assert _free_tier_denied_twice("allow") == ["backend", "deny-cache"]


# -- 3fe6a62: a with-block refused registers nothing ----------------------------------------------


def test_a_with_block_refused_for_its_concurrency_rule_registers_no_policy() -> None:
    """``guard = Guard(MemoryBackend(...), [Policy("send", Rule("1/minute"))])``; ``with
    capped(Rule("1 concurrent", lease=30), guard=guard, context={"u": "a"}, name="x"):``
    is refused ("policy 'x' counts leases: take one with guard.lease('x', ...)"). 3fe6a62
    says "a refused with-block registers nothing" (and checks the missing context before
    ``_policy_for``), but ``refuse_block`` still runs after ``_policy_for`` registered
    ``x``: the refused block leaves a concurrency policy ``x`` on the guard, and a later
    ``with capped("5/minute", guard=guard, context={"u": "a"}, name="x")`` is refused "a
    different policy named 'x' is already registered". Expected: the guard's policies as
    they were, ``{"send"}``, and the second block admitted."""
    guard = Guard(MemoryBackend(ManualClock(START)), [Policy("send", Rule("1/minute"))])
    held = capped(Rule("1 concurrent", lease=30), guard=guard, context={"u": "a"}, name="x")
    with pytest.raises(ConfigError, match="counts leases"), held:
        pass
    assert set(guard.policies) == {"send"}
    with capped("5/minute", guard=guard, context={"u": "a"}, name="x") as decision:
        assert decision.allowed


# -- d26d76c/3fe6a62: ManualClock.advance of a float whose microseconds overflow ------------------


def test_manual_clock_advance_refuses_a_float_too_large_for_microseconds() -> None:
    """3fe6a62: "advance refuses an overflow": ``ManualClock.advance`` now catches
    ``OverflowError`` from ``float(seconds)`` and raises ``ConfigError`` ("takes seconds >=
    0 (or a timedelta)"). ``advance(1e303)`` passes that check (a finite float) and then
    ``seconds_to_us`` computes ``round(1e303 * 1_000_000)``, ``round(inf)``: a raw
    ``OverflowError: cannot convert float infinity to integer``, the clock unmoved.
    ``advance(10**303)`` (an int) moves the clock by that much. Expected: the clock moved
    (as for the int), or the ConfigError naming the value; no OverflowError."""
    clock = ManualClock(0)
    try:
        clock.advance(1e303)
    except ConfigError:
        return
    except OverflowError as error:
        pytest.fail(f"advance(1e303) raised OverflowError: {error}")
    assert clock.now_us() >= 10**308


# -- d26d76c: quiet hours show no billion anywhere ------------------------------------------------


@pytest.mark.parametrize("at", [_NIGHT, _NIGHT - 10 * 3600], ids=["quiet", "noon"])
def test_a_decision_s_rule_states_show_no_billion_for_quiet_hours(at: float) -> None:
    """d26d76c: "quiet hours show no billion anywhere (headers beside shadow rules, the
    service, limit show)"; docs/messaging.md: the pseudo-rule "has no rate". ``Policy("a",
    Rule("100/minute", by="u", name="ra"), quiet=QuietHours("21:00", "08:00", tz="UTC"))``,
    one hit at 22:00 UTC (denied by quiet hours) and at 12:00 UTC (admitted).
    ``decision.rules`` ("one RuleState per rule of the policy", the documented way to read
    every rule's numbers) holds ``RuleState(rule=Rule(quiet=..., name='quiet-hours'),
    capacity=1000000000, remaining=1000000000)`` at noon (``remaining=0`` at night): the
    made-up billion a day the headers, the service's schema and ``freqguard limit show``
    now leave out. Expected: no RuleState with a capacity or remaining of 10^9."""
    clock = ManualClock(at)
    quiet = QuietHours("21:00", "08:00", tz="UTC")
    policy = Policy("a", Rule("100/minute", by="u", name="ra"), quiet=quiet)
    guard = Guard(MemoryBackend(), [policy], clock)
    decision = guard.hit("a", u="x")
    shown = [(s.rule.id, s.capacity, s.remaining) for s in decision.rules]
    assert all(capacity < 10**9 and remaining < 10**9 for _, capacity, remaining in shown), shown


# -- 3fe6a62: burst advice for a rate among several -----------------------------------------------


@pytest.mark.parametrize(
    "text", ["100/s burst 200; 5/m", "5/m; 100/s burst 200", "100/s burst 200, 5000/h"]
)
def test_burst_advice_names_the_bursting_rate_among_several(text: str) -> None:
    """3fe6a62: ``parse_rates`` names "the text's rate" for throttled-py's ``"100/s burst
    200"``: "a burst is a bucket rule's burst=: Rule('100/second', strategy='gcra',
    burst=200)". The grammar joins several rates with ``;``, ``,`` or ``|``; the advice
    splits the whole text at ``" burst"`` instead: ``"100/s burst 200; 5/m"`` is told
    ``Rule('100/second', strategy='gcra', burst=200; 5/m)`` (no Python),
    ``"5/m; 100/s burst 200"`` is told ``Rule('5/m; 100/s', strategy='gcra', burst=200)``
    (a Rule of two rates, which ``Rule`` refuses), ``"100/s burst 200, 5000/h"`` is told
    ``burst=200, 5000/h``. Expected: the advice names ``Rule('100/second',
    strategy='gcra', burst=200)``, the bursting rate's own."""
    with pytest.raises(ConfigError) as refused:
        parse_rates(text)
    assert "Rule('100/second', strategy='gcra', burst=200)" in str(refused.value), str(
        refused.value
    )


# -- 3fe6a62: an option beside a URL, named where the URL refuses it ------------------------------


def test_a_db_beside_a_url_with_a_db_is_not_sent_to_the_query() -> None:
    """3fe6a62's ``_beside``: ``backend_from_url(url, **options)`` names "where it goes":
    for a name in ``QUERY_OPTIONS``, "an option goes in the URL's query: ?<name>=...".
    ``backend_from_url("redis://127.0.0.1:1/0", db=1)`` (limits' ``storage_from_string(uri,
    db=1)``) is told ``?db=...``; the URL so written, ``redis://127.0.0.1:1/0?db=1``, is
    refused "db is given twice, as the path and ?db=". Expected: the message names no
    ``?db=`` that this URL refuses (the URL's path, ``redis://127.0.0.1:1/1``, is the
    way)."""
    url = "redis://127.0.0.1:1/0"
    with pytest.raises(ConfigError) as refused:
        backend_from_url(url, db=1)  # type: ignore[arg-type]
    message = str(refused.value)
    if "?db=" in message:
        try:
            parse_url(f"{url}?db=1")
        except ConfigError as error:
            pytest.fail(f"named {message!r}; the URL so written: {error}")
