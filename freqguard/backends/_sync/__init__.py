"""The sync Redis I/O edge, generated from ``freqguard.backends._async`` by
``scripts/unasync.py``: edit the async source, then run the script (CI checks with
``--check`` that every module here is what the script writes)."""
