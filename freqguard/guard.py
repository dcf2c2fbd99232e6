"""Guard and AsyncGuard: the engine every operation goes through.

Both drive the same I/O-free operations (:mod:`freqguard.engine`); ``AsyncGuard`` is written
once (``freqguard/_async/guard.py``) and ``Guard`` generated from it.
"""

from freqguard._async.guard import AsyncGuard
from freqguard._sync.guard import Guard

__all__ = ["AsyncGuard", "Guard"]
