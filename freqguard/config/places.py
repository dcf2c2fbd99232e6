"""Where in a configuration file something is: the line of a path of the document (TOML
from its text, YAML from its nodes), and the words that name the policy and the rule."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from freqguard.config.schema import SchemaError
from freqguard.errors import ConfigError

__all__ = ["Where", "key_named", "parse_yaml", "place_of", "toml_lines"]

Where = Callable[[tuple[str | int, ...]], int | None]  # a path in the document -> its line


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
    try:
        import yaml
    except ImportError:
        raise ConfigError(
            f"{source}: a YAML file needs PyYAML (pip install 'freqguard[yaml]')"
        ) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        _no_alias(node, source)  # before anything walks the document
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply to be a configuration") from None

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

    def where(path: tuple[str | int, ...]) -> int | None:
        if not path:
            return None
        if path[0] != "policy":
            first = policies[0] if policies else len(lines)
            found = key_line(0, first, str(path[0]))
            return None if found is None else found + 1
        if len(path) < 2 or not isinstance(path[1], int) or path[1] >= len(policies):
            return None
        start, end = block(path[1])
        if len(path) < 4 or path[2] != "rules" or not isinstance(path[3], int):
            found = key_line(start + 1, end, str(path[2])) if len(path) > 2 else None
            return (found if found is not None else start) + 1
        tables = [
            i for i in range(start, end) if re.match(r"\s*\[\[\s*policy\.rules\s*\]\]", lines[i])
        ]
        inline = [
            i
            for i in range(start, end)
            if re.match(r"\s*\{", lines[i]) or re.search(r"\brules\s*=\s*\[\s*\{", lines[i])
        ]
        rows = tables or inline
        return (rows[path[3]] if path[3] < len(rows) else start) + 1

    return where


def place_of(source: str, where: Where, path: tuple[str | int, ...], data: object) -> str:
    """``file:line: policy 'p', rule 2 ('name')``, as much of it as is known."""
    line = where(path)
    head = f"{source}:{line}" if line is not None else source
    words = []
    if len(path) >= 2 and path[0] == "policy" and isinstance(path[1], int):
        policy = data["policy"][path[1]] if isinstance(data, Mapping) else {}
        name = policy.get("name") if isinstance(policy, Mapping) else None
        words.append(f"policy {name!r}" if isinstance(name, str) else f"policy {path[1] + 1}")
        if len(path) >= 4 and path[2] == "rules" and isinstance(path[3], int):
            rules = policy.get("rules") if isinstance(policy, Mapping) else None
            rule = rules[path[3]] if isinstance(rules, list) and path[3] < len(rules) else None
            label = rule.get("name") or rule.get("rate") if isinstance(rule, Mapping) else None
            words.append(f"rule {path[3] + 1}" + (f" ({label!r})" if label else ""))
    return head + (": " + ", ".join(words) if words else "")


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
