"""The Python twins of the strategies' Lua, one module each."""

from __future__ import annotations

from typing import cast

from freqguard.rules import Strategy
from freqguard.script.strategies import fixed_window, gcra, sliding_log, token_bucket
from freqguard.script.strategies.base import RuleParams, StateSpec, Twin

__all__ = ["TWINS", "RuleParams", "StateSpec", "Twin"]

TWINS: dict[Strategy, Twin] = {
    Strategy.FIXED_WINDOW: cast(Twin, fixed_window),
    Strategy.SLIDING_LOG: cast(Twin, sliding_log),
    Strategy.TOKEN_BUCKET: cast(Twin, token_bucket),
    Strategy.GCRA: cast(Twin, gcra),
}
