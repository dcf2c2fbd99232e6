"""The sync guard, generated from ``freqguard/_async/`` by ``scripts/unasync.py``."""
