"""Where in a configuration file something is: the line of a path of the document (TOML
from its text, YAML from its nodes), and the words that name the policy and the rule."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from freqguard import errors
from freqguard.config.schema import SchemaError, shown
from freqguard.engine.settings import shortened
from freqguard.errors import ConfigError, install

__all__ = [
    "MOST_PROBLEMS",
    "Where",
    "key_named",
    "listed",
    "named_path",
    "parse_yaml",
    "place_of",
    "toml_lines",
]

Where = Callable[[tuple[str | int, ...]], int | None]  # a path in the document -> its line


#: The most levels of mappings and sequences a YAML configuration may nest (its own need
#: four: the file, a policy list, a policy, its rules, a rule).
MAX_DEPTH = 32


@cache
def _strict_loader() -> Any:
    """PyYAML's safe loader, stricter: a key given twice in one mapping is an error (PyYAML
    keeps the last silently: a second ``rules:`` would replace the first), and a value that
    cannot be built is an error at its line, as every other mistake is."""
    import yaml

    class Strict(yaml.SafeLoader):
        source = "<string>"
        depth = 0

        def _fail(self, node: Any, problem: str) -> ConfigError:
            return ConfigError(f"{self.source}:{node.start_mark.line + 1}: {problem}")

        def compose_node(self, parent: Any, index: Any) -> Any:
            # the parser reads as the composer asks: refused at the bound, a document nested
            # 100,000 levels deep costs what MAX_DEPTH + 1 do (PyYAML's scanner is
            # quadratic in the depth of flow collections)
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    line = self.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
                    raise ConfigError(
                        f"{self.source}:{line}: nested too deeply (more than {MAX_DEPTH} "
                        "levels); a configuration nests a few"
                    )
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_object(self, node: Any, deep: bool = False) -> Any:
            try:
                return super().construct_object(node, deep)
            except ConfigError:  # one of ours, from below: it names its place already
                raise
            except ValueError as exc:  # a date out of range, an offset of 99 hours
                raise self._fail(node, f"cannot read {shown(node.value)}: {exc}") from None

        def construct_yaml_int(self, node: Any) -> int:
            digits = sum(c.isdigit() for c in str(node.value))
            if digits > sys.get_int_max_str_digits():
                raise self._fail(node, f"an integer of {digits} digits is out of range")
            return int(super().construct_yaml_int(node))

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            self.flatten_mapping(node)  # a merge key's pairs join the mapping's own
            seen: dict[object, int] = {}
            for key_node, _ in sorted(node.value, key=lambda pair: _position(pair[0])):
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # unhashable: PyYAML's own error says so below
                    continue
                if first is not None:
                    raise self._fail(
                        key_node,
                        f"key {shown(key)} is given twice (first on line {first}); "
                        "a key appears once in its table",
                    )
                seen[key] = key_node.start_mark.line + 1
            return dict(super().construct_mapping(node, deep))

    Strict.add_constructor("tag:yaml.org,2002:int", Strict.construct_yaml_int)
    return Strict


def _position(node: Any) -> tuple[int, int]:
    return node.start_mark.line, node.start_mark.column


def _no_alias(root: object, source: str) -> None:
    """Refuse a node used twice (a YAML alias): a few lines of aliases of aliases would
    make a document that walking takes exponential time over ("billion laughs")."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        if id(node) in seen:
            line = node.start_mark.line + 1  # type: ignore[attr-defined]
            raise ConfigError(
                f"{source}:{line}: this node is used again through an alias (*name): "
                "YAML aliases are not supported"
            )
        seen.add(id(node))
        value = getattr(node, "value", None)
        if isinstance(value, list):
            for item in value:
                stack.extend(item if isinstance(item, tuple) else (item,))


def parse_yaml(text: str, source: str) -> tuple[object, Where]:
    """The document a YAML text holds, and where each of its paths is.

    Raises:
        ConfigError: not YAML, an alias, a key given twice in one mapping (at any depth, a
            merge key's too), a value that cannot be built (an integer past Python's digit
            limit, a date that is not one), or a document nested too deeply.
    """
    try:
        import yaml
    except ImportError:
        raise ConfigError(f"{source}: a YAML file needs PyYAML ({install('yaml')})") from None
    try:
        loader = _strict_loader()(text)  # reads the text's characters at once
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    loader.source = source
    try:
        node = loader.get_single_node()
        _no_alias(node, source)  # before anything walks the document
        data = None if node is None else loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply to be a configuration") from None
    finally:
        loader.dispose()

    def where(path: tuple[str | int, ...]) -> int | None:
        at, line = node, None
        for step in path:
            if isinstance(at, yaml.MappingNode) and isinstance(step, str):
                found = [(k, v) for k, v in at.value if k.value == step]
                if not found:
                    break
                key, at = found[0]
                line = key.start_mark.line + 1
            elif (
                isinstance(at, yaml.SequenceNode) and isinstance(step, int) and step < len(at.value)
            ):
                at = at.value[step]
                line = at.start_mark.line + 1
            else:
                break
        return line

    return ({} if data is None else data), where


def toml_lines(text: str) -> Where:
    """Where a path of a TOML document is: the line of its policy's ``[[policy]]`` table,
    of its rule (a ``[[policy.rules]]`` table, or the rule's line in an inline list), or of
    a key written as ``key = ...`` there."""
    lines = text.splitlines()
    policies = [i for i, line in enumerate(lines) if re.match(r"\s*\[\[\s*policy\s*\]\]", line)]

    def block(index: int) -> tuple[int, int]:
        end = policies[index + 1] if index + 1 < len(policies) else len(lines)
        return policies[index], end

    def key_line(start: int, end: int, key: str) -> int | None:
        for i in range(start, end):
            if re.match(rf"\s*{re.escape(key)}\s*=", lines[i]):
                return i
        return None

    def header(index: int) -> bool:
        return re.match(r"\s*\[", lines[index]) is not None

    def table_line(key: str) -> int | None:
        wanted = re.compile(rf"\s*\[\s*{re.escape(key)}\s*\]")
        return next((i for i, line in enumerate(lines) if wanted.match(line)), None)

    def where(path: tuple[str | int, ...]) -> int | None:
        if not path:
            return None
        if path[0] != "policy":
            first = policies[0] if policies else len(lines)
            found = key_line(0, first, str(path[0]))
            if found is None:  # a table of its own: [breaker]
                found = table_line(str(path[0]))
                inner = None if found is None or len(path) < 2 else str(path[1])
                if found is not None and inner is not None:
                    end = next((i for i in range(found + 1, len(lines)) if header(i)), len(lines))
                    found = key_line(found + 1, end, inner) or found
            return None if found is None else found + 1
        if len(path) < 2 or not isinstance(path[1], int) or path[1] >= len(policies):
            return None
        start, end = block(path[1])
        if len(path) < 4 or path[2] != "rules" or not isinstance(path[3], int):
            found = key_line(start + 1, end, str(path[2])) if len(path) > 2 else None
            return (found if found is not None else start) + 1
        rows = rule_rows(start, end)
        return (rows[path[3]] if path[3] < len(rows) else start) + 1

    @cache
    def rule_rows(start: int, end: int) -> list[int]:
        """The lines a policy's rules start on (found once a policy: a file of many bad
        rules asks for each)."""
        tables = [
            i for i in range(start, end) if re.match(r"\s*\[\[\s*policy\.rules\s*\]\]", lines[i])
        ]
        inline = [
            i
            for i in range(start, end)
            if re.match(r"\s*\{", lines[i]) or re.search(r"\brules\s*=\s*\[\s*\{", lines[i])
        ]
        return tables or inline

    return where


def place_of(source: str, where: Where, path: tuple[str | int, ...], data: object) -> str:
    """``file:line: policy 'p', rule 2 ('name')``, as much of it as is known."""
    line = where(path)
    head = f"{source}:{line}" if line is not None else source
    words = []
    if len(path) >= 2 and path[0] == "policy" and isinstance(path[1], int):
        policy = data["policy"][path[1]] if isinstance(data, Mapping) else {}
        name = policy.get("name") if isinstance(policy, Mapping) else None
        named = shortened(repr(name), 66) if isinstance(name, str) else None  # any length
        words.append(f"policy {named}" if named else f"policy {path[1] + 1}")
        if len(path) >= 4 and path[2] == "rules" and isinstance(path[3], int):
            rules = policy.get("rules") if isinstance(policy, Mapping) else None
            rule = rules[path[3]] if isinstance(rules, list) and path[3] < len(rules) else None
            label = rule.get("name") or rule.get("rate") if isinstance(rule, Mapping) else None
            labelled = f" ({shortened(repr(label), 66)})" if label else ""
            words.append(f"rule {path[3] + 1}{labelled}")
    return head + (": " + ", ".join(words) if words else "")


def unnamed(exc: ConfigError, name: object) -> ConfigError:
    """A policy's own error without the policy's name at its head, which the place that
    goes before it says already (``policy 'edge': policy 'edge' has two rules...``)."""
    text = str(exc)
    heads = ((f"policy {name!r}: ", ""), (f"policy {name!r} has ", "it has "))
    for head, then in (*heads, (f"policy {name!r} ", "")):  # 'policy 'edge' priorities: ...'
        if text.startswith(head):
            return ConfigError(then + text[len(head) :])
    return exc


def key_named(error: SchemaError) -> str:
    """The key a value error is about, dotted below the policy or rule the place names
    (`` breaker.failures``); for an unknown or a missing key (the message names it), the
    table it is in, if below them (`` tiers:``)."""
    path = error.path
    message = error.message
    if not path:
        return ""
    if path[0] == "policy" and len(path) >= 4 and path[2] == "rules":
        path = path[4:]
    elif path[0] == "policy" and len(path) >= 2:
        path = path[2:]
    names = [step for step in path if isinstance(step, str)]
    if message.startswith("unknown key"):  # the message names the key, the table is told
        names = names[:-1]
    if message.startswith("unknown key") or message.endswith("is missing"):
        return f" {'.'.join(names)}:" if names else ""
    return " " + ".".join(names)


#: The most problems one error lists (past them, that there are more), and the most
#: characters of each (a value quoted may be as long as the file).
MOST_PROBLEMS, MOST_PROBLEM = 20, 1000


def listed(problems: list[str], source: str) -> ConfigError:
    """One error telling every problem, each on a line of its own (the first ones of many),
    after the file's name."""
    if len(problems) == 1:
        return ConfigError(problems[0])
    at = re.compile(rf"{re.escape(source)}:(\d+)")

    def line(problem: str) -> int:  # in the file's order (a problem of no line first)
        found = at.match(problem)
        return int(found.group(1)) if found else 0

    problems = sorted(problems, key=line)
    shown = [shortened(problem, MOST_PROBLEM) for problem in problems[:MOST_PROBLEMS]]
    more = "" if len(problems) <= MOST_PROBLEMS else "\n  and more"
    head = f"{source}: {len(shown)}{'+' * bool(more)} problems:\n  "
    return ConfigError(head + "\n  ".join(shown) + more)


def named_path(path: str) -> str:
    """A path as a message names it: whole (no quotes: ``app.toml:3: ...``), or, longer than
    a file's usual or holding what does not print (a newline, a NUL, a byte not UTF-8), as
    :func:`~freqguard.errors.shown` shows a value: cut short, escaped, on one line."""
    return path if len(path) <= 200 and path.isprintable() else errors.shown(path)
