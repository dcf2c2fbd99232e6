"""What the bin tests share (``test_bins.py``, ``test_bin_lifetimes.py``,
``test_bin_options.py``): a policy of one rule, and a client of the server's db 1, where
their binned backends keep their bins (``db1``, a fixture of the folder's ``conftest.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis

from freqguard import Policy, Rule
from tests.servers import RedisServer

P = Policy("p", Rule("2 per 1 second", by="u"))


@pytest.fixture
def db1(redis_server: RedisServer) -> Iterator[Any]:
    client = Redis(port=redis_server.port, db=1)
    yield client
    client.close()
