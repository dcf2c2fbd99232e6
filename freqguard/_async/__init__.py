"""The asyncio guard, written by hand; ``freqguard/_sync/`` is generated from it
(``scripts/unasync.py``)."""
