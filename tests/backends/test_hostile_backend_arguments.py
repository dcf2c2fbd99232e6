"""The hostile-argument sweep (tests/unit/test_hostile_arguments.py) over what builds a
Redis backend: its keyword arguments on a client that never connects, and URLs whose
options, port, database or scheme are thousands of characters long."""

from __future__ import annotations

import pytest
from redis import Redis

from freqguard import ConfigError, backend_from_url
from freqguard.backends.redis import RedisBackend
from tests.unit.test_hostile_arguments import (
    Call,
    sweep,
)

CALLS: dict[str, tuple[str, Call]] = {
    "RedisBackend wait_replicas": (
        "wait_replicas",
        lambda g, v: RedisBackend(Redis(port=1), wait_replicas=v),  # type: ignore[arg-type]
    ),
    "RedisBackend bins": ("bins", lambda g, v: RedisBackend(Redis(port=1), bins=v)),  # type: ignore[arg-type]
    "RedisBackend scripts": ("scripts", lambda g, v: RedisBackend(Redis(port=1), scripts=v)),  # type: ignore[arg-type]
}


(
    test_each_hostile_value_is_taken_or_refused_naming_it,
    test_a_drawn_hostile_value_is_taken_or_refused_naming_it,
) = sweep(CALLS, 25)


@pytest.mark.parametrize(
    ("argument", "url"),
    [
        (name, f"redis://localhost:1/0?{name}={'9' * 5001}")
        for name in ("bins", "socket_timeout", "wait_replicas", "max_connections")
    ]
    + [
        ("port", f"redis://localhost:{'9' * 5001}/0"),
        ("db", f"redis://localhost:1/{'9' * 5001}"),
        ("scheme", f"{'x' * 1_000_000}://localhost"),
    ],
)
def test_a_long_url_is_refused_short_naming_the_option(argument: str, url: str) -> None:
    with pytest.raises(ConfigError, match=argument) as refused:
        backend_from_url(url)
    assert len(str(refused.value)) < 500
