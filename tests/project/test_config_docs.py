"""docs/config.md's key tables list every key the configuration schema accepts, and no
other: one row per key, nested keys dotted, so that the tables cannot fall behind the
schema again (they once listed only the first rule keys)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from freqguard.config import SCHEMA

PAGE = Path(__file__).resolve().parent.parent.parent / "docs" / "config.md"
POLICY = SCHEMA["properties"]["policy"]["items"]
RULE = POLICY["properties"]["rules"]["items"]


def _paths(schema: Mapping[str, Any], stop: str) -> Iterator[str]:
    """Every key below ``schema``, dotted; ``stop``'s own keys (a table of its own) not."""
    for option in [schema, *schema.get("anyOf", ())]:
        for key, sub in option.get("properties", {}).items():
            yield key
            if key != stop:
                yield from (f"{key}.{child}" for child in _paths(sub, stop))


def _tables() -> dict[str, list[str]]:
    """The first column of each table under "## Keys", by the ### heading above it."""
    text = PAGE.read_text()
    section = text.split("\n## Keys\n", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, list[str]] = {}
    heading = ""
    for line in section.splitlines():
        if line.startswith("### "):
            heading = line[4:]
            tables[heading] = []
        found = re.match(r"\| `([^`]+)` \|", line)
        if found is not None:
            tables.setdefault(heading, []).append(found.group(1))
    return tables


def test_the_key_tables_list_exactly_the_schemas_keys() -> None:
    tables = _tables()
    assert list(tables) == [
        "In the file",
        "In a policy (`[[policy]]`)",
        "In a rule (`rules = [...]`, or one `[[policy.rules]]` table each)",
    ]
    file, policy, rule = tables.values()
    for listed, schema, stop in [(file, SCHEMA, "policy"), (policy, POLICY, "rules")]:
        assert sorted(listed) == sorted(set(_paths(schema, stop))), listed
    assert sorted(rule) == sorted(set(_paths(RULE, ""))), rule
    for listed in tables.values():
        assert len(listed) == len(set(listed)), "a key listed twice"
