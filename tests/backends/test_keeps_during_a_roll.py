"""A state with a *keep* (design note 118: what a ``rate_for`` function's tier kept past
its rule's own rate) met by 0.3.0's function while a deploy rolls: docs/upgrading.md says
its call fails, as on a rolling window's carry. Held here: it fails (the store's error,
never a decision made on a misread state) and leaves the record as it was, and this
release then decides on it as before the old call."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from freqguard import BackendUnavailable, Guard, ManualClock
from freqguard.backends._library import LIBRARY
from freqguard.backends.redis import RedisBackend
from tests.backends.test_wide_names import RELEASE_0_3_0
from tests.backends.upgrade_rig import _deploy, _OldCalls, _wide_tag
from tests.conformance.test_keeps_adversarial import keeps_policy
from tests.conftest import START
from tests.servers import RedisServer


@pytest.fixture
def library(redis_server: RedisServer) -> Iterator[None]:
    yield
    _deploy(redis_server.client, LIBRARY)  # the suite's other tests find this release's


@pytest.mark.usefixtures("library")
@pytest.mark.parametrize("pro_hits", [1, 7])
@pytest.mark.parametrize("strategy", ["sliding-log", "rolling-window"])
def test_an_old_releases_call_on_a_state_with_a_keep_fails_and_writes_nothing(
    redis_backend: RedisBackend, redis_server: RedisServer, strategy: str, pro_hits: int
) -> None:
    clock = ManualClock(START)
    new = Guard(redis_backend, [keeps_policy(strategy)], clock=clock)
    assert all(new.hit("p", u="a", plan="pro").allowed for _ in range(pro_hits))
    client = redis_server.client
    before = {key: client.dump(key) for key in client.keys("*")}
    backend = _OldCalls(redis_backend, True, _wide_tag)
    old = Guard(backend, [keeps_policy(strategy)], clock=clock)
    _deploy(client, RELEASE_0_3_0)
    clock.advance(1)
    contexts: list[dict[str, object]] = [{"u": "a"}, {"u": "a", "plan": "pro"}]
    for context in contexts:
        with pytest.raises(BackendUnavailable):
            old.hit("p", 1, **context)
    assert {key: client.dump(key) for key in client.keys("*")} == before
    _deploy(client, LIBRARY)
    left = new.peek("p", u="a", plan="pro").rules[0].remaining
    assert left == 100 - pro_hits  # the pro hour as this release left it
