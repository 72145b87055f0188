"""The one walker over the construct declarations: from a ``Struct`` to a plain layout model.

Strategy: every consumer that derives something from the declarations -- the reference docs, the
Hypothesis strategies and the sites they enumerate, the fast code generator, the interpreter -- reads the
same small, typed model (:class:`Layout` and the node classes below) instead of construct internals.
:func:`layout` knows every construct class used in :mod:`replwire.schema` and raises
:class:`UnknownConstruct` for any other, so a new construct in a declaration cannot be silently misread by
a consumer.  Conditions (``this`` expressions) become :class:`Ref`/:class:`Compare`/:class:`AnyOf` trees
that can be evaluated or compiled; their text is the one :func:`replwire.schema.constructs.render_condition`
gives, kept on the :class:`When` node.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from construct import (
    Construct,
    FormatField,
    GreedyBytes,
    Pass,
    Prefixed,
    Rebuild,
    Struct,
)
from construct.expr import BinExpr, Path

from ..schema import constructs
from ..schema.fields import Field, FieldMeta
from ..schema.message_spec import MessageSpec

__all__ = [
    "AnyOf", "ArrayOf", "CharOf", "Checksummed", "Compare", "Condition", "CountedArray", "DerivedCount", "FieldNode",
    "IfBytesRemain", "Int", "KNOWN_CONSTRUCTS", "Layout", "LengthPrefixed", "MagicBytes", "MarkedBy", "Node", "Record",
    "Ref", "Rest", "TagByte", "Text", "UnknownConstruct", "When", "Zero", "condition", "evaluate", "fixed_size",
    "iter_nodes", "layout", "min_size", "node", "record_node",
]


class UnknownConstruct(TypeError):
    """A declaration uses a construct class the walker does not know."""


# ---------------------------------------------------------------------------------------------------------
# conditions


@dataclass(frozen=True)
class Ref:
    """A value a condition reads: a parse parameter (``proto_version``, ``in_stream``) or an earlier
    sibling field."""

    scope: str  # "param" or "field"
    name: str


@dataclass(frozen=True)
class Compare:
    """``left <op> right`` where ``op`` is one of ``== != >= > <= <``; ``right`` is a literal."""

    left: Ref
    op: str
    right: Any


@dataclass(frozen=True)
class AnyOf:
    """True when any of the parts is."""

    parts: tuple[Condition, ...]


Condition = Ref | Compare | AnyOf

_OPS = {operator.eq: "==", operator.ne: "!=", operator.ge: ">=", operator.gt: ">", operator.le: "<=",
        operator.lt: "<"}
_PY_OPS = {v: k for k, v in _OPS.items()}


def _ref(expr: Any) -> Ref:
    if not isinstance(expr, Path):
        raise UnknownConstruct(f"unsupported expression {expr!r}")
    # A Path prints as this['a']['b']; only this['x'] and this['_params']['x'] are used.
    parts = str(expr).removeprefix("this").strip("[]").split("][")
    names = [p.strip("'\"") for p in parts]
    if len(names) == 2 and names[0] == "_params":
        return Ref("param", names[1])
    if len(names) == 1 and not names[0].startswith("_"):
        return Ref("field", names[0])
    raise UnknownConstruct(f"unsupported path {expr!r}")


def condition(expr: Any) -> Condition:
    """The condition tree of a ``this`` expression."""
    if isinstance(expr, Path):
        return _ref(expr)
    if isinstance(expr, BinExpr):
        if expr.op is operator.or_:
            parts: list[Condition] = []
            for side in (expr.lhs, expr.rhs):
                sub = condition(side)
                parts.extend(sub.parts if isinstance(sub, AnyOf) else [sub])
            return AnyOf(tuple(parts))
        if expr.op in _OPS and isinstance(expr.lhs, Path) and not isinstance(expr.rhs, (Path, BinExpr)):
            return Compare(_ref(expr.lhs), _OPS[expr.op], expr.rhs)
    raise UnknownConstruct(f"unsupported condition {expr!r}")


def evaluate(cond: Condition, params: dict[str, Any], fields: dict[str, Any]) -> bool:
    """Evaluate a condition given the parse parameters and the sibling fields parsed so far."""
    if isinstance(cond, Ref):
        return bool((params if cond.scope == "param" else fields)[cond.name])
    if isinstance(cond, Compare):
        value = (params if cond.left.scope == "param" else fields)[cond.left.name]
        return bool(_PY_OPS[cond.op](value, cond.right))
    return any(evaluate(part, params, fields) for part in cond.parts)


# ---------------------------------------------------------------------------------------------------------
# nodes


@dataclass(frozen=True)
class Int:
    """A big-endian integer of ``size`` bytes."""

    size: int
    signed: bool
    format: str  # struct format character, e.g. "Q"

    @property
    def bounds(self) -> tuple[int, int]:
        bits = 8 * self.size
        return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if self.signed else (0, 2**bits - 1)


@dataclass(frozen=True)
class Zero:
    """An integer that must be 0."""

    int: Int


@dataclass(frozen=True)
class TagByte:
    """The message's tag byte, and the lowest protocol version it exists in (or ``None``)."""

    tag: str
    min_proto: int | None


@dataclass(frozen=True)
class Text:
    """A NUL-terminated UTF-8 String."""


@dataclass(frozen=True)
class CharOf:
    """One byte read as a character, one of ``choices``."""

    choices: str
    what: str


@dataclass(frozen=True)
class LengthPrefixed:
    """Bytes preceded by their length (``length``)."""

    length: Int


@dataclass(frozen=True)
class Rest:
    """All the remaining bytes."""


@dataclass(frozen=True)
class DerivedCount:
    """A count field computed from the length of the later field ``of`` when building."""

    int: Int
    of: str


@dataclass(frozen=True)
class When:
    """``node`` is on the wire exactly when ``condition`` holds; ``text`` is the condition as
    :func:`replwire.schema.constructs.render_condition` prints it (in error messages and in the docs)."""

    condition: Condition
    node: Node
    text: str


@dataclass(frozen=True)
class IfBytesRemain:
    """``node`` is on the wire exactly when bytes remain after the fields before it."""

    node: Node


@dataclass(frozen=True)
class MarkedBy:
    """``node`` introduced by the one-byte ``marker``; ``optional``: present exactly when the marker is."""

    marker: str
    optional: bool
    expect: str
    node: Node


@dataclass(frozen=True)
class CountedArray:
    """An array preceded by its element count (derived when building)."""

    count: Int
    item: Node


@dataclass(frozen=True)
class ArrayOf:
    """An array whose count is the earlier field ``count_field``."""

    count_field: str
    item: Node


@dataclass(frozen=True)
class MagicBytes:
    """Fixed bytes identifying a file format."""

    value: bytes


@dataclass(frozen=True)
class Checksummed:
    """``node`` followed by a big-endian CRC-32 of its bytes."""

    node: Node


@dataclass(frozen=True)
class FieldNode:
    """One named field of a record."""

    name: str
    meta: FieldMeta
    node: Node


@dataclass(frozen=True)
class Record:
    """A sequence of named fields (a construct ``Struct``); ``name`` for the nested ones."""

    fields: tuple[FieldNode, ...]
    name: str | None = None


Node = (Int | Zero | TagByte | Text | CharOf | LengthPrefixed | Rest | DerivedCount | When | IfBytesRemain
        | MarkedBy | CountedArray | ArrayOf | Record | MagicBytes | Checksummed)

#: Every construct class the walker understands (checked against the schema by a test).
KNOWN_CONSTRUCTS: tuple[type, ...] = (
    Struct, Field, constructs.Tag, constructs.When, constructs.Tail, constructs.Marked, constructs.Counted,
    constructs.Items, constructs.PgString, constructs.Char, constructs.MustBeZero, FormatField, Prefixed, Rebuild,
    type(GreedyBytes), type(Pass), constructs.Magic, constructs.Crc32,
)


def _record_names() -> dict[int, str]:
    from .. import schema

    return {id(struct): name for name, struct in schema.RECORDS.items()}


def _int(c: FormatField) -> Int:
    if c.fmtstr[0] != ">" or c.fmtstr[1] not in "BbHhLlQq":
        raise UnknownConstruct(f"unsupported integer format {c.fmtstr!r}")
    code = c.fmtstr[1]
    return Int(size=c.length, signed=code.islower(), format=code)


def node(c: Construct, names: dict[int, str] | None = None) -> Node:
    """The node of one construct (see :func:`layout` for whole declarations)."""
    names = _record_names() if names is None else names
    kind = type(c)
    if kind is Struct:
        return Record(tuple(field_node(sc, names) for sc in c.subcons), names.get(id(c)))
    if kind is constructs.Tag:
        return TagByte(c.tag.decode("ascii"), c.min_proto)
    if kind is constructs.When:
        return When(condition(c.condfunc), node(c.thensubcon, names), constructs.render_condition(c.condfunc))
    if kind is constructs.Tail:
        return IfBytesRemain(node(c.subcon, names))
    if kind is constructs.Marked:
        return MarkedBy(c.marker.decode("ascii"), c.optional, c.expect, node(c.subcon, names))
    if kind is constructs.Counted:
        return CountedArray(_int(c.countfield), node(c.subcon, names))
    if kind is constructs.Items:
        return ArrayOf(_ref(c.count).name, node(c.subcon, names))
    if kind is constructs.PgString:
        return Text()
    if kind is constructs.Magic:
        return MagicBytes(c.value)
    if kind is constructs.Crc32:
        return Checksummed(node(c.subcon, names))
    if kind is constructs.Char:
        return CharOf(c.choices, c.what)
    if kind is constructs.MustBeZero:
        return Zero(_int(c.subcon))
    if kind is FormatField:
        return _int(c)
    if kind is Prefixed:
        if c.subcon is not GreedyBytes or type(c.lengthfield) is not FormatField:
            raise UnknownConstruct(f"unsupported Prefixed form {c!r}")
        return LengthPrefixed(_int(c.lengthfield))
    if c is GreedyBytes:
        return Rest()
    if kind is Rebuild:
        of = _length_of(c.func)
        return DerivedCount(_int(c.subcon), of)
    raise UnknownConstruct(f"the walker does not know {kind.__module__}.{kind.__qualname__} ({c!r})")


def _length_of(func: Any) -> str:
    # len_(this.x) prints as "len_(this['x'])"
    text = repr(func)
    if text.startswith("len_(this['") and text.endswith("'])"):
        return text[len("len_(this['"):-len("'])")]
    raise UnknownConstruct(f"unsupported derived count {text}")


def field_node(c: Construct, names: dict[int, str]) -> FieldNode:
    if type(c) is not Field:
        raise UnknownConstruct(f"every member of a declaration must be a Field, got {c!r}")
    return FieldNode(c.name, c.meta, node(c.subcon, names))


@dataclass(frozen=True)
class Layout:
    """A whole message: its spec and the record of its fields (the tag first)."""

    spec: MessageSpec
    record: Record

    @property
    def fields(self) -> tuple[FieldNode, ...]:
        return self.record.fields


def record_node(c: Construct, names: dict[int, str] | None = None) -> Record:
    """The record of a declaration that is a ``Struct`` (a message, a record, a part of the capture file):
    :func:`node` of it, but typed as the :class:`Record` its callers read fields from; any other construct
    raises :class:`UnknownConstruct`."""
    n = node(c, names)
    if not isinstance(n, Record):
        raise UnknownConstruct(f"a declaration must be a Struct, got {c!r}")
    return n


def layout(spec: MessageSpec) -> Layout:
    """The layout model of one declared message."""
    return Layout(spec, record_node(spec.declaration))


def fixed_size(n: Node) -> int | None:
    """The size in bytes of a node that always has the same size, else ``None``."""
    if isinstance(n, Int):
        return n.size
    if isinstance(n, (Zero, DerivedCount)):
        return n.int.size
    if isinstance(n, (TagByte, CharOf)):
        return 1
    if isinstance(n, MagicBytes):
        return len(n.value)
    if isinstance(n, Checksummed):
        inner = fixed_size(n.node)
        return None if inner is None else inner + 4
    if isinstance(n, Record):
        total = 0
        for f in n.fields:
            size = fixed_size(f.node)
            if size is None:
                return None
            total += size
        return total
    return None


def min_size(n: Node) -> int:
    """The fewest bytes a node can take on the wire."""
    fixed = fixed_size(n)
    if fixed is not None:
        return fixed
    if isinstance(n, Text):
        return 1
    if isinstance(n, LengthPrefixed):
        return n.length.size
    if isinstance(n, CountedArray):
        return n.count.size
    if isinstance(n, MarkedBy):
        return 0 if n.optional else 1 + min_size(n.node)
    if isinstance(n, Checksummed):
        return min_size(n.node) + 4
    if isinstance(n, Record):
        return _record_min_size(n)
    return 0  # Rest, When, IfBytesRemain, ArrayOf: can be empty


def _record_min_size(record: Record) -> int:
    """Sum of the fields' minimum sizes, where a field present only when an earlier optional sibling is
    absent (``old`` after ``key``) makes the pair "one of the two"."""
    sizes = {f.name: min_size(f.node) for f in record.fields}
    for f in record.fields:
        if not isinstance(f.node, When):
            continue
        cond = f.node.condition
        if isinstance(cond, Compare) and cond.left.scope == "field" and cond.op == "==" and cond.right is None:
            sibling = next(s for s in record.fields if s.name == cond.left.name)
            if isinstance(sibling.node, MarkedBy) and sibling.node.optional:
                present = 1 + min_size(sibling.node.node)
                sizes[sibling.name] = 0
                sizes[f.name] = min(present, min_size(f.node.node))
    return sum(sizes.values())


def iter_nodes(n: Node) -> Iterator[Node]:
    """Every node under ``n`` (``n`` included), depth first."""
    yield n
    if isinstance(n, Record):
        for f in n.fields:
            yield from iter_nodes(f.node)
    elif isinstance(n, (When, IfBytesRemain, MarkedBy, Checksummed)):
        yield from iter_nodes(n.node)
    elif isinstance(n, (CountedArray, ArrayOf)):
        yield from iter_nodes(n.item)
