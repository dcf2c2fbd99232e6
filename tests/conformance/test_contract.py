"""The Lua twin is held to ``freqguard/script/contract.py``, and the Python twin to it too,
both ways:
constants, strategy codes, pack formats, the reply layout, the specs' encoding, the twin
functions of every strategy and the steps of the policy function (same names, same order),
and neither twin's functions grow past a screen."""

from __future__ import annotations

import ast
import inspect
import re
from importlib import resources
from types import ModuleType

import pytest

from freqguard import Policy, QuietHours, Rule, Strategy
from freqguard.engine.plan import PolicyPlan
from freqguard.script import contract, twin
from freqguard.script.strategies import (
    KINDS,
    SHORT_FORMATS,
    STATE_FORMATS,
    STRATEGY_CODES,
    TWINS,
    RuleParams,
)
from freqguard.script.strategies.base import SHORT_COUNT, SHORT_SPAN

LUA = resources.files("freqguard.script").joinpath("policy.lua").read_text(encoding="utf-8")


def _lua_local(name: str) -> str:
    found = re.search(rf"^\s*local {name} = (.+?)\s*(?:--.*)?$", LUA, re.M)
    assert found, f"policy.lua has no `local {name} = ...`"
    return found.group(1)


def test_the_lua_modes_are_the_contracts() -> None:
    found = re.search(
        r"local HIT, CHECK, REFUND, RESET, LIMIT = (\d+), (\d+), (\d+), (\d+), (\d+)", LUA
    )
    assert found
    assert tuple(map(int, found.groups())) == (
        contract.HIT,
        contract.CHECK,
        contract.REFUND,
        contract.RESET,
        contract.LIMIT,
    )


@pytest.mark.parametrize(
    ("lua", "value"),
    [
        ("STALE_GRACE", contract.STALE_GRACE_US),
        ("PINNED_GRACE_MS", contract.PINNED_GRACE_MS),
        ("PRUNE_FLOOR", contract.PRUNE_FLOOR),
        ("BACK_LIMIT", contract.BACK_LIMIT),
        ("SHORT_SPAN", SHORT_SPAN),
        ("SHORT_COUNT", SHORT_COUNT),
        ("MAX_LOG_LIMIT", contract.MAX_LOG_LIMIT),
        ("MAX_SPAN_US", contract.MAX_SPAN_US),
    ],
)
def test_the_lua_constants_are_the_contracts(lua: str, value: int) -> None:
    text = _lua_local(lua).replace("^", "**")
    assert re.fullmatch(r"[\d *]+", text), text
    assert eval(text) == value  # digits, spaces and ** only, checked above


def _lua_section(strategy: str) -> str:
    """The Lua between a strategy's section heading and the next heading."""
    found = re.search(rf"^-- {strategy} -+\n(.*?)^-- \S+ -+$", LUA, re.M | re.S)
    assert found, strategy
    return found.group(1)


@pytest.mark.parametrize("strategy", list(STRATEGY_CODES))
def test_each_lua_section_states_its_strategys_code_and_state(strategy: str) -> None:
    """Every fact of a strategy is in its section, as in its Python module."""
    section, name = _lua_section(strategy), strategy.replace("-", "_")
    assert re.search(rf"^local {name} = {{code = {STRATEGY_CODES[strategy]}}}$", section, re.M)
    state = f"{name.upper()}_STATE"
    assert re.search(rf"^local {state} = '{re.escape(STATE_FORMATS[strategy])}'", section, re.M)


@pytest.mark.parametrize("strategy", list(SHORT_FORMATS))
def test_each_short_state_is_the_lua_s_and_told_apart_by_its_size(strategy: str) -> None:
    """The Lua's <NAME>_SHORT is the module's SHORT_FORMAT, its size is the one the Lua
    tells it by, and no full form has that size."""
    name = strategy.replace("-", "_").upper()
    short = SHORT_FORMATS[strategy]
    assert _lua_string(f"{name}_SHORT") == short
    size = sum(contract.widths(short))
    sized = [n for n in (f"{name}_SHORT_BYTES", "COUNT_SHORT_BYTES") if f"local {n} =" in LUA]
    assert size in [int(_lua_local(n)) for n in sized]
    assert size not in {sum(contract.widths(f)) for f in STATE_FORMATS.values()}
    assert "I5" in short  # born's distance, below SHORT_SPAN


def test_the_lua_registry_maps_each_code_to_its_section() -> None:
    """Codes, not positions: each twin is found under its own code in the Lua's TWINS."""
    table = re.search(r"^local TWINS = \{(.*?)^\}", LUA, re.M | re.S)
    assert table
    pairs = re.findall(r"\[(\w+)\.code\] = (\w+)", table.group(1))
    names = [strategy.replace("-", "_") for strategy in STRATEGY_CODES]
    assert pairs == [(name, name) for name in names]


def _lua_string(name: str) -> str:
    value = _lua_local(name)
    assert re.fullmatch(r"'[^']*'", value), value
    return value[1:-1]


@pytest.mark.parametrize(
    "name",
    [
        "FIELD_HEAD",
        "RECORD_META",
        "REPLY_HEAD",
        "REPLY_WAIT",
        "REPLY_STATE_LENGTH",
        "LIMIT_ENTRY",
        "BLOB_HEAD",
        "BUCKET_META",
    ],
)
def test_the_lua_formats_are_the_contracts(name: str) -> None:
    assert _lua_string(name) == getattr(contract, name)


def test_the_lua_sizes_are_those_of_the_formats() -> None:
    log = STATE_FORMATS["sliding-log"]
    assert int(_lua_local("LOG_HEADER_BYTES")) == sum(contract.widths(log))
    assert int(_lua_local("FIELD_HEAD_BYTES")) == sum(contract.widths(contract.FIELD_HEAD))
    assert int(_lua_local("RECORD_META_BYTES")) == sum(contract.widths(contract.RECORD_META))
    assert int(_lua_local("LIMIT_ENTRY_BYTES")) == sum(contract.widths(contract.LIMIT_ENTRY))
    assert int(_lua_local("REPLY_LIMITS")) == contract.REPLY_LIMITS


@pytest.mark.parametrize(
    "name", ["RECORD_LAYOUT", "OLDEST_LAYOUT", "LAYOUT_MARKS", "REPLY_DROPPED", "BUCKET_LAYOUT"]
)
def test_the_lua_states_the_layout_as_the_contract_does(name: str) -> None:
    assert int(_lua_local(name)) == getattr(contract, name)


def test_an_unmarked_meta_field_can_never_be_read_as_marked() -> None:
    """freqguard 0.1's meta field started with an expiry in µs (``>I7``, big-endian): its
    first byte stays below the marks for every number the Lua can store (all below 2^53,
    freqguard.bounds), so no 0.1 record passes for a marked one."""
    top = (2**53 - 1) >> (8 * (7 - 1))
    assert top < contract.LAYOUT_MARKS
    assert contract.LAYOUT_MARKS + contract.RECORD_LAYOUT <= 0xFF


def test_the_lua_writes_no_format_but_the_named_ones() -> None:
    """A format written anywhere else in the Lua would escape the contract."""
    named = {name for name, _ in re.findall(r"^local (\w+) = ('[>BI\d]+')", LUA, re.M)}
    # each state's full form and short form, the record's, the bucket's
    assert len(named) == 12 + len(SHORT_FORMATS) + 2
    heads = "{[0] = " + ", ".join(f"'{h}'" for h in contract.BUCKET_ENTRY_HEADS) + "}"
    for line in LUA.splitlines():
        formats = re.findall(r"'>?[BI][\dBI]*'", line)
        if not formats or re.match(rf"local ({'|'.join(named)}) = ", line):
            continue
        if line.startswith("local ENTRY_HEADS = "):  # a bucketed record's field heads
            assert line == f"local ENTRY_HEADS = {heads}"
            continue
        # a sliding log's entries: one offset of 1 to 7 bytes each
        assert line == "local FORMATS = {" + ", ".join(f"'>I{w}'" for w in range(1, 8)) + "}"


def _read_fields(function: str) -> list[str]:
    """The fields a Lua parse function reads, by their position from ``at``."""
    body = re.search(rf"^local function {function}\(.*?^end$", LUA, re.M | re.S)
    assert body, function
    reads = re.findall(r"(\w+) = v\[at(?: \+ (\d+))?\]", body.group(0))
    assert sorted(int(at or 0) for _, at in reads) == list(range(len(reads)))
    return [name for name, _ in sorted(reads, key=lambda read: int(read[1] or 0))]


def test_the_lua_parses_the_specs_as_the_contract_says() -> None:
    assert _read_fields("parse_state") == list(contract.SPEC_STATE)
    assert _read_fields("parse_rule") == list(contract.SPEC_RULE)


def test_the_python_twin_writes_the_specs_as_the_contract_says() -> None:
    """RuleParams' fields are the rule's numbers, and the spec text reads back as written."""
    assert RuleParams._fields == contract.SPEC_RULE
    policy = Policy(
        "p",
        Rule("5/minute", by="a"),
        Rule("9/hour", by="a"),
        Rule("3/second", by="a", strategy="gcra", burst=4, shadow=True),
    )
    (part,) = PolicyPlan(policy, "fg").parts
    words = iter(map(int, part.spec_text.split()))
    assert next(words) == len(part.specs)
    for spec in part.specs:
        state = {name: next(words) for name in contract.SPEC_STATE}
        assert state == {
            "code": spec.twin.code,
            "shadow": spec.shadow,
            "rule_count": len(spec.rules),
        }
        for rule in spec.rules:
            assert [next(words) for _ in contract.SPEC_RULE] == list(rule)
    assert next(words, None) is None


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "sliding-log"])
def test_the_python_twin_decodes_states_as_the_contract_says(kind: str) -> None:
    widths = contract.widths(STATE_FORMATS[kind])
    values = [7 * (i + 1) + 256**w // 3 for i, w in enumerate(widths)]
    raw = b"".join(v.to_bytes(w, "big") for v, w in zip(values, widths, strict=True))
    assert KINDS[kind].decode(raw) == tuple(values)


_FULL = {  # a state whose short form holds the same numbers, and that short form's numbers
    "fixed-window": (
        (2**55, SHORT_COUNT - 1, 2**55 + SHORT_SPAN - 1),
        (2**55, 2**16 - 1, 2**40 - 1),
    ),
    "calendar": ((2**55, 0, 2**55), (2**55, 0, 0)),
    "gcra": ((2**55 + SHORT_SPAN - 1, 0, 2**55), (2**55 + 2**40 - 1, 2**40 - 1)),
    "token-bucket": ((2**31, 2**55, 0, 2**55 - SHORT_SPAN + 1), (2**31, 2**55, 2**40 - 1)),
}


@pytest.mark.parametrize("kind", list(SHORT_FORMATS))
def test_the_python_twin_decodes_short_states_to_the_same_numbers(kind: str) -> None:
    full, short = _FULL[kind]
    widths = contract.widths(SHORT_FORMATS[kind])
    raw = b"".join(v.to_bytes(w, "big") for v, w in zip(short, widths, strict=True))
    assert KINDS[kind].decode(raw) == full


@pytest.mark.parametrize("kind", ["calendar", "quiet"])
def test_the_numbers_after_a_states_rules_are_read_as_written(kind: str) -> None:
    """The Lua reads <KIND>_BOUNDS numbers after a calendar's or the quiet hours' rule, as
    many as the Python twin writes (its BOUNDS), and raises the same error beyond them."""
    twin = KINDS[kind]
    name = kind.upper()
    assert _lua_local(f"{name}_BOUNDS") == str(twin.BOUNDS)  # type: ignore[attr-defined]
    assert re.search(rf"\[{kind}\.code\] = {name}_BOUNDS", LUA)
    assert _lua_string(f"{name}_OUTSIDE") == twin.OUTSIDE  # type: ignore[attr-defined]
    rule = Rule("3/day", by="a", calendar=True, tz="UTC")
    quiet = QuietHours("21:00", "08:00", tz="UTC") if kind == "quiet" else None
    policy = Policy("p", rule if quiet is None else Rule("3/day", by="a"), quiet=quiet)
    plan = PolicyPlan(policy, "fg")
    (part,) = plan.parts_for({"a": "x"}, 1_781_200_000_000_000)
    spec = part.specs[-1]
    assert spec.twin is twin
    assert len(spec.bounds) == twin.BOUNDS  # type: ignore[attr-defined]
    assert part.spec_text.split()[-len(spec.bounds) :] == [str(b) for b in spec.bounds]


def test_the_python_twin_reads_a_packed_log_as_the_contract_says() -> None:
    width, base = 3, 10**12
    head = STATE_FORMATS["sliding-log"]
    assert contract.widths(head) == (1, 7)
    raw = width.to_bytes(1, "big") + base.to_bytes(7, "big")
    raw += b"".join(offset.to_bytes(width, "big") for offset in (0, 5, 2**20))
    assert list(TWINS[Strategy.SLIDING_LOG].decode(raw)) == [base, base + 5, base + 2**20]


def _python_functions(module: ModuleType) -> list[str]:
    return [
        name
        for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == module.__name__
    ]


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_twin_function_exists_on_both_sides_in_the_same_order(kind: str) -> None:
    twin = KINDS[kind]
    module = inspect.getmodule(twin.load)
    assert module is not None
    assert twin.code == STRATEGY_CODES[kind]
    lua_name = kind.replace("-", "_")
    lua = re.findall(rf"^\s*function {lua_name}\.(\w+)\(", LUA, re.M)
    python = [f for f in _python_functions(module) if f in contract.TWIN_FUNCTIONS]
    assert lua == list(contract.TWIN_FUNCTIONS), "every Lua twin function is in the contract"
    assert python == list(contract.TWIN_FUNCTIONS), "every contract function has a Python twin"


def _lua_functions() -> list[str]:
    return re.findall(r"^local function (\w+)\(", LUA, re.M)


def _script_functions() -> list[str]:
    return _python_functions(twin)


def test_the_run_steps_are_defined_on_both_sides_in_the_same_order() -> None:
    """Every function both twins of the script define is a step of the contract, and every
    step is defined on both sides, in the contract's order."""
    lua, python = _lua_functions(), _script_functions()
    assert lua[-4:] == ["run", "policy", "nogrow", "bucketed"]  # run below its steps; its names
    assert "run" in python
    assert [f for f in lua if f in python and f != "run"] == list(contract.RUN_STEPS)
    assert [f for f in python if f in lua and f != "run"] == list(contract.RUN_STEPS)
    assert python.index("run") > python.index(contract.RUN_STEPS[-1])


def _calls(body: str, names: tuple[str, ...]) -> list[str]:
    return [m.group(1) for m in re.finditer(r"\b(\w+)\(", body) if m.group(1) in names]


def test_run_calls_the_steps_in_the_contracts_order_on_both_sides() -> None:
    lua_run = re.search(r"^local function run\(.*?^end$", LUA, re.M | re.S)
    assert lua_run, "policy.lua has no top-level `local function run(`"
    steps = contract.RUN_STEPS
    assert _calls(lua_run.group(0), steps) == list(steps)
    assert _calls(inspect.getsource(twin.run), steps) == list(steps)


SCREEN = 40  # lines: a function longer than this does too much (STYLE.md)


def test_no_lua_function_is_longer_than_a_screen() -> None:
    """Every Lua function is defined at the top level (no closure holds the others), and
    none is longer than a screen."""
    assert not re.search(r"^[ \t]+(local )?function \w", LUA, re.M), "a nested named function"
    lines = LUA.splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(r"(local )?function \w", line)]
    assert len(starts) > 30
    for start in starts:
        end = next(i for i in range(start, len(lines)) if lines[i] == "end")
        assert end - start + 1 <= SCREEN, f"policy.lua:{start + 1} {lines[start]!r}"


@pytest.mark.parametrize(
    "module", [twin, *sorted(set(map(inspect.getmodule, KINDS.values())), key=str)], ids=str
)
def test_no_python_twin_function_is_longer_than_a_screen(module: ModuleType) -> None:
    tree = ast.parse(inspect.getsource(module))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            assert length <= SCREEN, f"{module.__name__}.{node.name}: {length} lines"


# -- the call's layout -----------------------------------------------------------------------


def test_the_lua_names_each_argument_position_as_the_contract_orders_them() -> None:
    names = ", ".join(f"ARGV_{name.upper()}" for name in contract.ARGV)
    positions = ", ".join(str(i) for i in range(1, len(contract.ARGV) + 1))
    assert re.search(rf"^local {names} = {positions}$", LUA, re.M), names
    last = f"ARGV_{contract.ARGV[-1].upper()}"
    assert contract.ARGV_STATES[0] == "fields"
    assert _lua_local("ARGV_FIELDS") == f"{last} + 1"


def test_the_lua_reads_its_arguments_only_through_the_named_positions() -> None:
    assert re.findall(r"argv\[\s*\d", LUA) == []
    assert re.findall(r"tunpack\(argv, \d", LUA) == []


def test_a_bucketed_call_names_its_record_first() -> None:
    assert int(_lua_local("ARGV_RECORD")) == contract.ARGV_BUCKETED.index("record") + 1
    assert contract.ARGV_BUCKETED[1:] == contract.ARGV


def test_the_lua_reads_a_refund_mark_with_the_contracts_separator() -> None:
    assert _lua_local("MARK_SEPARATOR") == repr(contract.MARK_SEPARATOR)
    assert "MARK_PATTERN" in LUA.split("function give_back", 1)[1].split("\nend", 1)[0]


def test_the_nogrow_name_refuses_what_the_contract_says_grows() -> None:
    """The Lua's second name refuses exactly the calls ``contract.grows`` names (the
    encoder sends every other call there: tests/backends/test_redis_memory.py runs both)."""
    nogrow = LUA.split("local function nogrow(", 1)[1].split("\nend\n", 1)[0]
    assert "local mode = tonumber(argv[ARGV_MODE])" in nogrow
    registered = LUA.split("-- The policy function under two names", 1)[1]
    assert "callback = function(keys, argv) return nogrow(keys, argv) end," in registered
    assert "callback = bucketed(nogrow)," in registered
    assert "(mode == HIT or mode == LIMIT) and tonumber(argv[ARGV_COST]) > 0" in nogrow
    assert [contract.grows(mode, cost) for mode in contract.MODES.values() for cost in (0, 2)] == [
        False,
        True,
        *[False] * 6,
        False,
        True,
    ]


def _resp_args(packed: bytes) -> list[bytes]:
    """A RESP array of bulk strings, read back."""
    head, _, rest = packed.partition(b"\r\n")
    assert head.startswith(b"*")
    out = []
    for _ in range(int(head[1:])):
        size, _, rest = rest.partition(b"\r\n")
        assert size.startswith(b"$")
        n = int(size[1:])
        out.append(rest[:n])
        rest = rest[n + 2 :]
    assert rest == b""
    return out


@pytest.mark.parametrize("marks", [None, (7, (1, 2, 3))])
@pytest.mark.parametrize("now", [None, 1_700_000_000_000_000])
def test_the_encoder_places_each_argument_where_the_contract_says(
    now: int | None, marks: tuple[object, ...] | None
) -> None:
    """Both encoders (the wire frames and redis-py's arguments) put each of the call's values
    at its named position, then the fields, then the marks."""
    pytest.importorskip("redis")
    from freqguard.backends._resp import encode, function_args
    from freqguard.script.calls import ScriptCall

    policy = Policy(
        "p", Rule("3/minute", by="r", name="w"), Rule("5/hour", by="r", strategy="token-bucket")
    )
    plan = PolicyPlan(policy, "fg")
    (part,) = plan.parts
    mode = contract.REFUND if marks else contract.HIT
    call = ScriptCall(part, {"r": "a"}, now, 2, mode, marks)  # type: ignore[arg-type]
    expected = {
        "now": b"" if now is None else str(now).encode(),
        "cost": b"2",
        "mode": str(mode).encode(),
        "specs": part.spec_text.encode(),
    }
    fields = [layout.field(call.texts) for layout in part.layouts]
    wire = _resp_args(encode(call)[0])
    api = [a if isinstance(a, bytes) else str(a).encode() for a in function_args(call)]
    for args in (wire, api):
        argv = args[4:]  # FCALL, the function, numkeys, the record
        for position, name in enumerate(contract.ARGV):
            assert argv[position] == expected[name], name
        states = argv[len(contract.ARGV) :]
        assert states[: len(fields)] == fields
        sep = contract.MARK_SEPARATOR.encode()
        shown = [] if marks is None else [b"7", sep.join([b"1", b"2", b"3"])]
        assert states[len(fields) :] == shown
