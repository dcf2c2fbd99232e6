"""Random log lines for ``freqguard replay``, by hypothesis: JSON Lines and CSV, plausible
lines and any bytes. Each run exits 0 or 2, never a traceback, and a refusal names a line
of the log. Random words are in ``test_cli_properties.py``; the rig is
``cli_property_rig.py``."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

from hypothesis import event, given
from hypothesis import strategies as st

from tests.project.cli_property_rig import CONFIG, SETTINGS, TEXT
from tests.project.cli_run import run

JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([10**400, -(10**30), 2**63]),  # 400 digits: within repr's limit
    st.floats(),  # nan and inf: json.dumps writes NaN and Infinity
    TEXT,
    st.sampled_from(["sms", "vendor", "UTC", "2026-06-11T21:30:00+02:00", "1e400", "-5"]),
)
JSON_TREE = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=10,
)
CONTEXTS = st.dictionaries(
    st.one_of(st.sampled_from(["recipient", "content", "tz", "cost", "policy", "self"]), TEXT),
    JSON_TREE,
    max_size=4,
)
LINES = st.fixed_dictionaries(
    {},
    optional={
        "time": JSON_TREE,
        "policy": st.one_of(st.just("sms"), JSON_TREE),
        "context": st.one_of(CONTEXTS, JSON_TREE),
        "cost": JSON_TREE,
        "extra": JSON_TREE,
    },
)
TIMES = st.one_of(
    st.integers(min_value=1_781_200_000, max_value=1_781_300_000),
    st.floats(min_value=1_781_200_000, max_value=1_781_300_000),
    st.sampled_from(["2026-06-11T21:30:00+02:00", "2026-06-11T21:30:00", "1781200000.5"]),
    JSON_TREE,
)
ZONES = st.sampled_from(["UTC", "Asia/Tokyo", "Mars/Base", "", "posixrules", "UTC "])
PLAUSIBLE_LINES = st.fixed_dictionaries(
    {
        "time": TIMES,
        "policy": st.one_of(st.sampled_from(["sms", "vendor"]), JSON_TREE),
        "context": st.one_of(
            st.fixed_dictionaries(
                {"recipient": st.one_of(TEXT, JSON_TREE), "content": TEXT, "tz": ZONES},
                optional={"cost": JSON_TREE, "priority": TEXT, "x": JSON_TREE},
            ),
            st.just({}),
            CONTEXTS,
        ),
    },
    optional={"cost": st.one_of(st.integers(min_value=-2, max_value=8), JSON_TREE)},
)
RAW = st.one_of(
    PLAUSIBLE_LINES.map(lambda line: json.dumps(line).encode()),
    LINES.map(lambda line: json.dumps(line).encode()),
    st.binary(max_size=30),
    st.sampled_from([b"[" * 5000, b"{}", b"", b"\xef\xbb\xbf{}", b'"a"', b"1e400"]),
)
CELLS = st.one_of(
    st.sampled_from(["1781200000", "sms", "vendor", "a", "UTC", "1", "", "nan", "-3", "x,y"]),
    # Python 3.10's csv writer cannot write a NUL without an escapechar (the raw lines
    # below send NULs and every other byte)
    TEXT.filter(lambda s: "\x00" not in s),
)
ROWS = st.one_of(
    st.lists(CELLS, min_size=6, max_size=6).map(lambda cells: _csv_line(cells)),
    st.lists(CELLS, max_size=8).map(lambda cells: _csv_line(cells)),
    st.binary(max_size=30),
)


def _csv_line(cells: list[str]) -> bytes:
    text = io.StringIO()
    csv.writer(text, lineterminator="").writerow(cells)
    return text.getvalue().encode("utf-8", "surrogatepass")


def _line_number(err: str) -> int | None:
    found = re.match(r"freqguard: line (\d+): ", err)
    return None if found is None else int(found.group(1))


@SETTINGS
@given(
    kind=st.sampled_from(["jsonl", "csv"]),
    lines=st.lists(RAW, min_size=1, max_size=5),
    rows=st.lists(ROWS, min_size=1, max_size=5),
)
def test_random_log_lines_exit_2_naming_the_line(
    tmp_path: Path, kind: str, lines: list[bytes], rows: list[bytes]
) -> None:
    config = tmp_path / "a.toml"
    config.write_text(CONFIG.format(url="memory://"))
    log = tmp_path / f"log.{kind}"
    if kind == "csv":
        lines = [b"time,policy,recipient,content,tz,cost", *rows]
    log.write_bytes(b"\n".join(lines) + b"\n")
    done = run("replay", str(config), str(log), "--no-progress")
    event(f"exit {done.code}: {done.err[:40]}")
    assert done.code in (0, 2), done.err
    if done.code == 2:
        number = _line_number(done.err)
        assert number is not None, done.err
        assert 1 <= number <= log.read_bytes().count(b"\n") + 1, done.err
