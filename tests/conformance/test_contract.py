"""The Lua twin is held to ``freqguard/script/contract.py``, and the Python twin to it too.

The Lua's constants, strategy codes, pack formats and registry are generated from the Python
(``lua/contract.lua``, by ``scripts/lua_contract.py``; ``test_lua_contract.py`` holds it
current), and no hand-written Lua file states one again. What is left to hold by reading
the Lua: how it parses the specs, reads its arguments and refund marks, the steps of the
policy function (same names, same order, called in that order), its entry points and the
tail that registers them, and that neither twin's functions grow past a screen. The specs
and states as the Python twin writes and reads them, in the contract's formats, are
``test_contract_formats.py``'s; each strategy's own parts (its twin functions in order
among them) are ``test_strategy_parts.py``'s; the rig is ``contract_rig.py``."""

from __future__ import annotations

import ast
import inspect
import re
from types import ModuleType

import pytest

from freqguard import Policy, Rule
from freqguard.engine.plan import PolicyPlan
from freqguard.script import contract, library, twin
from freqguard.script.strategies import KINDS
from tests.conformance.contract_rig import FILES, _file

GENERATED = "lua/contract.lua"
#: the hand-written ones
WRITTEN = {path: text for path, text in FILES.items() if path != GENERATED}
LUA = library.body()


def _generated_names() -> set[str]:
    """Every name the generated file declares."""
    names: set[str] = set()
    for found in re.findall(r"^local ([\w, ]+?) =", FILES[GENERATED], re.M):
        names.update(name.strip() for name in found.split(","))
    return names


def test_no_hand_written_lua_states_a_generated_value_again() -> None:
    """Every constant the twins share is declared once, in the generated file: a
    hand-written file declares none of its names, and writes no pack format of its own but
    a sliding log's entries (an offset of 1 to 7 bytes)."""
    generated = _generated_names()
    assert {
        "HIT",
        "ARGV_FIELDS",
        "FIELD_HEAD",
        "TWINS",
        "BOUNDS",
        "gcra",
        "GCRA_SHORT",
    } <= generated
    entries = "local FORMATS = {" + ", ".join(f"'>I{w}'" for w in range(1, 8)) + "}"
    for path, text in WRITTEN.items():
        for found in re.findall(r"^\s*local ([\w, ]+?)(?: =|$)", text, re.M):
            names = {name.strip() for name in found.split(",")}
            assert not names & generated, f"{path} declares {sorted(names & generated)} again"
        for line in text.splitlines():
            if re.search(r"'>?[BI][\dBI]*'", line.split("--", 1)[0]):
                assert line.startswith(entries), f"{path}: a format of its own: {line!r}"


def _read_fields(function: str) -> list[str]:
    """The fields a Lua parse function reads, by their position from ``at``."""
    body = re.search(rf"^local function {function}\(.*?^end$", _file("specs"), re.M | re.S)
    assert body, function
    reads = re.findall(r"(\w+) = v\[at(?: \+ (\d+))?\]", body.group(0))
    assert sorted(int(at or 0) for _, at in reads) == list(range(len(reads)))
    return [name for name, _ in sorted(reads, key=lambda read: int(read[1] or 0))]


def test_the_lua_parses_the_specs_as_the_contract_says() -> None:
    assert _read_fields("parse_state") == list(contract.SPEC_STATE)
    assert _read_fields("parse_rule") == list(contract.SPEC_RULE)


def _python_functions(module: ModuleType) -> list[str]:
    return [
        name
        for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == module.__name__
    ]


def _lua_functions() -> list[str]:
    return re.findall(r"^local function (\w+)\(", LUA, re.M)


def test_the_steps_and_run_are_in_the_twin_s_file() -> None:
    """lua/twin.lua is the Lua of script/twin.py: every step and run, and nothing after run
    but the entry points (lua/entries.lua)."""
    steps = re.findall(r"^local function (\w+)\(", _file("twin"), re.M)
    assert [f for f in steps if f in contract.RUN_STEPS] == list(contract.RUN_STEPS)
    assert steps[-1] == "run"
    assert re.findall(r"^local function (\w+)\(", _file("entries"), re.M) == [
        "policy",
        "nogrow",
        "binned",
    ]


def _script_functions() -> list[str]:
    return _python_functions(twin)


def test_the_run_steps_are_defined_on_both_sides_in_the_same_order() -> None:
    """Every function both twins of the script define is a step of the contract, and every
    step is defined on both sides, in the contract's order."""
    lua, python = _lua_functions(), _script_functions()
    assert lua[-4:] == ["run", "policy", "nogrow", "binned"]  # run below its steps; its names
    assert "run" in python
    assert [f for f in lua if f in python and f != "run"] == list(contract.RUN_STEPS)
    assert [f for f in python if f in lua and f != "run"] == list(contract.RUN_STEPS)
    assert python.index("run") > python.index(contract.RUN_STEPS[-1])


def _calls(body: str, names: tuple[str, ...]) -> list[str]:
    return [m.group(1) for m in re.finditer(r"\b(\w+)\(", body) if m.group(1) in names]


def test_run_calls_the_steps_in_the_contracts_order_on_both_sides() -> None:
    lua_run = re.search(r"^local function run\(.*?^end$", _file("twin"), re.M | re.S)
    assert lua_run, "lua/twin.lua has no top-level `local function run(`"
    steps = contract.RUN_STEPS
    assert _calls(lua_run.group(0), steps) == list(steps)
    assert _calls(inspect.getsource(twin.run), steps) == list(steps)


SCREEN = 40  # lines: a function longer than this does too much (STYLE.md)


@pytest.mark.parametrize("path", list(WRITTEN))
def test_no_lua_function_is_longer_than_a_screen(path: str) -> None:
    """Every Lua function is defined at the top level (no closure holds the others), and
    none is longer than a screen."""
    text = WRITTEN[path]
    assert not re.search(r"^[ \t]+(local )?function \w", text, re.M), "a nested named function"
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(r"(local )?function \w", line)]
    for start in starts:
        end = next(i for i in range(start, len(lines)) if lines[i] == "end")
        assert end - start + 1 <= SCREEN, f"{path}:{start + 1} {lines[start]!r}"


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


def test_the_lua_reads_its_arguments_only_through_the_named_positions() -> None:
    """Every file reads ``argv`` at the positions the generated file names (contract.py
    ARGV, ARGV_STATES, ARGV_BINNED), never at a number of its own."""
    for path, text in WRITTEN.items():
        assert re.findall(r"argv\[\s*\d", text) == [], path
        assert re.findall(r"tunpack\(argv, \d", text) == [], path
    assert "argv[ARGV_RECORD]" in _file("entries")  # a binned call's record, first


def test_the_lua_reads_a_refund_mark_with_the_contracts_separator() -> None:
    base = FILES["strategies/base.lua"]
    assert "MARK_PATTERN" in base.split("function give_back", 1)[1].split("\nend", 1)[0]
    assert "local MARK_PATTERN = '^(%d+)' .. MARK_SEPARATOR .. '(%d+)' .. MARK_SEPARATOR" in base


def test_the_nogrow_name_refuses_what_the_contract_says_grows() -> None:
    """The Lua's second name refuses exactly the calls ``contract.grows`` names (the
    encoder sends every other call there: tests/backends/test_redis_memory.py runs both)."""
    nogrow = _file("entries").split("local function nogrow(", 1)[1].split("\nend\n", 1)[0]
    assert "local mode = tonumber(argv[ARGV_MODE])" in nogrow
    registered = FILES[library.FUNCTION_TAIL]
    assert "callback = function(keys, argv) return nogrow(keys, argv) end," in registered
    assert "callback = binned(nogrow)," in registered
    assert "(mode == HIT or mode == LIMIT or mode == CLAIM) and tonumber(argv[ARGV_COST]) > 0" in (
        nogrow
    )
    assert [contract.grows(mode, cost) for mode in contract.MODES.values() for cost in (0, 2)] == [
        False,
        True,
        *[False] * 6,
        False,
        True,
        False,
        True,
    ]


# -- the library -----------------------------------------------------------------------------


def test_the_library_is_its_files_joined_in_the_manifest_s_order() -> None:
    """One chunk: the head, every file of the manifest in order, then the tail; the
    strategies' files are the registry's, in its order, after what they share."""
    code = library.function_library()
    assert code.startswith(library.FUNCTION_HEAD)
    at = [code.index(FILES[path]) for path in (*library.MANIFEST, library.FUNCTION_TAIL)]
    assert at == sorted(at)
    assert len(set(library.MANIFEST)) == len(library.MANIFEST)
    strategies = [p for p in library.MANIFEST if p.startswith("strategies/")]
    assert strategies == [
        "strategies/base.lua",
        *[f"strategies/{k.replace('-', '_')}.lua" for k in KINDS],
    ]
    assert library.MANIFEST[:2] == ("lua/prelude.lua", GENERATED)  # before any reader


def test_only_the_tail_registers_and_names_the_functions() -> None:
    """The body defines the entry points and registers nothing, under no name: another tail
    (an EVAL script's) can end the same body."""
    for path, text in FILES.items():
        registers = "redis.register_function" in text or library.NAME in text
        assert registers == (path == library.FUNCTION_TAIL), path
    assert library.NAME not in library.body()


def test_the_joined_library_keeps_below_lua_s_200_locals() -> None:
    """A Lua chunk holds at most 200 local variables at once: the files join into one, so
    their top-level locals add up (group constants in tables, or a file's own in a
    do ... end block, before this fails)."""
    count = 0
    for line in LUA.splitlines():
        found = re.match(r"local function \w|local ([\w, ]+?)(?: =|$)", line)
        if found:
            count += 1 if found.group(1) is None else len(found.group(1).split(","))
    assert 100 < count < 200, count


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


def test_the_script_header_lists_every_word_a_state_s_spec_carries() -> None:
    """``contract.SPEC_STATE`` is now (code, shadow, rule_count, window, cap) and
    ``spec_text`` writes five words per state, which ``specs.lua`` reads; the header of the
    policy function (``lua/prelude.lua``, ARGV_SPECS: "for each state its strategy's code
    (see TWINS), shadow (0/1) and number of rules, then for each rule ...") still lists
    three, so a reader of the header (or a client written from it) sends specs the
    function misreads by two words a state. The header's per-state list names the window
    and the count each state keeps (STYLE.md 3: each header lists ARGV with units)."""
    text = " ".join(_file("prelude").replace("--", " ").split())
    found = re.search(r"\[ARGV_SPECS\](.*?)\[ARGV_FIELDS", text)
    assert found is not None
    per_state = re.search(r"for each state(.*?)then for each rule", found.group(1))
    assert per_state is not None, found.group(1)
    described = per_state.group(1)
    assert "window" in described, described
    assert re.search(r"\b(count|cap)\b", described), described
