"""An adversarial review of 2425d75 (acquire's keywords, a Decision's peer attributes,
options beside a URL, weeks and a quota's burst in the grammar, a with-block on a policy of
no dimensions) and d26d76c (the deny cache keeps a tier's denials, Unfit told and pickled,
quiet hours bound only when they deny, ``ManualClock.advance`` of a Fraction or Decimal).
Each finding a failing test; memory backend, pinned time, no I/O."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from fractions import Fraction

import pytest

from freqguard import (
    ConfigError,
    Decision,
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
from freqguard.headers import combined_headers
from freqguard.rates import parse_rates
from tests.conftest import START

#: 22:00 UTC on a Monday: inside quiet hours of 21:00 to 08:00 (10 h to their end)
_NIGHT = datetime(2026, 1, 5, 22, 0, tzinfo=timezone.utc).timestamp()


# -- d26d76c: the deny cache and a per-key limit at a tier's numbers -----------------------------


def _tiered(deny_cache: int) -> tuple[Guard, ManualClock]:
    clock = ManualClock(START)
    rule = Rule("100/minute", by="u", name="r", rate_for=TierRates("plan", {"free": "5/minute"}))
    return Guard(MemoryBackend(clock), [Policy("t", rule)], clock, deny_cache=deny_cache), clock


def _downgraded_for_ten_seconds(guard: Guard, clock: ManualClock) -> Decision:
    """A free caller met once (its tier compiled), then a pro caller given a per-key limit of
    the free tier's rate for 10 s, denied at it, and asked again 11 s later."""
    assert guard.hit("t", u="ann", plan="free").allowed
    guard.set_limit("t", "r", "5/minute", ttl=10, u="bob")
    assert [guard.hit("t", u="bob", plan="pro").allowed for _ in range(6)] == [True] * 5 + [False]
    clock.advance(11)
    return guard.hit("t", u="bob", plan="pro")


def test_a_ttl_limit_at_a_tier_s_numbers_is_not_a_tier_to_the_deny_cache() -> None:
    """``Policy("t", Rule("100/minute", by="u", name="r", rate_for=TierRates("plan",
    {"free": "5/minute"})))``, ``Guard(..., deny_cache=100)``, time pinned at START. A free
    caller hits once (its tier's ``KeyLimit`` enters ``Tiers.limits``). A pro caller is
    given ``set_limit("t", "r", "5/minute", ttl=10, u="bob")`` (a ten-second downgrade),
    hits 5 times, and the sixth is denied by the store (``retry_after`` 60 s). 11 s later
    (the limit lapsed: bob is back at 100/minute, 5 used), his hit is answered denied by the
    deny cache (``source="deny-cache"``, retry in 49 s). ``script.limits.apply`` carries a
    stored limit with its expiry set to 0, so it equals the free tier's ``KeyLimit``, and
    ``PolicyPlan.lapses`` takes it for a tier's, which never lapses. The same guard without a
    deny cache admits the hit (asserted first). Expected: allowed, as without the cache."""
    bare, bare_clock = _tiered(0)
    assert _downgraded_for_ten_seconds(bare, bare_clock).allowed
    guard, clock = _tiered(100)
    decision = _downgraded_for_ten_seconds(guard, clock)
    assert (decision.allowed, decision.source) == (True, "backend"), decision


# -- 2425d75: a quota string with a burst ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "rate"),
    [("5/m burst 10", "5/minute"), ("20 per hour burst 40", "20/hour")],
)
def test_a_quota_string_with_a_burst_names_its_own_rate(text: str, rate: str) -> None:
    """2425d75: throttled-py's ``"100/s burst 200"`` is refused naming ``burst=``
    (``rates.parse_rates``). For ``Rule("5/m burst 10")`` the message says "a burst is a
    bucket rule's burst=: Rule('100/second', strategy='gcra', burst=10)": the rate written
    into the advice is the literal of the docstring's example, whatever the text said, so a
    user copying it gets 100 a second where they asked for 5 a minute. Expected: the advice
    names the text's own rate (``Rule('5/minute', ...)``, ``Rule('20/hour', ...)``) and
    never ``100/second``."""
    with pytest.raises(ConfigError) as refused:
        parse_rates(text)
    message = str(refused.value)
    assert "burst=" in message, message  # the advice is given (the commit's part)
    assert "100/second" not in message, message
    assert re.search(rf"Rule\('{re.escape(rate)}'", message), message


def test_a_dotted_path_holding_burst_keeps_its_own_advice() -> None:
    """django-ratelimit's ``rate="myapp.ratelimits.burst_rate"`` (a dotted path to a
    function) is refused naming its way: "a dotted path to a function is not taken: give a
    rate, or a rule's rate_for" (``rates._DOTTED``; ``myapp.rates.get`` gets it). 2425d75's
    burst advice is chosen by ``"burst" in normalized`` after it and replaces it: the
    message says "a burst is a bucket rule's burst=: Rule('100/second', strategy='gcra',
    burst=_rate)". Expected: the dotted path's advice, and no ``burst=`` advice."""
    with pytest.raises(ConfigError) as refused:
        parse_rates("myapp.ratelimits.burst_rate")
    message = str(refused.value)
    assert "a dotted path to a function is not taken" in message, message
    assert "burst=" not in message, message


# -- 2425d75: a with-block refused for want of a context -------------------------------------------


def test_a_with_block_refused_for_want_of_a_context_registers_no_policy() -> None:
    """``guard = Guard(MemoryBackend(), [Policy("send", Rule("1/minute"))])``; ``with
    capped("5/minute", guard=guard): ...`` (rates, no ``context=``) is still refused, "as a
    context manager, capped(...) needs context={dimension: value}". 2425d75 moved that
    check after ``_policy_for``, which registers the block's implicit policy first: the
    refused block leaves ``capped.block.global.<digest>`` on the guard (listed by
    ``guard.policies``, the service's ``/v1/policies``, ``freqguard inspect``), where before
    the refusal came before anything was registered. Expected: the guard's policies as they
    were: ``{"send"}``."""
    guard = Guard(MemoryBackend(ManualClock(START)), [Policy("send", Rule("1/minute"))])
    with pytest.raises(ConfigError, match="needs context="), capped("5/minute", guard=guard):
        pass
    assert set(guard.policies) == {"send"}


# -- d26d76c: ManualClock.advance of a number float() cannot hold ----------------------------------


@pytest.mark.parametrize("seconds", [10**400, Fraction(10**400, 3)], ids=["int", "Fraction"])
def test_manual_clock_advance_refuses_a_number_too_large_as_its_own_error(seconds: object) -> None:
    """d26d76c: ``ManualClock.advance`` checks ``0 <= float(seconds) < inf`` in a ``try``
    catching ``TypeError`` and ``ValueError`` and raises ``ConfigError`` ("takes seconds >=
    0 (or a timedelta)") for what fails; ``advance(Decimal("1e400"))`` is that ConfigError
    (its float is inf). ``advance(10**400)`` and ``advance(Fraction(10**400, 3))`` raise a
    raw ``OverflowError: int too large to convert to float`` (``integer division result too
    large for a float``) instead; before the commit an int was compared as it is, and
    ``advance(10**400)`` moved the clock. Expected: a ConfigError naming the value, as for
    ``Decimal("1e400")``, or the clock moved; no OverflowError."""
    clock = ManualClock(0)
    try:
        clock.advance(seconds)  # type: ignore[arg-type]
    except ConfigError:
        return
    except OverflowError as error:
        pytest.fail(f"OverflowError: {error}")
    assert clock.now_us() > 0


# -- d26d76c: quiet hours that deny, beside another decision -------------------------------------


def test_combined_headers_of_a_quiet_hours_denial_name_the_denial() -> None:
    """``combined_headers`` (Flask's ``_after``, Django's ``with_headers``: a request that
    met several decisions) keeps "the decision whose rule is nearest exhaustion
    (:func:`binding_rule` over all of them: a denial first)". At 22:00 UTC: ``Policy("a",
    Rule("100/minute", by="u", name="ra"), quiet=QuietHours("21:00", "08:00", tz="UTC"))``
    denies (quiet hours, retry 36000 s); ``Policy("b", Rule("10/minute", by="u",
    name="rb"))`` admits its 8th hit (2 left). ``combined_headers([a, b])`` is
    ``RateLimit: "rb";r=2;t=60`` with no ``Retry-After`` (``draft6``: ``RateLimit-Remaining:
    2``): ``binding_rule`` shows a quiet denial by the narrowest real rule of all the entries
    (d26d76c: ``others`` from ``counted``, every decision's), here b's, so the headers are
    those of the allowed decision b on a response refused by a. Expected: the headers name
    the denial: ``Retry-After: 36000`` and ``r=0``."""
    clock = ManualClock(_NIGHT)
    quiet = QuietHours("21:00", "08:00", tz="UTC")
    a = Policy("a", Rule("100/minute", by="u", name="ra"), quiet=quiet)
    b = Policy("b", Rule("10/minute", by="u", name="rb"))
    guard = Guard(MemoryBackend(), [a, b], clock)
    for _ in range(7):
        guard.hit("b", u="x")
    denied, admitted = guard.hit("a", u="x"), guard.hit("b", u="x")
    assert (denied.allowed, admitted.allowed, denied.retry_after) == (False, True, 36000.0)
    headers = combined_headers([denied, admitted], "ietf")
    assert headers.get("Retry-After") == "36000", headers
    assert ";r=0;" in headers["RateLimit"], headers


# -- 2425d75: an option beside the URL, sent to a query that refuses it ----------------------------


@pytest.mark.parametrize("option", ["wrap_exceptions", "service_name", "use_replicas"])
def test_an_option_beside_the_url_is_not_sent_to_a_query_that_refuses_it(option: str) -> None:
    """2425d75: ``backend_from_url(url, **options)`` (limits' ``storage_from_string(uri,
    **options)``) refuses each option "naming where it goes": for any name but
    ``key_prefix``, "an option goes in the URL's query: ?<name>=...". limits' own storage
    parameters (``RedisStorage(uri, wrap_exceptions=False)``, ``RedisSentinelStorage(uri,
    service_name=None, use_replicas=True)``, limits 5.8) are no query option here:
    ``parse_url("redis://127.0.0.1:1/0?wrap_exceptions=true")`` is refused "unknown option
    'wrap_exceptions'". The user is sent from one refusal to another. Expected: the message
    names no ``?<name>=`` that the URL refuses (the query option named parses)."""
    with pytest.raises(ConfigError) as refused:
        backend_from_url("redis://127.0.0.1:1/0", **{option: True})  # type: ignore[arg-type]
    message = str(refused.value)
    if f"?{option}=" in message:  # the way named must be one
        try:
            parse_url(f"redis://127.0.0.1:1/0?{option}=true")
        except ConfigError as error:
            pytest.fail(f"named {message!r}; the URL so written: {error}")


# -- 2425d75: a store's decision pays Decision.__getattr__ for its source -------------------------


def test_a_store_decision_s_source_is_read_without_decision_getattr() -> None:
    """``Decision.source`` reads ``getattr(self, "_source", "backend")``, "unset on the hot
    path: a decision made by the store never pays for the attribute". 2425d75 gives Decision
    a ``__getattr__`` (a peer's ``limited``, ``state``, ``reset_time`` named): Python calls
    it for every unset slot, so each ``decision.source`` of a store's decision (read per
    denial by ``Denials.remember``, per decision by the Prometheus observer, the service's
    history and schema) now runs it, formatting a message and raising an AttributeError
    with ``obj=``: about 1.2 µs a read where it was 0.4 µs (timeit on this machine, 200,000
    reads). Counted here: ``Decision.__getattr__`` wrapped, a hit read for its source.
    Expected: 0 calls."""
    assert "__getattr__" not in vars(Decision)  # a peer's names are properties of its own
    guard = Guard(MemoryBackend(ManualClock(START)), [Policy("p", Rule("5/minute", by="u"))])
    decision = guard.hit("p", u="a")
    assert decision.source == "backend"
    with pytest.raises(AttributeError, match="allowed"):
        decision.limited  # type: ignore[attr-defined]  # noqa: B018
