"""Silent no-ops and silent wrong answers in what a user constructs (rules, policies,
guards, leases, refunds, resets, backend URLs), each a failing test of an adversarial
review's finding first (docstrings tell what happened before the fix).

The bar (shared/DESIGN.md, docs/concepts.md): a limit that cannot match, an option that
cannot apply or a value nobody reads is an error at construction, naming the bad value; a
cost that no hit could ever be granted is an error, "not a silent permanent denial"; bad
input gets a ``ConfigError`` (or a TypeError/ValueError naming the argument), never a raw
traceback from deep inside. Memory backend and pinned time only: no I/O."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from freqguard import (
    ConfigError,
    Guard,
    LoggingObserver,
    ManualClock,
    MemoryBackend,
    Policy,
    QuietHours,
    Rule,
    TierRates,
)
from freqguard.backends.urls import parse_url
from tests.conftest import START

#: What a refusal may be: freqguard's own, or Python's for a wrong type (naming the argument).
_NAMED = (ConfigError, TypeError, ValueError)


def _guard(*policies: Policy, prefix: str = "fg", backend: MemoryBackend | None = None) -> Guard:
    return Guard(backend or MemoryBackend(), policies, ManualClock(START), prefix=prefix)


# -- Rule(by=...) ----------------------------------------------------------------------------


@pytest.mark.parametrize("by", [None, 5])
def test_rule_by_that_is_no_name_nor_list_is_a_named_error(by: object) -> None:
    """``Rule("5/minute", by=None)`` (or ``by=5``): raises a raw ``TypeError: 'NoneType'
    object is not iterable`` from ``tuple(by)`` in ``options.dimension_names``, naming
    neither ``by`` nor what it takes. Should be a ConfigError naming ``by``/the value and
    what is allowed (a name, a list of names, or ``()`` for one global cap), as every other
    bad ``by`` is."""
    with pytest.raises(ConfigError, match=rf"dimension|by.*{by!r}"):
        Rule("5/minute", by=by)  # type: ignore[arg-type]


def test_rule_by_bytes_names_the_bytes_not_a_number() -> None:
    """``Rule("5/minute", by=b"user")``: refused, but as ``dimension 117 is not allowed``
    (``tuple(b"user")`` is a tuple of ints): the message names a value the user never
    wrote. Should name ``b'user'`` (bytes: write ``by="user"``)."""
    with pytest.raises(ConfigError, match=r"b'user'"):
        Rule("5/minute", by=b"user")  # type: ignore[arg-type]


def test_rule_by_a_set_is_refused_since_its_order_differs_between_processes() -> None:
    """``Rule("5/minute", by={"user", "ip"})``: accepted, ``by`` taken in the set's
    iteration order, which for strings depends on the process's hash seed
    (PYTHONHASHSEED). The policy's partition (the key's hash tag: the first dimension every
    rule shares, in rule order) and the order of the key's dimensions follow it, so two
    worker processes of one deployment may build different keys for the same context and
    each admit the full limit: a cap silently doubled. Should be a ConfigError naming the
    set (an unordered collection: give a tuple or a list)."""
    with pytest.raises(ConfigError, match=r"set|order"):
        Rule("5/minute", by={"user", "ip"})  # type: ignore[arg-type]


# -- reads= and TierRates ----------------------------------------------------------------------


def test_reads_that_the_tier_table_does_not_read_is_refused() -> None:
    """``Rule("10/minute", by="user", name="api", reads="plan", rate_for=TierRates("tier",
    {"pro": "100/minute"}))``: accepted. The table reads ``tier``; ``plan`` is read by
    nothing, yet hits may now pass ``plan="pro"`` without an error and silently get the base
    rate (the user meant ``TierRates("plan", ...)``). Without a rate_for, a ``reads`` is
    refused ("read by rate_for only, and the rule has none"); with a table, which says what
    it reads, a ``reads`` it does not read should be refused the same way, naming
    ``plan``."""
    with pytest.raises(ConfigError, match="plan"):
        Rule(
            "10/minute",
            by="user",
            name="api",
            reads="plan",
            rate_for=TierRates("tier", {"pro": "100/minute"}),
        )


# -- priorities and quiet hours --------------------------------------------------------------


def test_priorities_that_nothing_refers_to_are_refused() -> None:
    """``Policy("sms", Rule("5/minute", by="user"), priorities=("transactional",
    "marketing"))`` with no rule's ``only``/``caps`` and no quiet hours: accepted. Every
    hit must now name a priority, and the priority changes nothing: an option that cannot
    apply (the user most likely forgot ``only=`` or ``caps=``). Should be a ConfigError
    naming ``priorities`` (no rule's only/caps nor the quiet hours' exempt refers to
    them)."""
    with pytest.raises(ConfigError, match="priorities"):
        Policy("sms", Rule("5/minute", by="user"), priorities=("transactional", "marketing"))


def test_quiet_hours_exempting_every_priority_are_refused() -> None:
    """``Policy("sms", rule, priorities=("transactional",), quiet=QuietHours("21:00",
    "08:00", tz="UTC", exempt=("transactional",)))``: accepted, and since every hit must
    name one of the policy's priorities and every one is exempt, the quiet hours can never
    deny anything: a limit that cannot match (checked here at 23:00 UTC: allowed). Should
    be a ConfigError at construction naming the quiet hours / exempt."""
    rule = Rule("5/minute", by="user", name="per-user")
    quiet = QuietHours("21:00", "08:00", tz="UTC", exempt=("transactional",))
    with pytest.raises(ConfigError, match=r"exempt|quiet"):
        _quiet_night_hit(Policy("sms", rule, priorities=("transactional",), quiet=quiet))


def _quiet_night_hit(policy: Policy) -> bool:
    """Whether a hit at 23:00 UTC, inside the quiet hours, is allowed."""
    night = datetime(2024, 1, 10, 23, 0, tzinfo=timezone.utc).timestamp()
    guard = Guard(MemoryBackend(), [policy], ManualClock(night))
    return guard.hit("sms", user="a", priority="transactional").allowed


# -- costs no hit could ever be granted ------------------------------------------------------


def test_a_cost_above_the_hits_tier_rate_is_an_error_not_a_permanent_denial() -> None:
    """``Rule("10/minute", by="u", name="api", rate_for=TierRates("plan", {"free":
    "2/minute"}))``, then ``guard.hit("api", cost=5, u="a", plan="free")``: denied with
    ``retry_after=60.0``, and denied again an hour later with ``retry_after=60.0`` again:
    no hit of cost 5 can ever pass a 2/minute tier, so the retry_after is a lie and the
    caller retries for ever (``acquire(timeout=100)`` says "the next turn is in 60.000s,
    later than the timeout of 100s allows"). docs/concepts.md: a cost larger than the
    capacity of an enforcing rule "could never be admitted, so it is an error, not a silent
    permanent denial"; the tier is known from the context before the call. Should be the
    ConfigError a cost above the base rate gets ("exceeds the capacity")."""
    policy = Policy(
        "api",
        Rule("10/minute", by="u", name="api", rate_for=TierRates("plan", {"free": "2/minute"})),
    )
    guard = _guard(policy)
    with pytest.raises(ConfigError, match="capacity"):
        guard.hit("api", cost=5, u="a", plan="free")


def test_a_cost_above_the_priority_cap_is_an_error_not_a_permanent_denial() -> None:
    """``Rule("10/minute", by="u", name="api", caps={"low": 2})`` in a policy with
    ``priorities=("low", "high")``, then ``guard.hit("api", cost=5, u="a",
    priority="low")``: denied with ``remaining=10`` and ``retry_after=60.0``, for ever (a
    low hit takes at most 2). Should be a ConfigError naming the capacity, as a cost above
    the rule's own limit is."""
    policy = Policy(
        "api",
        Rule("10/minute", by="u", name="api", caps={"low": 2}),
        priorities=("low", "high"),
    )
    guard = _guard(policy)
    with pytest.raises(ConfigError, match="capacity"):
        guard.hit("api", cost=5, u="a", priority="low")


def test_a_cost_above_a_per_key_limit_is_an_error_not_a_permanent_denial() -> None:
    """``guard.set_limit("api", "api", "2/minute", u="b")`` on a 10/minute rule, then
    ``guard.hit("api", cost=5, u="b")``: denied with ``retry_after=60.0``, and the same
    after any wait: a silent permanent denial whose retry_after is wrong. Should be the
    ConfigError a cost above the rule's capacity gets (the per-key limit is in the reply
    the hit is decided from)."""
    guard = _guard(Policy("api", Rule("10/minute", by="u", name="api")))
    guard.set_limit("api", "api", "2/minute", u="b")
    with pytest.raises(ConfigError, match="capacity"):
        guard.hit("api", cost=5, u="b")


def test_a_tier_that_raises_the_rate_takes_a_cost_past_the_rule_s_own() -> None:
    """10/minute, a tier of 100/minute for plan "pro": a pro hit of cost 50 was refused
    ("exceeds the capacity 10 of rule 'api'"): the check before the call knew only the
    rule's own rate (found beside the review's findings). Admitted; a free one refused."""
    rule = Rule("10/minute", by="u", name="api", rate_for=TierRates("plan", {"pro": "100/minute"}))
    guard = _guard(Policy("api", rule))
    assert guard.hit("api", cost=50, u="a", plan="pro").allowed
    with pytest.raises(ConfigError, match="capacity 10"):
        guard.hit("api", cost=50, u="b", plan="free")


def test_a_per_key_limit_that_raises_the_rate_takes_a_cost_past_the_rule_s_own() -> None:
    """``set_limit(..., "100/minute", u="b")`` on a 10/minute rule, then a hit of cost 50
    for b: refused as exceeding the capacity 10, though b's limit is 100 (found beside the
    review's findings). Admitted; another caller's refused."""
    guard = _guard(Policy("api", Rule("10/minute", by="u", name="api")))
    guard.set_limit("api", "api", "100/minute", u="b")
    assert guard.hit("api", cost=50, u="b").allowed
    with pytest.raises(ConfigError, match="capacity 10"):
        guard.peek("api", cost=50, u="c")


def test_a_rule_for_other_priorities_does_not_bound_this_hits_cost() -> None:
    """``Policy("api", Rule("10/minute", by="u", name="all"), Rule("2/minute", by="u",
    name="low-only", only=["low"]), priorities=("low", "high"))``, then
    ``guard.hit("api", cost=5, u="c", priority="high")``: refused with "cost 5 exceeds the
    capacity 2 of rule 'low-only': no hit of that cost could ever be allowed", which is
    false: the rule applies to low hits only, and a high hit of 5 fits the 10/minute rule.
    A wrong answer. Should be allowed."""
    policy = Policy(
        "api",
        Rule("10/minute", by="u", name="all"),
        Rule("2/minute", by="u", name="low-only", only=["low"]),
        priorities=("low", "high"),
    )
    guard = _guard(policy)
    assert guard.hit("api", cost=5, u="c", priority="high").allowed


# -- Guard and MemoryBackend arguments -------------------------------------------------------


@pytest.mark.parametrize("clock", ["system", 5])
def test_guard_clock_that_is_no_clock_is_refused_at_construction(clock: object) -> None:
    """``Guard(policies=[p], clock="system")`` (or ``clock=5``): accepted; the first
    ``hit`` raises ``AttributeError: 'str' object has no attribute 'now_us'``, far from the
    mistake. Should be a ConfigError/TypeError at construction naming ``clock``."""
    policy = Policy("p", Rule("5/minute", by="u"))
    with pytest.raises(_NAMED, match="clock"):
        Guard(policies=[policy], clock=clock)  # type: ignore[arg-type]


def test_memory_backend_clock_that_is_no_clock_is_refused_at_construction() -> None:
    """``MemoryBackend(clock="x")``: accepted (its repr even shows ``clock='x'``);
    ``Guard(backend)`` then raises ``AttributeError: 'str' object has no attribute
    'now_us'``. Should be a ConfigError/TypeError from ``MemoryBackend`` naming
    ``clock``."""
    with pytest.raises(_NAMED, match="clock"):
        MemoryBackend(clock="x")  # type: ignore[arg-type]


def test_one_observer_where_a_list_belongs_is_a_named_error() -> None:
    """``Guard(observers=LoggingObserver())``: raises the raw ``TypeError:
    'LoggingObserver' object is not iterable``, naming neither the argument nor the fix;
    ``policies=policy`` gets "policies takes a list of policies: pass policies=[policy]".
    Should name ``observers`` and the fix (``observers=[...]``)."""
    with pytest.raises(_NAMED, match="observers"):
        Guard(observers=LoggingObserver())  # type: ignore[arg-type]


# -- refunds, resets, leases -----------------------------------------------------------------


def test_a_decision_refunded_by_a_guard_of_another_prefix_is_refused() -> None:
    """Two guards on one backend, prefixes ``"a"`` and ``"b"`` (two apps, or two tenants'
    namespaces), the same policy. ``b`` is at its limit for user z; ``d = a.hit(...)``;
    then ``b.refund(d)``: accepted. It gives back one of *b*'s units (b's remaining goes 0
    -> 1, a's stays 4) and spends the receipt, so ``a.refund(d)`` is then refused as
    "already refunded": the unit a took is never given back, and b admits one over its
    limit. Should be a ConfigError naming the prefix the decision was made under."""
    policy = Policy("sms", Rule("5/minute", by="user", name="u"))
    backend, clock = MemoryBackend(), ManualClock(START)
    first = Guard(backend, [policy], clock, prefix="a")
    second = Guard(backend, [policy], clock, prefix="b")
    for _ in range(5):
        second.hit("sms", user="z")
    decision = first.hit("sms", user="z")
    with pytest.raises(ConfigError, match="prefix"):
        second.refund(decision)


def test_reset_of_a_rule_that_is_not_the_policys_is_refused() -> None:
    """``guard.reset("sms", rules=[Rule("7/minute", by="user", name="u")], user="a")`` where
    the policy's rule ``u`` is 5/minute: accepted, and the policy's rule ``u`` is reset (its
    id matched). ``set_limit`` given the same foreign Rule refuses it ("policy 'sms' has no
    rule Rule('7 per 60 seconds', ...)"). Should be refused the same way: a Rule object
    that is not the policy's names no rule of it."""
    guard = _guard(Policy("sms", Rule("5/minute", by="user", name="u")))
    with pytest.raises(ConfigError, match="no rule"):
        guard.reset("sms", rules=[Rule("7/minute", by="user", name="u")], user="a")


def test_a_lease_of_a_policy_without_a_concurrency_rule_is_refused() -> None:
    """``with guard.lease("sms", user="a"):`` on a policy of one 5/minute rule (no
    ``"N concurrent"`` rule): accepted; each block takes a rate unit and its end gives
    nothing back, so after five blocks the sixth is denied, though no block is held. The
    user believes they cap calls in flight; nothing caps them. ``hit`` on a leased policy
    is refused by name; ``lease``/``take_lease`` on an unleased one should be too, naming
    the policy (it has no concurrency rule)."""
    guard = _guard(Policy("sms", Rule("5/minute", by="user", name="u")))
    with pytest.raises(ConfigError, match="concurren"):
        _blocks(guard, 6)  # now: [True] * 5 + [False], none of them held at the time


def _blocks(guard: Guard, count: int) -> list[bool]:
    """Whether each of ``count`` lease blocks, one after the other, was allowed."""
    allowed = []
    for _ in range(count):
        with guard.lease("sms", user="a") as held:
            allowed.append(held.allowed)
    return allowed


def test_release_of_a_decision_without_leases_is_a_named_error() -> None:
    """``guard.release(guard.hit("sms", user="a"))`` on a policy without a concurrency
    rule: accepted. It gives nothing back, spends the decision's receipt (a later
    ``guard.refund(decision)``, the call meant, is refused as "already refunded or
    released", so the unit is never given back), and returns a Decision whose
    ``remaining`` (and repr) raise the raw ``TypeError: cannot unpack non-iterable NoneType
    object``. Should be a ConfigError saying the decision holds no leases
    (``refund(decision)`` gives back its rate units), its receipt left unspent."""
    guard = _guard(Policy("sms", Rule("5/minute", by="user", name="u")))
    decision = guard.hit("sms", user="a")
    with pytest.raises(ConfigError, match="lease"):
        guard.release(decision)


# -- backend URLs ----------------------------------------------------------------------------


def test_url_ssl_cert_reqs_outside_redispys_words_is_refused() -> None:
    """``rediss://host:6380?ssl_cert_reqs=requierd``: accepted by ``parse_url`` (and
    ``backend_from_url``); redis-py raises "Invalid SSL Certificate Requirements Flag" only
    when the first connection is made, so the first hit fails as a store failure (answered
    by ``on_error``: with "allow", silently unlimited). The module's promise: "every part of
    a URL is checked where it is given ... never a failure at the first call". Should be a
    ConfigError naming the option and its words (none, optional, required)."""
    with pytest.raises(ConfigError, match="ssl_cert_reqs"):
        parse_url("rediss://127.0.0.1:6380?ssl_cert_reqs=requierd")
