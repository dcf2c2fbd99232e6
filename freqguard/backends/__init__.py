"""Backends: where state lives."""

from freqguard.backends.base import AsyncBackend, SyncBackend
from freqguard.backends.memory import MemoryBackend
from freqguard.script.calls import ScriptCall

__all__ = ["AsyncBackend", "MemoryBackend", "ScriptCall", "SyncBackend"]
