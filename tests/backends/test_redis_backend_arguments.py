"""``RedisBackend(...)`` arguments that were accepted and then ignored, or failed only at
the first call, each a failing test of an adversarial review's finding first. The clients
are never connected (as in ``test_redis_durability.py``): what is judged is the
construction."""

from __future__ import annotations

import inspect
import ssl

import pytest
import redis

from freqguard import ConfigError, RedisBackend
from freqguard.backends.urls import parse_url
from tests import servers

#: What a refusal may be: freqguard's own, or Python's for a wrong type (naming the argument).
_NAMED = (ConfigError, TypeError, ValueError)


def test_a_url_given_as_the_client_is_refused_naming_backend_from_url() -> None:
    """``RedisBackend("redis://localhost:6379/0")``: accepted (its repr shows the string);
    ``Guard(backend)`` too, and the first hit raises ``AttributeError: 'str' object has no
    attribute 'execute_command'``. ``Guard("redis://...")`` already says "pass
    backend_from_url(...)"; the backend should refuse a string client at construction the
    same way, naming ``backend_from_url``."""
    with pytest.raises(_NAMED, match="backend_from_url"):
        RedisBackend(f"redis://127.0.0.1:{servers.free_port()}/0")  # type: ignore[arg-type]


def test_wait_timeout_without_wait_replicas_is_refused_as_the_url_refuses_it() -> None:
    """``RedisBackend(client, wait_timeout=5)`` (no ``wait_replicas``): accepted, and the
    timeout is silently ignored (no WAIT is ever sent: ``wait_replicas`` defaults to 0).
    The same settings in a URL, ``redis://...?wait_timeout=5``, are refused: "wait_timeout
    needs wait_replicas >= 1". Should be the same ConfigError at construction."""
    client = redis.Redis(port=servers.free_port())  # never connected
    try:
        with pytest.raises(ConfigError, match="wait_replicas"):
            RedisBackend(client, wait_timeout=5)
    finally:
        client.close()


def test_a_clock_that_is_no_clock_is_refused_at_construction() -> None:
    """``RedisBackend(client, clock="x")``: accepted; ``Guard(backend)`` then raises
    ``AttributeError: 'str' object has no attribute 'now_us'``. Should be a ConfigError
    (or TypeError) at construction naming ``clock``."""
    client = redis.Redis(port=servers.free_port())  # never connected
    try:
        with pytest.raises(_NAMED, match="clock"):
            RedisBackend(client, clock="x")  # type: ignore[arg-type]
    finally:
        client.close()


def test_url_ssl_include_verify_flags_reaches_redis_py_as_flags() -> None:
    """``rediss://host:6380?ssl_include_verify_flags=VERIFY_X509_STRICT``: accepted, and
    handed to redis-py as the *string* ``"VERIFY_X509_STRICT"`` (freqguard passes the query
    as keyword arguments, past redis-py's own URL parser, which would make it
    ``[VerifyFlags.VERIFY_X509_STRICT]``). redis-py then does ``context.verify_flags |=
    flag`` for each character: ``TypeError: unsupported operand type(s) for |=:
    'VerifyFlags' and 'str'`` at every TLS connection. The option can never work. Should
    be parsed into ``ssl.VerifyFlags`` (and a name that is none refused)."""
    url = "rediss://127.0.0.1:6380?ssl_include_verify_flags=VERIFY_X509_STRICT"
    from redis.connection import SSLConnection

    if "ssl_include_verify_flags" not in inspect.signature(SSLConnection).parameters:
        with pytest.raises(ConfigError, match="newer redis-py"):  # the floor's redis-py
            parse_url(url)
        return
    target = parse_url(url)
    assert target.options["ssl_include_verify_flags"] == [ssl.VerifyFlags.VERIFY_X509_STRICT]
