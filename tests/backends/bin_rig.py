"""What the bin tests share (``test_bins.py``, ``test_bin_lifetimes.py``,
``test_bin_options.py``): a policy of one rule, and a client of the server's db 1, where
their binned backends keep their bins (``db1``, a fixture of the folder's ``conftest.py``),
and clients of any db of the server, each closed after the test (``db_client``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis import Redis

from freqguard import Policy, Rule
from tests.servers import RedisServer

P = Policy("p", Rule("2 per 1 second", by="u"))

#: ``db_client``: a client of the server's db ``n``, closed after the test
DbClient = Callable[[int], Redis]


@pytest.fixture
def db1(redis_server: RedisServer) -> Iterator[Any]:
    client = Redis(port=redis_server.port, db=1)
    yield client
    client.close()


@pytest.fixture
def db_client(redis_server: RedisServer) -> Iterator[DbClient]:
    """``db_client(n)``: a client of the server's db ``n``, closed after the test. A client
    left open is not closed when the test drops it: redis-py's connections sit in reference
    cycles, which only the collector frees, later, in whatever test then runs; its unclosed
    socket's ResourceWarning (an error under ``filterwarnings = error``) fails that test."""
    made: list[Redis] = []

    def make(db: int) -> Redis:
        made.append(Redis(port=redis_server.port, db=db))
        return made[-1]

    yield make
    for client in made:
        client.close()
