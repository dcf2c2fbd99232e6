"""The deny cache: denials answered without the store until their ``retry_after``.

See :class:`DenyCache` (defined in ``freqguard/engine/denycache.py``).
"""

from freqguard.engine.denycache import DenyCache

__all__ = ["DenyCache"]
