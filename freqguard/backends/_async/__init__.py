"""The Redis I/O edge written once, for asyncio: the source of ``freqguard.backends._sync``.

``python scripts/unasync.py`` writes each module's sync copy into ``_sync/`` by an explicit
list of substitutions (``async def`` to ``def``, ``AsyncLane`` to ``Lane``, ...); CI runs it
with ``--check``, which fails when a sync copy is stale. Edit here, never in ``_sync/``.
"""
