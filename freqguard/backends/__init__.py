"""Backends: where state lives."""

from freqguard.backends.base import AsyncBackend, ScriptCall, SyncBackend
from freqguard.backends.memory import MemoryBackend

__all__ = ["AsyncBackend", "MemoryBackend", "ScriptCall", "SyncBackend"]
