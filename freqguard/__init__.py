"""freqguard: frequency capping and rate limiting, exact and atomic per message."""

from freqguard.backends.memory import MemoryBackend
from freqguard.clock import Clock, ManualClock, SystemClock
from freqguard.decision import Decision, RuleState
from freqguard.errors import BackendUnavailable, CapExceeded, ConfigError, FreqGuardError
from freqguard.guard import AsyncGuard, Guard
from freqguard.policy import Policy
from freqguard.rates import Rate, parse_rate, parse_rates
from freqguard.rules import Rule, Strategy

__version__ = "0.1.0"

__all__ = [
    "AsyncGuard",
    "BackendUnavailable",
    "CapExceeded",
    "Clock",
    "ConfigError",
    "Decision",
    "FreqGuardError",
    "Guard",
    "ManualClock",
    "MemoryBackend",
    "Policy",
    "Rate",
    "Rule",
    "RuleState",
    "Strategy",
    "SystemClock",
    "parse_rate",
    "parse_rates",
]
