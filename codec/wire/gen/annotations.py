"""Write the type checkers' view of the message classes into ``codec/messages.py``, from the classes themselves.

The message and record classes get their fields when they are created, from their declarations in
:mod:`replwire.schema`, and no type checker can follow that.  So the body of each such class in
:mod:`replwire.codec.messages` carries an ``if TYPE_CHECKING:`` block that lists its fields -- name, type
and default, in the order of the declaration -- and this module writes those blocks from the dataclass
fields the classes have at run time.  The declarations stay the one source; ``tests/test_typing.py`` fails
when a block is stale.

``python -m replwire.codec.wire.gen`` rewrites the blocks in place, with the fast codec's module.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import pathlib
import types
from typing import Any

from ... import messages

__all__ = ["COMMAND", "render", "write"]

#: The command that rewrites the blocks (and every other generated source).
COMMAND = "python -m replwire.codec.wire.gen"

_GUARD = "if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen"
_INDENT = " " * 4


def annotation(tp: Any) -> str:
    """The source text of a field's run-time type, in the names :mod:`replwire.codec.messages` has."""
    if tp is type(None):
        return "None"
    if isinstance(tp, types.UnionType):
        return " | ".join(annotation(arg) for arg in tp.__args__)
    if isinstance(tp, types.GenericAlias):
        return f"{annotation(tp.__origin__)}[{', '.join(annotation(arg) for arg in tp.__args__)}]"
    name: str = getattr(tp, "__name__", "")
    if isinstance(tp, type) and tp in (getattr(builtins, name, None), getattr(messages, name, None)):
        return name
    raise TypeError(f"no name in replwire.codec.messages for the field type {tp!r}")


def block(cls: type) -> list[str]:
    """The lines of ``cls``'s block (class-body indentation), or none for a class without fields."""
    lines = []
    for f in dataclasses.fields(cls):
        default = "" if f.default is dataclasses.MISSING else f" = {f.default!r}"
        lines.append(f"{_INDENT * 2}{f.name}: {annotation(f.type)}{default}")
    return [_INDENT + _GUARD, *lines] if lines else []


def _is_declared(node: ast.ClassDef) -> bool:
    return any(keyword.arg in ("spec", "record") for keyword in node.keywords)


def _is_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def render(source: str) -> str:
    """``source`` (the text of :mod:`replwire.codec.messages`) with every declared class's block current."""
    lines = source.splitlines()
    edits: list[tuple[int, int, list[str]]] = []  # (first line index, end index, replacement)
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef) or not _is_declared(node):
            continue
        new = block(getattr(messages, node.name))
        body = node.body
        guard = next((statement for statement in body if _is_guard(statement)), None)
        if guard is not None:
            rest = [statement for statement in body if statement is not guard]
            assert guard.end_lineno is not None
            edits.append((guard.lineno - 1, guard.end_lineno, new or ([] if rest else [_INDENT + "pass"])))
        elif new and len(body) == 1 and isinstance(body[0], ast.Pass):
            edits.append((body[0].lineno - 1, body[0].lineno, new))
        elif new:
            first = body[0]
            has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            decorators = first.decorator_list if isinstance(first, (ast.FunctionDef, ast.ClassDef)) else []
            at = first.end_lineno if has_doc else min([first.lineno] + [d.lineno for d in decorators]) - 1
            assert at is not None
            edits.append((at, at, ([""] if has_doc else []) + new + ([] if has_doc else [""])))
    for start, end, replacement in sorted(edits, reverse=True):
        lines[start:end] = replacement
    return "\n".join(lines) + "\n"


def write() -> bool:
    """Rewrite the blocks of :mod:`replwire.codec.messages` in place; whether anything changed."""
    path = pathlib.Path(messages.__file__)
    source = path.read_text(encoding="utf-8")
    current = render(source)
    if current == source:
        return False
    path.write_text(current, encoding="utf-8")
    return True
