"""A limits and throttled-py user porting code by docs/coming-from/limits.md and
docs/coming-from/throttled-py.md (a review's run): each test is an idiom the pages map (or
leave out) that did not give what the page says, or failed without naming freqguard's way.
The peers run beside freqguard on one pinned clock (limits' memory storage reads
``time.time``, throttled-py ``throttled.utils``; both patched), as in the pages' own tests.
"""

from __future__ import annotations

import asyncio
import re
import types
from pathlib import Path
from typing import Any

import limits.aio.storage.memory
import limits.storage.memory
import pytest
from limits import parse, storage, strategies

from freqguard import (
    CapExceeded,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
    backend_from_url,
    capped,
)
from freqguard.backends.urls import parse_url
from tests.conftest import START

throttled = pytest.importorskip("throttled", reason="throttled-py is a dev dependency")
from throttled import MemoryStore, Throttled, per_min, per_sec  # noqa: E402
from throttled.exceptions import LimitedError  # noqa: E402
from throttled.store.redis import RedisStoreBackend  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent.parent
LIMITS_PAGE = ROOT / "docs" / "coming-from" / "limits.md"
THROTTLED_PAGE = ROOT / "docs" / "coming-from" / "throttled-py.md"


def _row(page: Path, start: str) -> str:
    [row] = [line for line in page.read_text().splitlines() if line.startswith(start)]
    return row


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    """One pinned clock for limits, throttled-py and freqguard."""
    manual = ManualClock(START)
    monkeypatch.setattr(limits.storage.memory, "time", types.SimpleNamespace(time=manual.now))
    aio_time = types.SimpleNamespace(time=manual.now)
    monkeypatch.setattr(limits.aio.storage.memory, "time", aio_time)
    utils = throttled.utils
    monkeypatch.setattr(utils, "now_sec", lambda: int(manual.now()))
    monkeypatch.setattr(utils, "now_ms", lambda: int(manual.now() * 1000))
    monkeypatch.setattr(utils, "now_mono_f", manual.now)
    waits = types.SimpleNamespace(sleep=manual.advance, time=manual.now)
    monkeypatch.setattr(throttled.throttled, "time", waits)
    return manual


def _guard(clock: ManualClock, rate: str, strategy: str = "sliding-log", **rule: Any) -> Guard:
    policy = Policy("api", Rule(rate, by="user", strategy=strategy, **rule))
    return Guard(MemoryBackend(clock), [policy], clock=clock)


# -- throttled-py ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("using", "strategy"),
    [("gcra", "gcra"), ("fixed_window", "fixed-window"), ("token_bucket", "token-bucket")],
)
def test_their_peek_at_the_limit_says_another_retry_after(
    clock: ManualClock, using: str, strategy: str
) -> None:
    """throttled-py.md:40: ``peek(key)``: ``remaining``, ``retry_after`` | ``guard.peek``
    | "the same numbers; neither counts". Run at the limit (5 hits of ``per_min(5)`` at 0 s
    and 1 s, peeked at 1 s), their peek's ``retry_after`` is not the wait: gcra's says 1.0 s
    (``|B*T - (tat - now)|``), the fixed window's and the token bucket's 0, where the very
    next ``limit()`` is told 11 s, 39 s, 12 s; freqguard's peek says the wait (11, 39, 11).
    The page's test (``test_peek``) peeks only with room left, where both say 0. Expected:
    the row says their peek's retry_after differs at the limit (freqguard's is the wait)."""
    theirs = Throttled(key="u", using=using, quota=per_min(5), store=MemoryStore())
    ours = _guard(clock, "5/minute", strategy)
    for at in (0.0, 0.0, 0.0, 1.0, 1.0):
        clock.set(START + at)
        assert not theirs.limit("u").limited
        assert ours.hit("api", user="u").allowed
    peeked, decided = theirs.peek("u").retry_after, ours.peek("api", user="u").retry_after
    told = theirs.limit("u").state.retry_after  # the wait their next hit is told
    assert ours.hit("api", user="u").retry_after == decided == pytest.approx(told, abs=1.0)
    if peeked != decided:
        row = _row(THROTTLED_PAGE, "| `peek(key)`")
        assert "differs" in row, row


def test_their_bucket_at_a_quota_per_second_refills_in_whole_seconds(clock: ManualClock) -> None:
    """throttled-py.md:36: ``using="token_bucket"`` | ``strategy="token-bucket"`` | "the
    same admissions on hits that line up with whole refills". At ``per_sec(5)`` a token
    comes every 200 ms; after a burst of 5, hits at 0.2, 0.4, 0.6 and 0.8 s each come on a
    whole refill: freqguard admits all 4, their bucket none (it reads the time in whole
    seconds, ``now_sec``, and refills nothing within a second): 5 of 9 there, 9 here.
    Expected: the row says that their bucket counts time in whole seconds (so at a quota per
    second hits on the refills' beat are denied there)."""
    theirs = Throttled(key="u", using="token_bucket", quota=per_sec(5), store=MemoryStore())
    ours = _guard(clock, "5/second", "token-bucket")
    got_theirs, got_ours = [], []
    for at in (0.0,) * 5 + (0.2, 0.4, 0.6, 0.8):
        clock.set(START + at)
        got_theirs.append(not theirs.limit("u").limited)
        got_ours.append(ours.hit("api", user="u").allowed)
    assert got_ours == [True] * 9
    if got_theirs != got_ours:
        assert got_theirs == [True] * 5 + [False] * 4
        row = _row(THROTTLED_PAGE, '| `using="token_bucket"`')
        assert "whole second" in row, row


@pytest.mark.parametrize("form", ["100/s burst 200", "100 per second burst 200"])
def test_their_quota_string_with_a_burst_names_burst(form: str) -> None:
    """throttled-py.md:44: ``quota="5/s"``, ... | "the same strings in ``Rule(...)``".
    throttled-py's quota grammar takes a burst in the string, ``Throttled(quota="100/s burst
    200")`` (its docstring's own example); ``Rule("100/s burst 200")`` is refused with the
    generic "cannot parse rate ... expected 'N per M unit'", which names no burst, where a
    ``Quota`` object with a burst is refused naming ``burst=`` and ``strategy='gcra'``
    (``test_a_quota_is_refused_naming_its_rate_string``). Expected: the error names the
    rate and ``burst=200`` to write."""
    quota = Throttled(key="u", quota=form, store=MemoryStore()).limiter.quota
    assert (quota.get_limit(), quota.get_period_sec(), quota.burst) == (100, 1, 200)
    with pytest.raises(ConfigError) as refused:
        Rule(form)
    assert "burst=200" in str(refused.value), str(refused.value)


@pytest.mark.parametrize(("text", "limit"), [("1/w", 1), ("2/wk", 2), ("3/wks", 3)])
def test_their_week_units_read_as_a_week(text: str, limit: int) -> None:
    """throttled-py.md:44: their quota strings are "the same strings in ``Rule(...)``", "the
    same rates". throttled-py reads ``w``, ``wk`` and ``wks`` as a week (as it reads ``s``,
    ``m``, ``h``, ``d``, ``sec``, ``min``, ``hr``, which freqguard takes); freqguard has the
    week (``"3/week"``) but refuses these ("cannot parse rate '1/w'"). Expected: the same
    rate, 7 days."""
    quota = Throttled(key="u", quota=text, store=MemoryStore()).limiter.quota
    assert (quota.get_limit(), quota.get_period_sec()) == (limit, 7 * 86400)
    rate = Rule(text).rate
    assert (rate.limit, rate.window_seconds) == (limit, 7 * 86400)


def test_their_with_block_on_a_global_key(clock: ManualClock) -> None:
    """throttled-py's context manager, ``with Throttled(key="send", quota=per_min(1)):``,
    runs the block or raises LimitedError. No row of throttled-py.md maps it; the decorator's
    row maps ``@Throttled(key=..., quota=...)`` to ``@capped(policy, guard=...)`` on a policy
    of no dimensions, and ``capped``'s docstring says it is also a ``with`` block. ``with
    capped("send", guard=guard):`` on that policy raises ``ConfigError: as a context
    manager, capped(...) needs context={dimension: value}``: the policy has no dimension to
    give (``context={}`` works). Expected: as theirs, the first block runs, the second
    raises CapExceeded."""
    theirs = Throttled(key="send", quota=per_min(1), store=MemoryStore())
    with theirs:
        pass
    with pytest.raises(LimitedError), theirs:
        pass
    guard = Guard(MemoryBackend(clock), [Policy("send", Rule("1/minute"))], clock=clock)
    with capped("send", guard=guard) as decision:
        assert decision.allowed
    with pytest.raises(CapExceeded), capped("send", guard=guard):
        pass


def test_their_limit_on_a_guard_names_hit() -> None:
    """throttled-py.md's example: ``theirs.limit("user-17")`` becomes
    ``guard.hit("api", user="user-17")``. Out of habit, ``guard.limit("api",
    user="user-17")`` raises an AttributeError whose hint is another peer's: "Flask-Limiter's
    and slowapi's limit() is @capped(...) ..., or an integration's Limit", which sends a
    throttled-py user to a decorator. Expected: the hint also names throttled-py's
    ``limit(key)`` as ``hit(policy, **context)``."""
    guard = Guard(policies=[Policy("api", Rule("10/minute", by="user"))])
    with pytest.raises(AttributeError) as refused:
        guard.limit("api", user="user-17")  # type: ignore[attr-defined]
    text = str(refused.value)
    assert "throttled-py" in text, text
    assert "hit(" in text, text


@pytest.mark.parametrize(
    ("habit", "ours"),
    [
        ("limited", "allowed"),  # throttled-py: result.limited
        ("state", "remaining"),  # throttled-py: result.state.remaining, .reset_after ...
        ("reset_time", "reset_after"),  # limits: get_window_stats(...).reset_time
    ],
)
def test_a_peers_result_attribute_on_a_decision_names_ours(habit: str, ours: str) -> None:
    """throttled-py.md's example reads ``result.limited`` (and its numbers as
    ``result.state.remaining``, ``.retry_after``); limits.md maps ``get_window_stats(...)``,
    read as ``.reset_time``, to ``peek(...)``. On a Decision each is a bare
    ``AttributeError: 'Decision' object has no attribute 'limited'`` (``'state'``,
    ``'reset_time'``), where a guard's peer methods (``guard.test``, ``guard.clear``) name
    freqguard's way. Expected: the error names the Decision's attribute (``allowed``,
    ``remaining``, ``reset_after``)."""
    decision = Guard(policies=[Policy("api", Rule("10/minute", by="user"))]).hit("api", user="u")
    with pytest.raises(AttributeError) as refused:
        getattr(decision, habit)
    assert ours in str(refused.value), str(refused.value)


def test_acquires_second_argument_is_not_its_cost(clock: ManualClock) -> None:
    """throttled-py.md:39 maps ``limit(key, cost=3)`` to ``guard.hit(policy, 3, user=key)``
    (the cost second, as in their ``limit(key, 3)``) and :41 ``limit(key, timeout=...)`` to
    ``guard.acquire(policy, timeout=..., user=key)``. ``guard.acquire("api", 3, user="u")``,
    written as hit's, takes the 3 as a timeout of 3 s and consumes 1, quietly (remaining 4
    of 5, not 2). Expected: acquire's second positional is its cost, as hit's and peek's,
    or a positional there is refused."""
    guard = _guard(clock, "5/minute", "gcra")
    try:
        guard.acquire("api", 3, user="u")  # type: ignore[call-arg]
    except (TypeError, ConfigError):
        return  # refused: the way is named
    assert guard.peek("api", user="u").remaining == 2


def test_their_cost_above_the_quota(clock: ManualClock) -> None:
    """throttled-py.md has no row for a cost above the quota (limits.md has one). Theirs
    answers it as a denial with a wait: ``limit("u", cost=6)`` at ``per_min(5)`` (gcra) is
    limited, ``retry_after`` 12 s (and limited again 12 s later: it never fits);
    freqguard raises ``ConfigError: cost 6 exceeds the capacity 5``, so code that reads
    ``result.limited`` gets an exception instead. Expected: a row says so, as limits.md's
    ``a cost above the limit`` row does."""
    result = Throttled(key="u", using="gcra", quota=per_min(5), store=MemoryStore()).limit(
        "u", cost=6
    )
    assert result.limited
    assert result.state.retry_after == pytest.approx(12.0)
    with pytest.raises(ConfigError, match="cost 6 exceeds the capacity 5"):
        _guard(clock, "5/minute", "gcra").hit("api", 6, user="u")
    rows = [line for line in THROTTLED_PAGE.read_text().splitlines() if line.startswith("|")]
    assert any("above" in row and "ConfigError" in row for row in rows), "no row for it"


# -- both --------------------------------------------------------------------------------


def _limits_cost_zero() -> tuple[bool, bool]:
    theirs = strategies.MovingWindowRateLimiter(storage.MemoryStorage())
    item = parse("1/minute")
    return theirs.hit(item, "u"), theirs.hit(item, "u", cost=0)


def _throttled_cost_zero() -> tuple[bool, bool]:
    theirs = Throttled(key="u", using="gcra", quota=per_min(1), store=MemoryStore())
    return not theirs.limit("u").limited, not theirs.limit("u", cost=0).limited


@pytest.mark.parametrize(
    ("peer", "page", "row"),
    [
        (_limits_cost_zero, LIMITS_PAGE, '| `hit(item, "u", cost=3)`'),
        (_throttled_cost_zero, THROTTLED_PAGE, "| `limit(key, cost=3)`"),
    ],
    ids=["limits", "throttled-py"],
)
def test_a_cost_of_zero_at_the_limit(clock: ManualClock, peer: Any, page: Path, row: str) -> None:
    """limits.md:33 (``hit(item, "u", cost=3)``) and throttled-py.md:39 (``limit(key,
    cost=3)``) map a cost to ``guard.hit(policy, cost, ...)``: "the same". A cost of 0 is
    not: at the limit (1/minute, one hit) limits' ``hit(item, "u", cost=0)`` and
    throttled-py's ``limit("u", cost=0)`` say allowed (nothing to take), freqguard's
    ``hit("api", 0, user="u")`` says denied (concepts.md: 0 asks whether one more would
    fit). Code that hits with cost 0 to touch a key (or to read its state) sees denials
    where it saw none. Expected: the cost row says a cost of 0 differs."""
    assert peer() == (True, True)
    ours = _guard(clock, "1/minute")
    assert ours.hit("api", user="u").allowed
    assert ours.hit("api", 0, user="u").allowed is False
    text = _row(page, row)
    assert re.search(r"cost(=| of )?0\b|`0`", text), text


def _limits_sentinels(url: str) -> list[object]:
    made: Any = storage.storage_from_string(url)  # redis-py's Sentinel made, nothing connected
    return [s.connection_pool.connection_kwargs.get("password") for s in made.sentinel.sentinels]


def _throttled_sentinels(url: str) -> list[object]:
    _, options = RedisStoreBackend._parse(url)  # what RedisStore(server=url) gives redis-py
    return [options["SENTINEL_KWARGS"].get("password")]


@pytest.mark.parametrize(
    ("peer", "page", "row"),
    [
        (_limits_sentinels, LIMITS_PAGE, '| `storage_from_string("redis://...")`'),
        (_throttled_sentinels, THROTTLED_PAGE, '| `RedisStore(server="redis://...")`'),
    ],
    ids=["limits", "throttled-py"],
)
def test_a_sentinel_urls_password_reaches_the_sentinels(peer: Any, page: Path, row: str) -> None:
    """limits.md:43 says ``storage_from_string`` URLs are "the same for ...
    ``redis+sentinel://``", throttled-py.md:46 ``RedisStore(server=...)``'s "the same URL" (also
    ``redis+sentinel://``). In ``redis+sentinel://:pw@host:26379/mymaster`` both peers give
    the password to the sentinels too (limits: ``sentinel_kwargs``; throttled-py:
    ``SENTINEL_KWARGS`` from the URL's auth), so sentinels that require one (``requirepass``
    in sentinel.conf) are asked with it; freqguard gives it to the servers only (redis.md and
    ``freqguard.backends.urls``: the sentinels' is ``sentinel_password``), and its sentinels
    are asked without one (read from the redis-py client each side makes, nothing
    connected; no sentinel with a password was run). Expected: the sentinels get the URL's
    password, as the peers' do, or the row says it differs and names
    ``sentinel_password``."""
    url = "redis+sentinel://:pw@127.0.0.1:1/mymaster"
    theirs = peer(url)
    made: Any = backend_from_url(url)
    try:
        ours = [
            s.connection_pool.connection_kwargs.get("password")
            for s in made.client.connection_pool.sentinel_manager.sentinels
        ]
    finally:
        made.close()
    assert theirs == ["pw"]
    text = _row(page, row)
    assert ours == theirs or "sentinel_password" in text, (ours, text)


# -- limits ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "ours"),
    [({"key_prefix": "myapp"}, "prefix"), ({"socket_timeout": 2}, "?socket_timeout=")],
)
def test_storage_options_given_to_backend_from_url(option: dict[str, Any], ours: str) -> None:
    """limits.md:43 maps ``storage_from_string("redis://...")`` to ``backend_from_url``;
    limits' signature is ``storage_from_string(uri, **options)`` (``key_prefix``, redis-py's
    ``socket_timeout``, ..., as Flask-Limiter's ``storage_options`` pass them). Carried over,
    ``backend_from_url("redis://...", key_prefix="myapp")`` is a bare ``TypeError:
    backend_from_url() got an unexpected keyword argument 'key_prefix'``. Expected: a
    ConfigError naming freqguard's way: ``Guard(prefix=...)`` for the key prefix, the URL's
    query for a client option."""
    assert storage.storage_from_string("memory://", **option) is not None
    with pytest.raises(ConfigError, match=re.escape(ours)):
        backend_from_url("redis://localhost:6379/0", **option)


def test_their_async_memory_url_names_ours() -> None:
    """limits.md:43: limits' ``async+`` forms "are the same URLs given to
    ``async_backend_from_url``; each refused with the form to write". limits.aio's memory
    storage is ``async+memory://`` (``limits.aio.storage.MemoryStorage.STORAGE_SCHEME``);
    ``parse_url("async+memory://")`` says only "unsupported backend URL scheme
    'async+memory' ...; use memory://, redis://, ..." where ``async+redis://`` is answered
    "limits' async+redis:// is redis:// here (async_backend_from_url for an AsyncGuard)".
    Expected: the same answer for ``async+memory://``."""
    assert "async+memory" in limits.aio.storage.memory.MemoryStorage.STORAGE_SCHEME
    assert asyncio.run(_aio_memory_hit()) is True
    with pytest.raises(ConfigError, match=re.escape("limits' async+memory:// is memory://")):
        parse_url("async+memory://")


async def _aio_memory_hit() -> bool:
    from limits.aio import strategies as aio_strategies

    theirs = aio_strategies.MovingWindowRateLimiter(storage.storage_from_string("async+memory://"))
    return await theirs.hit(parse("1/minute"), "u")


def test_their_timeout_none_is_no_wait(clock: ManualClock) -> None:
    """throttled-py.md:41: ``Throttled(timeout=120)``, ``limit(key, timeout=...)`` |
    ``guard.acquire(policy, timeout=120, user=key)`` | "the same wait for the hit's turn".
    Their ``timeout`` defaults to None, which means the instance's (-1: do not wait), so
    ``limit("u", timeout=None)`` at ``per_day(1)`` answers limited at once; freqguard's
    ``acquire("api", timeout=None, user="u")`` is the same keyword and value and waits a
    whole day (the pinned clock moves 86,400 s), and their ``timeout=-1`` is refused
    ("timeout must be None or finite seconds >= 0, got -1") without naming ``hit``. Expected:
    the row says that their None and -1 (no wait) are ``hit`` here, and that ``acquire``
    without a timeout waits for as long as the turn takes."""
    mine = ManualClock(START)  # freqguard's own, so that each side's wait shows
    theirs = Throttled(key="u", using="gcra", quota=throttled.per_day(1), store=MemoryStore())
    ours = _guard(mine, "1/day", "gcra")
    assert not theirs.limit("u").limited
    assert ours.hit("api", user="u").allowed
    assert theirs.limit("u", timeout=None).limited
    assert clock.now() == START  # no wait
    assert ours.acquire("api", timeout=None, user="u").allowed
    assert mine.now() - START == pytest.approx(86_400)
    with pytest.raises(ConfigError, match="got -1"):
        ours.acquire("api", timeout=-1, user="u")
    row = _row(THROTTLED_PAGE, "| `Throttled(timeout=120)`")
    assert "None" in row, row
    assert "-1" in row, row
