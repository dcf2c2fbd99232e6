"""An adversarial review of 33ca5c9's bound on a cost before the call (design note 107: "the
largest capacity a rule for every priority could be given ... so the store's work stays
bounded"), on the real Redis server of the suite's fixtures. Each finding a failing test."""

from __future__ import annotations

import pytest

from freqguard import ConfigError, Guard, ManualClock, Policy, Rule
from freqguard.backends.redis import RedisBackend
from tests.conftest import START


@pytest.mark.parametrize("strategy", ["token-bucket", "gcra"])
@pytest.mark.parametrize("cost", [2**53, 2**63, 10**30], ids=["2^53", "2^63", "10^30"])
def test_a_huge_cost_on_a_policy_of_priority_rules_is_refused_not_admitted_by_redis(
    redis_backend: RedisBackend, strategy: str, cost: int
) -> None:
    """``Policy("o", Rule("5/minute", by="u", name="r", strategy=strategy, only=["b"]),
    priorities=("a", "b"))``: every enforcing rule has ``only=``, so ``PolicyPlan._most``
    (the min of ``max_limit`` over rules with ``only is None``) is None and
    ``check_cost`` bounds nothing before the call. On Redis, ``hit("o", 2**53, u="x",
    priority="b")`` answers ``allowed=True, remaining=5, source='backend'``: the store's
    arithmetic on a cost past 2**53 admits a hit 5/minute can never grant (and counts
    nothing). The memory backend raises ``ConfigError: cost ... exceeds the capacity 5 of
    rule 'r'`` for the same hit; a cost of 2**32 is refused on Redis too; before 33ca5c9
    any cost past 5 was refused before the call. Expected: the ConfigError (naming
    ``cost``), on Redis as on memory."""
    policy = Policy(
        "o",
        Rule("5/minute", by="u", name="r", strategy=strategy, only=["b"]),
        priorities=("a", "b"),
    )
    guard = Guard(redis_backend, [policy], ManualClock(START))
    with pytest.raises(ConfigError) as raised:
        guard.hit("o", cost, u="x", priority="b")
    assert raised.value.argument == "cost"
