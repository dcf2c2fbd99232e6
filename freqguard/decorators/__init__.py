"""``@capped`` and ``configure``: cap a function by keys taken from its own arguments.

The decorator's room: :mod:`~freqguard.decorators.decorator` (``capped``), the process-wide
default guard (:mod:`~freqguard.decorators.defaults`), the argument paths a key is taken from
(:mod:`~freqguard.decorators.call_keys`) and the async face of a sync guard
(:mod:`~freqguard.decorators.adapters`).
"""

from freqguard.decorators.decorator import Capped, capped
from freqguard.decorators.defaults import configure

__all__ = ["Capped", "capped", "configure"]
