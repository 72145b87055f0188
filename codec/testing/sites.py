"""A concrete message as the shared walker sees it: each field's place, value, presence and bytes.

:func:`walk` lists the :class:`Site` of every field of a message (and of the tag, counts, lengths and
markers around them) in wire order: where its bytes are, whether it is on the wire under the given parse
context, and whether ``None`` would do for it.  The strategies use it to tell which conditional branches
a message takes, to find the length and count fields of real messages to damage, and to damage a message
object field by field; the tests use it to check the layout model against the bytes construct builds.

Strategy: the walk follows the layout model of :mod:`replwire.codec.walker`, evaluating each
:class:`~replwire.codec.walker.When` on the parameters and the fields before it, and computing sizes from
the values (a String's UTF-8 plus its NUL, a byte string's length after its length field).  It never
builds anything, and it is total: a value that is missing or of the wrong type is a site without bytes,
so a damaged message can be walked too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...schema.encodings import UTF8
from .. import messages as classes
from .. import walker
from ..messages import WireMessage
from ..walker import (
    ArrayOf,
    CharOf,
    Checksummed,
    CountedArray,
    DerivedCount,
    IfBytesRemain,
    Int,
    LengthPrefixed,
    MagicBytes,
    MarkedBy,
    Record,
    Rest,
    TagByte,
    Text,
    When,
    Zero,
)

__all__ = ["Site", "walk"]



@dataclass(frozen=True)
class Site:
    """One place in a concrete message, in wire order.

    ``path`` leads from the message to the value (attribute names and list indexes); ``role`` is
    ``value``, ``tag``, ``count`` (a derived count), ``length`` (a byte length), or ``marker``;
    ``offset``/``size`` its bytes on the wire (``size`` is ``None`` for wrappers and records);
    ``present`` whether it is on the wire; ``optional`` whether ``None`` is a valid value for it;
    ``kind`` the field's ``FieldMeta.value``; ``siblings`` the record's fields before it.
    """

    path: tuple[str | int, ...]
    node: Any
    value: Any
    role: str
    offset: int
    size: int | None
    present: bool
    optional: bool
    kind: str
    siblings: dict[str, Any]

    @property
    def where(self) -> str:
        """The path as an error names it: ``columns[1].type_id``."""
        return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in self.path).lstrip(".")

    @property
    def shape(self) -> str:
        """The path with list indexes left out: ``columns[].type_id``."""
        return "".join("[]" if isinstance(p, int) else f".{p}" for p in self.path).lstrip(".")


def walk(message: WireMessage, params: dict[str, Any]) -> list[Site]:
    """Every place in ``message`` as the walker sees it, in wire order, under the parse/build parameters
    ``params`` (``proto_version``, ``in_stream``, ``encoding``: the Python codec of the Strings)."""
    out: list[Site] = []
    _visit_record(walker.layout(message.spec).record, message, params, (), 0, out)
    return out


def _visit_record(record: Record, obj: Any, params: dict[str, Any], path: tuple[str | int, ...], offset: int,
                  out: list[Site]) -> int:
    drawn: dict[str, Any] = {}
    for f in record.fields:
        here = path + (f.name,)
        if isinstance(f.node, TagByte):
            out.append(Site(here, f.node, obj.tag, "tag", offset, 1, True, False, "tag", dict(drawn)))
            offset += 1
        elif isinstance(f.node, DerivedCount):
            counted = obj[f.node.of] if isinstance(obj, dict) else getattr(obj, f.node.of)
            count = len(counted) if isinstance(counted, (list, tuple)) else 0  # 0 for a damaged array
            out.append(Site(here, f.node.int, count, "count", offset, f.node.int.size, True, False, "count",
                            dict(drawn)))
            offset += f.node.int.size
        else:
            current = obj[f.name] if isinstance(obj, dict) else getattr(obj, f.name)
            offset = _visit(f.node, current, params, dict(drawn), here, offset, True, False, f.meta.value, out)
            drawn[f.name] = current
    return offset


def _visit(n: Any, current: Any, params: dict[str, Any], siblings: dict[str, Any], path: tuple[str | int, ...],
           offset: int, present: bool, optional: bool, kind: str, out: list[Site]) -> int:
    def site(node: Any = n, role: str = "value", size: int | None = None, value: Any = current,
             at: int = offset) -> None:
        out.append(Site(path, node, value, role, at, size, present, optional, kind, siblings))

    if isinstance(n, When):
        present = present and walker.evaluate(n.condition, params, siblings)
        site()
        return _visit(n.node, current, params, siblings, path, offset, present, optional, kind, out) \
            if present else offset
    if isinstance(n, (IfBytesRemain, MarkedBy)):
        optional = optional or isinstance(n, IfBytesRemain) or n.optional
        site()
        if current is None:
            return offset
        if isinstance(n, MarkedBy):
            site(node=n, role="marker", size=1, value=n.marker)
            offset += 1
        return _visit(n.node, current, params, siblings, path, offset, present, optional, kind, out)
    if current is None or not _walkable(n, current, params.get("encoding", UTF8)):  # missing, or wrong: no bytes
        site()
        return offset
    if isinstance(n, (CountedArray, ArrayOf)):
        site()
        if isinstance(n, CountedArray):
            site(node=n.count, role="count", size=n.count.size, value=len(current))
            offset += n.count.size
        for index, item in enumerate(current):
            offset = _visit(n.item, item, params, {}, path + (index,), offset, present, False, "", out)
        return offset
    if isinstance(n, Record):
        site()
        return _visit_record(n, current, params, path, offset, out)
    if isinstance(n, Checksummed):
        offset = _visit(n.node, current, params, siblings, path, offset, present, optional, kind, out)
        site(node=n, role="checksum", size=4, value=None, at=offset)
        return offset + 4
    if isinstance(n, LengthPrefixed):
        site(node=n.length, role="length", size=n.length.size, value=len(current))
        site(size=len(current), at=offset + n.length.size)
        return offset + n.length.size + len(current)
    sizes: dict[type, Callable[[], int]] = {
        Int: lambda: n.size, Zero: lambda: n.int.size, CharOf: lambda: 1, Rest: lambda: len(current),
        MagicBytes: lambda: len(n.value), Text: lambda: len(current.encode(params.get("encoding", UTF8))) + 1}
    size = sizes[type(n)]()
    site(size=size)
    return offset + size


def _walkable(n: Any, current: Any, codec: str) -> bool:
    """Whether ``current`` has the Python type node ``n`` builds from (so its size can be told; a String's
    text must be encodable in the ``codec`` of the context)."""
    if isinstance(n, (CountedArray, ArrayOf)):
        return isinstance(current, (list, tuple))
    if isinstance(n, Record):
        return isinstance(current, getattr(classes, n.name or "", dict))
    if isinstance(n, Text):
        if not isinstance(current, str):
            return False
        try:
            current.encode(codec)
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(n, (LengthPrefixed, Rest)):
        return isinstance(current, (bytes, bytearray, memoryview))
    if isinstance(n, CharOf):
        return isinstance(current, str)
    return True
