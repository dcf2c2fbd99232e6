"""A log of past messages, read for ``freqguard replay`` a line at a time: JSON Lines or CSV
with a header. Every line is checked whole before it is decided, and a line that does not
hold is a :class:`~freqguard.ConfigError` naming its number: bytes that are not UTF-8, a
line longer than :data:`MAX_LINE`, JSON's NaN, nesting too deep, a time outside what the
scripts can compute, a cost that is not an integer, a key a line does not have."""

from __future__ import annotations

import codecs
import csv
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

from freqguard.bounds import MAX_TIME_US
from freqguard.config.nesting import deeper_than
from freqguard.config.schema import shown
from freqguard.errors import ConfigError

__all__ = ["MAX_DEPTH", "MAX_LINE", "Entry", "entries"]

#: The longest line a log may hold, in bytes (a CSV field: csv's own limit, 128 KiB), and
#: how deep a JSON line may nest (a line needs 2: the line, its context).
MAX_LINE = 1 << 20
MAX_DEPTH = 32
_KEYS = ("time", "policy", "context", "cost")
_LATEST = MAX_TIME_US // 1_000_000  # seconds
_NUMBER = re.compile(r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,4})?\s*")
_COST = re.compile(r"\s*[0-9]{1,18}\s*")


@dataclass(frozen=True)
class Entry:
    """One logged message."""

    line: int
    time: float
    policy: str
    context: dict[str, Any]
    cost: int


def _lines(file: IO[bytes]) -> Iterator[tuple[int, str]]:
    """The file's lines, numbered from 1, decoded (a first line's byte-order mark dropped).

    Raises:
        ConfigError: a line longer than :data:`MAX_LINE`, or not UTF-8.
    """
    number = 0
    while raw := file.readline(MAX_LINE + 1):
        number += 1
        if len(raw) > MAX_LINE:
            raise ConfigError(f"line {number}: longer than {MAX_LINE} bytes")
        if number == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"line {number}: not UTF-8: byte 0x{raw[exc.start]:02x} at column "
                f"{exc.start + 1}; a log is UTF-8 text"
            ) from None


def _time(value: object, line: int) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        seconds = None
    elif isinstance(value, int):
        seconds = float(value) if -1 <= value <= _LATEST + 1 else math.inf
    elif isinstance(value, float):
        seconds = value
    elif _NUMBER.fullmatch(value):
        seconds = float(value)
    else:
        seconds = _instant(value)
    if seconds is None:
        raise ConfigError(
            f"line {line}: time is epoch seconds or an ISO 8601 instant with its offset "
            f"('2026-06-11T21:30:00+02:00'), got {shown(value)}"
        )
    if not 0 <= seconds <= _LATEST:  # nan too
        raise ConfigError(
            f"line {line}: time must be from 0 to {_LATEST} seconds since the epoch (about "
            f"the year 2223), got {shown(value)}"
        )
    return seconds


def _instant(text: str) -> float | None:
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        return None if parsed.tzinfo is None else parsed.timestamp()
    except (ValueError, OverflowError):
        return None


def _entry(line: int, raw: dict[str, Any], policy: str | None) -> Entry:
    unknown = [key for key in raw if key not in _KEYS]
    if unknown:
        names = ", ".join(shown(key) for key in unknown)
        raise ConfigError(f"line {line}: unknown key {names} (a line has: {', '.join(_KEYS)})")
    name = raw.get("policy", policy)
    if name is None or name == "":
        raise ConfigError(f"line {line}: no policy: give one per line, or --policy")
    if not isinstance(name, str):
        raise ConfigError(f"line {line}: policy is a policy's name, got {shown(name)}")
    cost = raw.get("cost", 1)
    if isinstance(cost, str) and _COST.fullmatch(cost):
        cost = int(cost)
    if isinstance(cost, bool) or not isinstance(cost, int):
        raise ConfigError(f"line {line}: cost is an integer, got {shown(cost)}")
    context = raw.get("context")
    if not isinstance(context, dict):
        raise ConfigError(f"line {line}: context is an object of name: value, got {shown(context)}")
    return Entry(line, _time(raw.get("time"), line), name, context, cost)


def _constant(name: str) -> object:
    raise ValueError(f"{name} is not a number (JSON has none)")


def _jsonl(file: IO[bytes], policy: str | None) -> Iterator[Entry]:
    for number, text in _lines(file):
        if not text.strip():
            continue
        if deeper_than(text, MAX_DEPTH):
            raise ConfigError(f"line {number}: nested too deeply (more than {MAX_DEPTH} levels)")
        try:
            raw = json.loads(text, parse_constant=_constant)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"line {number}: not JSON: {exc.msg}") from None
        except ValueError as exc:  # NaN, or an integer past Python's digit limit
            raise ConfigError(f"line {number}: not JSON: {exc}") from None
        except RecursionError:
            raise ConfigError(f"line {number}: nested too deeply") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"line {number}: a line is a JSON object, got {text.strip()[:60]!r}")
        yield _entry(number, raw, policy)


def _csv(file: IO[bytes], policy: str | None) -> Iterator[Entry]:
    numbered = _lines(file)
    at = [0]

    def texts() -> Iterator[str]:
        for number, text in numbered:
            at[0] = number
            yield text

    rows = csv.reader(texts())
    try:
        header = next((row for row in rows if row), None)
        if header is None:
            return
        _header(header, at[0])
        for row in rows:
            if not row:
                continue
            if len(row) != len(header):
                more = "more" if len(row) > len(header) else "fewer"
                raise ConfigError(f"line {at[0]}: {more} fields than the header has")
            values = dict(zip(header, row, strict=True))
            raw: dict[str, Any] = {"time": values.pop("time")}
            for name in ("policy", "cost"):
                value = values.pop(name, "")
                if value != "":
                    raw[name] = value
            raw["context"] = values
            yield _entry(at[0], raw, policy)
    except csv.Error as exc:  # a field past csv's limit, a quote left open
        raise ConfigError(f"line {at[0]}: not CSV: {exc}") from None


def _header(header: list[str], line: int) -> None:
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise ConfigError(f"line {line}: the header names {shown(name)} twice")
        seen.add(name)
    if "time" not in seen:
        raise ConfigError(f"line {line}: the header has no time column (time, policy, cost, ...)")


def entries(file: IO[bytes], kind: str, policy: str | None) -> Iterator[Entry]:
    """The log's entries (``kind``: ``"csv"`` or ``"jsonl"``), read a line at a time from
    the file's bytes.

    Raises:
        ConfigError: a line that does not parse, naming its number.
    """
    return _csv(file, policy) if kind == "csv" else _jsonl(file, policy)
