"""docs/coming-from/limits.md read by a limits user porting code (a review's run): an idiom
of theirs the page leaves without its way, where freqguard has one."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
PAGE = ROOT / "docs" / "coming-from" / "limits.md"


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [("storage.reset()", "freqguard flush"), ("storage.check()", "freqguard ping")],
)
def test_a_storages_own_methods_have_their_way(theirs: str, ours: str) -> None:
    """limits' storages have ``reset()`` (every limit in the store cleared: the usual
    teardown between tests, or after a bad deploy) and ``check()`` (the store reachable: a
    health check). limits.md maps ``storage_from_string`` and ``clear(item, key)`` (one
    key, ``guard.reset``) but neither of these; freqguard's ``reset`` needs a policy and a
    context, no backend or guard has a ``reset``, ``clear``, ``flush`` or ``check``
    (AttributeError), and the ways that exist, ``freqguard flush URL --yes`` and
    ``freqguard ping URL`` (cli.md:67-68; a new ``MemoryBackend()`` in memory), are named
    on no coming-from page. Expected: the page has a row for each, naming freqguard's
    way."""
    text = PAGE.read_text()
    assert theirs in text, f"no row maps {theirs}"
    assert ours in text, f"no row names {ours}"
