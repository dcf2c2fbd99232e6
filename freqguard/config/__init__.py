"""Configuration files: policies and guard settings without writing Python.

::

    # freqguard.toml
    backend = "redis://localhost:6379/0"   # FREQGUARD_URL wins
    deny_cache = 10000

    [[policy]]
    name = "sms"
    rules = [
      { rate = "15/minute", by = "recipient", name = "rcpt-1m" },
      { rate = "2 per 59 seconds", by = ["recipient", "content"], name = "content-59s" },
    ]

    guard = freqguard.config.load("freqguard.toml").guard()

TOML (``tomllib``) or YAML (PyYAML, the ``yaml`` extra). An unknown key, a value of the
wrong kind, a rate that does not parse, a policy past its bounds: each is a
:class:`~freqguard.ConfigError` naming the file, the line, the policy and the rule, with
what is allowed. :data:`SCHEMA` is the file's JSON Schema (``docs/config.schema.json``).
"""

from freqguard.config.load import ENV, Config, load, loads
from freqguard.config.schema import SCHEMA

__all__ = ["ENV", "SCHEMA", "Config", "load", "loads"]
