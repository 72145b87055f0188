"""Hypothesis strategies for every replwire message, derived from the declarations (``replwire[fuzz]``).

:func:`cases` draws valid messages of any class, each with a parse/build :class:`Context` it is valid in;
:func:`tuple_data` and :func:`envelope_frames` are views of it; :func:`invalid_cases` draws message objects
that building must refuse, and says which field the :class:`~replwire.codec.EncodeError` must name;
:func:`mutants` draws bytes: real messages damaged in the ways decoders break on, and random ones.
Nothing here is written per message.

Strategy: the shared walker (:mod:`replwire.codec.walker`) turns each declaration into its layout model and
one function per node class turns a node into a strategy, drawing the fields in wire order, so that a
:class:`~replwire.codec.walker.When` evaluates its condition on the context and the fields drawn before
it.  Derived counts are never drawn (building computes them); integers range over their whole wire range
with the boundaries weighted in; strings and byte strings include empty, non-ASCII and long values.  The
walk of a concrete message along the same model (:mod:`replwire.codec.testing.sites`) tells the conditional
branches it takes (for the exhaustiveness test), the byte span of each field (to damage the length and
count fields of real messages) and the places where a value can be made invalid by its node class.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from ... import schema
from ...schema.encodings import UTF8, text_codec
from .. import messages as classes
from .. import walker
from ..messages import WireMessage
from ..scalars import LSN, Timestamp
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
from ..wire import reference
from ..wire.reference import ENVELOPE_CLASSES, LOGICAL_CLASSES
from .sites import Site, walk

__all__ = [
    "Case", "Context", "Invalid", "Site", "all_contexts", "branches", "branches_taken", "cases", "classes_of",
    "contexts", "envelope_frames", "fits", "invalid_cases", "messages", "mutants", "sites", "spans",
    "tuple_columns", "tuple_data", "value",
]

#: Every node class of the walker; :func:`value` has a rule for each (a test checks this).
HANDLED_NODES = (Int, Zero, TagByte, Text, CharOf, LengthPrefixed, Rest, DerivedCount, When, IfBytesRemain,
                 MarkedBy, CountedArray, ArrayOf, Record, MagicBytes, Checksummed)

_SCALARS = {"lsn": LSN, "timestamp": Timestamp}


# ---------------------------------------------------------------------------------------------------------
# contexts


@dataclass(frozen=True)
class Context:
    """Where a message is parsed or built: a pgoutput ``proto_version`` and ``in_stream`` state and the
    client ``encoding`` of its Strings, or one side (``sender``) of the walsender envelope."""

    layer: str
    proto_version: int | None = None
    in_stream: bool = False
    sender: str | None = None
    encoding: str = UTF8

    def parse(self, data: bytes, codec: Any = reference) -> WireMessage:
        """Parse with ``codec`` (a module with ``parse`` and ``parse_envelope``; the reference path)."""
        message: WireMessage
        if self.layer == "envelope":
            message = codec.parse_envelope(data, sender=self.sender)
        else:
            message = codec.parse(data, proto_version=self.proto_version, in_stream=self.in_stream,
                                  encoding=self.encoding)
        return message

    def build(self, message: Any, codec: Any = reference) -> bytes:
        """Build with ``codec`` (a module with ``build`` and ``build_envelope``; the reference path)."""
        data: bytes
        if self.layer == "envelope":
            data = codec.build_envelope(message)
        else:
            data = codec.build(message, proto_version=self.proto_version, in_stream=self.in_stream,
                               encoding=self.encoding)
        return data

    @property
    def params(self) -> dict[str, Any]:
        return {"proto_version": self.proto_version, "in_stream": self.in_stream,
                "encoding": text_codec(self.encoding)}

    def __str__(self) -> str:
        if self.layer == "envelope":
            return f"envelope from the {self.sender}"
        encoding = "" if text_codec(self.encoding) == UTF8 else f" in {self.encoding}"
        return f"proto {self.proto_version}{' in stream' if self.in_stream else ''}{encoding}"


def _stream_from() -> int:
    """The first protocol version with a stream state: the lowest ``since`` of a field present only
    inside a Stream Start...Stop block."""
    return min(f.meta.since for spec in schema.LOGICAL_MESSAGES for f in walker.layout(spec).fields
               if isinstance(f.node, When) and walker.Ref("param", "in_stream") in _refs(f.node.condition))


def _refs(cond: walker.Condition) -> list[walker.Ref]:
    if isinstance(cond, walker.Ref):
        return [cond]
    if isinstance(cond, walker.Compare):
        return [cond.left]
    return [ref for part in cond.parts for ref in _refs(part)]


STREAM_FROM = _stream_from()


def all_contexts() -> tuple[Context, ...]:
    """Every context: each protocol version, in and out of a stream where streams exist, each sender."""
    logical = [Context("logical", v, s) for v in range(1, schema.MAX_PROTO_VERSION + 1)
               for s in ((False, True) if v >= STREAM_FROM else (False,))]
    return tuple(logical) + tuple(Context("envelope", sender=s) for s in schema.ENVELOPE)


def _tag(cls: type[WireMessage]) -> TagByte:
    """The walker node of ``cls``'s tag, the first field of every message."""
    node = walker.layout(cls.spec).fields[0].node
    assert isinstance(node, TagByte), node
    return node


def contexts(cls: type[WireMessage]) -> tuple[Context, ...]:
    """The contexts ``cls`` exists in (from its tag's lowest protocol version, or its envelope side)."""
    if cls.spec.layer == "envelope":
        return tuple(c for c in all_contexts() if c.layer == "envelope" and c.sender is not None
                     and ENVELOPE_CLASSES[c.sender].get(cls.tag) is cls)
    low = _tag(cls).min_proto or 1
    return tuple(c for c in all_contexts() if c.proto_version is not None and c.proto_version >= low)


# ---------------------------------------------------------------------------------------------------------
# values


def _int_edges(n: Int) -> list[int]:
    low, high = n.bounds
    bits = 8 * n.size
    edges = {low, low + 1, high - 1, high, 0, 1, -1, 2 ** (bits - 1) - 1, 2 ** (bits - 1), 2**32 - 1, 2**32}
    return sorted(e for e in edges if low <= e <= high)


def _long(part: st.SearchStrategy, low: int, high: int) -> st.SearchStrategy:
    """Long values made cheaply: a short part repeated."""
    return st.builds(operator.mul, part, st.integers(low, high))


_CHARS = st.characters(codec="utf-8", exclude_characters="\0")
_TEXT = st.one_of(st.just(""), st.text(_CHARS, max_size=12),
                  st.text(st.characters(max_codepoint=0x7F, exclude_characters="\0"), max_size=12),
                  _long(st.text(_CHARS, min_size=1, max_size=3), 64, 2048))


@functools.cache
def _text(codec: str) -> st.SearchStrategy[str]:
    """Strings in ``codec`` (a client encoding's Python codec): any text that encodes in it and decodes back
    to itself, as every String the server sends does."""
    if codec == UTF8:
        return _TEXT
    chars = st.characters(codec=codec, exclude_characters="\0")
    return st.one_of(st.just(""), st.text(chars, max_size=12),
                     _long(st.text(chars, min_size=1, max_size=3), 64, 2048)).filter(
        lambda text: text.encode(codec).decode(codec) == text)


_BYTES = st.one_of(st.just(b""), st.binary(max_size=24), _long(st.binary(min_size=1, max_size=3), 64, 4096))


@functools.cache
def _leaf(n: Any, kind: str, codec: str) -> st.SearchStrategy:
    if isinstance(n, Int):
        low, high = n.bounds
        ints = st.one_of(st.sampled_from(_int_edges(n)), st.integers(low, high))
        return ints.map(_SCALARS[kind]) if kind in _SCALARS else ints
    if isinstance(n, Zero):
        return st.just(0)
    if isinstance(n, Text):
        return _text(codec)
    if isinstance(n, CharOf):
        return st.sampled_from(n.choices)
    if isinstance(n, (LengthPrefixed, Rest)):
        return _BYTES
    if isinstance(n, MagicBytes):
        return st.just(n.value)
    raise TypeError(f"not a leaf node: {n!r}")


def value(n: walker.Node, context: Context, siblings: dict[str, Any], kind: str = "") -> st.SearchStrategy:
    """The values of node ``n`` in ``context``, given the fields of its record drawn before it.

    ``kind`` is the field's ``FieldMeta.value`` (LSN and timestamp fields draw :class:`LSN` and
    :class:`Timestamp`).  Raises :class:`~replwire.codec.walker.UnknownConstruct` for a node class it has
    no rule for.
    """
    if isinstance(n, (Int, Zero, Text, CharOf, LengthPrefixed, Rest, MagicBytes)):
        return _leaf(n, kind, context.params["encoding"])
    if isinstance(n, Checksummed):  # the checksum is derived when building, like a count
        return value(n.node, context, siblings, kind)
    if isinstance(n, When):
        if walker.evaluate(n.condition, context.params, siblings):
            return value(n.node, context, siblings, kind)
        return st.none()
    if isinstance(n, IfBytesRemain) or (isinstance(n, MarkedBy) and n.optional):
        return st.one_of(st.none(), value(n.node, context, siblings, kind))
    if isinstance(n, MarkedBy):
        return value(n.node, context, siblings, kind)
    if isinstance(n, (CountedArray, ArrayOf)):
        item = value(n.item, context, {}, "")
        return st.one_of(st.lists(item, max_size=4), st.lists(item, max_size=4),
                         _long(st.lists(item, min_size=1, max_size=2), 16, 100))
    if isinstance(n, Record):
        return _record(n, getattr(classes, n.name or "", dict), context)
    raise walker.UnknownConstruct(f"no strategy for the walker node {n!r}")


@functools.cache
def _record(record: Record, cls: type, context: Context) -> st.SearchStrategy:
    @st.composite
    def draw_record(draw: st.DrawFn) -> Any:
        drawn: dict[str, Any] = {}
        for f in record.fields:
            if not isinstance(f.node, (TagByte, DerivedCount)):  # neither is an attribute: both are implied
                drawn[f.name] = draw(value(f.node, context, drawn, f.meta.value))
        return cls(**drawn)

    return draw_record()


@functools.cache
def messages(cls: type[WireMessage], context: Context) -> st.SearchStrategy[WireMessage]:
    """Messages of class ``cls`` that are valid in ``context`` (one of :func:`contexts` of ``cls``, in any
    encoding)."""
    if dataclasses.replace(context, encoding=UTF8) not in contexts(cls):
        raise ValueError(f"{cls.__name__} does not exist in {context}")
    return _record(walker.layout(cls.spec).record, cls, context)


@dataclass(frozen=True)
class Case:
    """A message and a context it is valid in."""

    message: WireMessage
    context: Context

    def build(self) -> bytes:
        return self.context.build(self.message)


def classes_of(layer: str | None = None) -> list[type[WireMessage]]:
    """Every message class (of one ``layer``: ``logical`` or ``envelope``), in declaration order."""
    found = list(LOGICAL_CLASSES.values()) if layer in (None, "logical") else []
    if layer in (None, "envelope"):
        found += [c for per_sender in ENVELOPE_CLASSES.values() for c in per_sender.values() if c not in found]
    return found


def cases(*message_classes: type[WireMessage], layer: str | None = None, proto_version: int | None = None,
          in_stream: bool | None = None, sender: str | None = None, encoding: str = UTF8) -> st.SearchStrategy[Case]:
    """Valid messages with a context each: any class (or one of ``message_classes``), any context it
    exists in (or the ones matching the keyword filters), the logical ones in the client ``encoding``."""
    pairs = [(cls, c if c.layer == "envelope" else dataclasses.replace(c, encoding=encoding))
             for cls in (message_classes or classes_of(layer)) for c in contexts(cls)
             if (proto_version is None or c.proto_version == proto_version)
             and (in_stream is None or c.in_stream == in_stream) and (sender is None or c.sender == sender)]
    if not pairs:
        raise ValueError("no message class exists in the contexts asked for")
    return st.sampled_from(pairs).flatmap(lambda pair: messages(*pair).map(lambda m: Case(m, pair[1])))


def _record_node(name: str) -> Record:
    node = walker.node(schema.RECORDS[name])
    assert isinstance(node, Record), node
    return node


def tuple_columns() -> st.SearchStrategy[classes.TupleColumn]:
    """Single tuple columns of every kind (``n``, ``u``, ``t``, ``b``), from the TupleColumn record."""
    return value(_record_node("TupleColumn"), Context("logical", 1), {})


def tuple_data() -> st.SearchStrategy[list[classes.TupleColumn]]:
    """Tuple data (the ``new``/``old``/``key`` images): lists of :func:`tuple_columns`."""
    insert = walker.layout(schema.LOGICAL["I"])
    new = next(f.node for f in insert.fields if isinstance(f.node, MarkedBy))
    return value(new.node, Context("logical", 1), {})


def envelope_frames(sender: str | None = None) -> st.SearchStrategy[Case]:
    """Walsender envelope frames (of one ``sender``, or both)."""
    return cases(layer="envelope", sender=sender)


# ---------------------------------------------------------------------------------------------------------
# concrete messages


def sites(case: Case) -> list[Site]:
    """Every place in ``case.message`` as the walker sees it, in wire order (a
    :class:`~replwire.codec.testing.sites.Site` each)."""
    return walk(case.message, case.context.params)


def spans(case: Case) -> list[Site]:
    """The sites of ``case`` that occupy bytes (tag, counts, lengths, markers and values), in wire order."""
    return [s for s in sites(case) if s.size is not None and s.present]


def fits(case: Case) -> bool:
    """Whether ``case.message`` can be built in ``case.context``: the message exists in the protocol
    version, every conditional field is set exactly when its condition holds, and every field that is
    always there is set (the values' types and ranges are not checked)."""
    if dataclasses.replace(case.context, encoding=UTF8) not in contexts(type(case.message)):
        return False
    for s in sites(case):
        if isinstance(s.node, When):
            inner_optional = isinstance(s.node.node, IfBytesRemain) or (
                isinstance(s.node.node, MarkedBy) and s.node.node.optional)
            if s.present != (s.value is not None) and not (s.present and inner_optional):
                return False
        elif s.present and s.role == "value" and s.value is None and not s.optional \
                and not isinstance(s.node, Zero):
            return False
    return True


# ---------------------------------------------------------------------------------------------------------
# exhaustiveness


def _labels(site: Site) -> Iterator[str]:
    n = site.node
    if site.role != "value":
        return
    if isinstance(n, When):
        yield f"{site.shape} {'present' if site.present else 'absent'}"
    elif isinstance(n, (IfBytesRemain, MarkedBy)) and (isinstance(n, IfBytesRemain) or n.optional):
        yield f"{site.shape} {'absent' if site.value is None else 'given'}"
    elif isinstance(n, CharOf) and site.present:
        yield f"{site.shape} = {site.value!r}"
    elif isinstance(n, (CountedArray, ArrayOf)) and site.present:
        yield f"{site.shape} {'empty' if not site.value else 'non-empty'}"


def branches_taken(case: Case) -> set[str]:
    """The branches ``case`` takes: its context, each conditional field present or absent, each optional
    field given or not, each character choice, each array empty or not."""
    name = type(case.message).__name__
    return {f"{name} in {case.context}"} | {f"{name}.{label}" for s in sites(case) for label in _labels(s)}


def branches(cls: type[WireMessage]) -> set[str]:
    """Every branch of ``cls`` that :func:`branches_taken` can report, from its layout alone."""
    found = {f"{cls.__name__} in {c}" for c in contexts(cls)}

    def walk(n: Any, shape: str) -> None:
        if isinstance(n, When):
            found.update({f"{cls.__name__}.{shape} present", f"{cls.__name__}.{shape} absent"})
            walk(n.node, shape)
        elif isinstance(n, (IfBytesRemain, MarkedBy)):
            if isinstance(n, IfBytesRemain) or n.optional:
                found.update({f"{cls.__name__}.{shape} absent", f"{cls.__name__}.{shape} given"})
            walk(n.node, shape)
        elif isinstance(n, (CountedArray, ArrayOf)):
            found.update({f"{cls.__name__}.{shape} empty", f"{cls.__name__}.{shape} non-empty"})
            walk(n.item, shape + "[]")
        elif isinstance(n, CharOf):
            found.update(f"{cls.__name__}.{shape} = {c!r}" for c in n.choices)
        elif isinstance(n, Record):
            for f in n.fields:
                walk(f.node, f"{shape}.{f.name}".lstrip("."))

    walk(walker.layout(cls.spec).record, "")
    return found


# ---------------------------------------------------------------------------------------------------------
# invalid message objects


@dataclass(frozen=True)
class Invalid:
    """A message object building must refuse in ``case.context``: ``field`` is the path the
    :class:`~replwire.codec.EncodeError` must name (``None`` for the wrong layer), ``how`` the damage."""

    case: Case
    field: str | None
    how: str


def _replace(obj: Any, path: tuple[str | int, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        items = list(obj)
        items[head] = _replace(items[head], rest, new)
        return items
    return dataclasses.replace(obj, **{head: _replace(getattr(obj, head), rest, new)})


_WRONG_TYPES = {"str": "1", "float": 1.5, "bool": True, "bytes": b"1", "list": [1], "dict": {}}


def _damage(site: Site, context: Context) -> list[tuple[str, st.SearchStrategy]]:
    """The ways to make the value at ``site`` invalid, each a label and a strategy of bad values."""
    n, out = site.node, []
    if isinstance(n, When):
        if not site.present and site.value is None:
            given = value(n.node, context, site.siblings, site.kind).filter(lambda v: v is not None)
            out.append(("a value where the condition is false", given))
        return out
    if not site.present or site.role != "value":
        return out
    if site.value is not None and not site.optional and not isinstance(n, (Zero, Record)):
        out.append(("None for a required value", st.none()))
    if isinstance(n, Int):
        low, high = n.bounds
        out.append(("out of range", st.one_of(st.integers(max_value=low - 1), st.integers(min_value=high + 1))))
        out.append(("wrong type", st.sampled_from([v for k, v in _WRONG_TYPES.items() if k != "list"])))
    elif isinstance(n, Zero):
        out.append(("not zero", st.one_of(st.integers().filter(bool), st.sampled_from([True, "0", 0.0]))))
    elif isinstance(n, Text):
        text = site.value
        out.append(("a NUL inside", st.integers(0, len(text)).map(lambda i: text[:i] + "\0" + text[i:])))
        out.append(("a lone surrogate", st.integers(0, len(text)).map(lambda i: text[:i] + "\ud800" + text[i:])))
        out.append(("wrong type", st.sampled_from([b"text", 1, ["t"]])))
    elif isinstance(n, CharOf):
        outside = st.characters(exclude_characters=n.choices)
        out.append(("not one of the choices", st.one_of(outside, st.just(""), st.just(site.value * 2))))
        out.append(("wrong type", st.sampled_from([site.value.encode("ascii"), ord(site.value), [site.value]])))
    elif isinstance(n, (LengthPrefixed, Rest)):
        out.append(("wrong type", st.sampled_from(["text", 1, [1], 1.5])))
    elif isinstance(n, (CountedArray, ArrayOf)):
        out.append(("not a list", st.sampled_from(["items", 1, {}, b"\x00"])))
    elif isinstance(n, Record):
        other = next(cls for name, cls in ((k, getattr(classes, k)) for k in schema.RECORDS) if name != n.name)
        sample = other(**{f.name: None for f in _record_node(other.__name__).fields})
        out.append(("a different record", st.sampled_from([sample, ("t", b"1"), None])))
    return out


@st.composite
def _invalid(draw: Callable[..., Any], source: st.SearchStrategy[Case]) -> Invalid:
    case = draw(source)
    cls = type(case.message)
    options: list[tuple[str, str | None, Any]] = []
    for s in sites(case):
        for how, bad in _damage(s, case.context):
            options.append((how, s.where, (s, bad)))
    low = _tag(cls).min_proto or 1
    if case.context.layer == "logical" and low > 1:
        options.append(("a protocol version without the message", "tag", None))
    options.append(("the other layer's build", None, None))
    how, where, detail = draw(st.sampled_from(options))
    if detail is not None:
        s, bad = detail
        return Invalid(Case(_replace(case.message, s.path, draw(bad)), case.context), where, how)
    if where == "tag":
        older = [c for c in all_contexts() if c.proto_version is not None and c.proto_version < low]
        return Invalid(Case(case.message, draw(st.sampled_from(older))), where, how)
    other = next(c for c in all_contexts() if c.layer != case.context.layer)
    return Invalid(Case(case.message, other), None, how)


def invalid_cases(*message_classes: type[WireMessage], layer: str | None = None) -> st.SearchStrategy[Invalid]:
    """Message objects building must refuse: a valid case with one value damaged according to its
    node class (out of range, wrong type, NUL or lone surrogate in a String, a character outside the
    choices, ``None`` where a value is required, a value where a condition is false -- an ``xid``
    outside a stream), or built where it does not exist (an older protocol version, the other layer)."""
    return _invalid(cases(*message_classes, layer=layer))


# ---------------------------------------------------------------------------------------------------------
# damaged bytes


def _special_bytes() -> bytes:
    """Every byte the declarations give a meaning to (tags, markers, characters), and 0x00, 0xFF."""
    found = {0, 0xFF}
    specs = list(schema.LOGICAL_MESSAGES) + [s for side in schema.ENVELOPE.values() for s in side.values()]
    for spec in specs:
        for n in walker.iter_nodes(walker.layout(spec).record):
            found.update(ord(c) for c in (n.tag if isinstance(n, TagByte) else n.marker if isinstance(n, MarkedBy)
                                          else n.choices if isinstance(n, CharOf) else ""))
    return bytes(sorted(found))


SPECIAL_BYTES = _special_bytes()


def _interesting(site: Site, remaining: int) -> list[int]:
    """Values to put in an integer field: its edges and, for a count or a length, values near the truth."""
    n: Int = site.node
    near = [site.value - 1, site.value + 1, remaining, remaining + 1, 2 * site.value + 1] \
        if site.role in ("count", "length") else []
    low, high = n.bounds
    return [v for v in _int_edges(n) + near if low <= v <= high]


@st.composite
def _mutant(draw: Callable[..., Any], seeds: Sequence[tuple[Context, bytes, list[Site]]]) -> tuple[Context, bytes]:
    context, original, layout_spans = draw(st.sampled_from(seeds))
    data = bytearray(original)
    # first overwrite fields in place (the spans still hold), then the byte-level damage that shifts them
    for _ in range(draw(st.integers(0, 2)) if layout_spans else 0):
        s = draw(st.sampled_from(layout_spans))
        if isinstance(s.node, (Int, Zero)):
            n = s.node if isinstance(s.node, Int) else s.node.int
            number = draw(st.sampled_from(_interesting(s, len(original) - s.offset - s.size)
                                          if isinstance(s.node, Int) else [1, 0x80, 0xFF]))
            data[s.offset:s.offset + s.size] = number.to_bytes(n.size, "big", signed=n.signed)
        elif isinstance(s.node, Text) and s.size:
            at = draw(st.integers(s.offset, s.offset + s.size - 1))
            data[at] = draw(st.sampled_from([0x41, 0xFF, 0xC3, 0xED, 0x80, 0x00]))
        elif s.size:
            data[s.offset] = draw(st.sampled_from(SPECIAL_BYTES))
    if layout_spans and draw(st.booleans()):  # cut right before or after a field
        s = draw(st.sampled_from(layout_spans))
        del data[draw(st.sampled_from([s.offset, s.offset + s.size])):]
    for _ in range(draw(st.integers(0 if layout_spans else 1, 3))):
        op = draw(st.sampled_from(["flip", "truncate", "extend", "insert", "delete", "splice", "special"]))
        at = draw(st.integers(0, len(data)))
        if op == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del data[at:]
        elif op == "extend":
            data += draw(st.binary(min_size=1, max_size=16))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif op == "delete":
            del data[at:at + draw(st.integers(1, 4))]
        elif op == "splice":
            other = draw(st.sampled_from(seeds))[1]
            data[at:] = other[draw(st.integers(0, len(other))):]
        elif op == "special" and at < len(data):
            data[at] = draw(st.sampled_from(SPECIAL_BYTES))
    if draw(st.integers(0, 3)) == 0:  # the right bytes in the wrong context
        context = draw(st.sampled_from([c for c in all_contexts() if c.layer == context.layer]))
    return context, bytes(data)


def _seed_spans(context: Context, data: bytes) -> list[Site]:
    try:
        return spans(Case(context.parse(data), context))
    except ValueError:  # a seed that does not parse (an error vector) is damaged byte-wise only
        return []


def mutants(seeds: Sequence[tuple[Context, bytes]]) -> st.SearchStrategy[tuple[Context, bytes]]:
    """Bytes for the decoder, each with a context: a seed damaged by overwriting a length or count with
    values near the truth or at the edges, another integer, a String byte (bad UTF-8, no NUL), a tag,
    marker or kind byte, by cutting it at a field boundary, then by bit flips, truncation, extension,
    insertion, deletion and splicing with another seed, sometimes parsed in another context; or random
    bytes, bare or after a valid tag."""
    tags = sorted({ord(c) for c in (*LOGICAL_CLASSES, *(t for side in ENVELOPE_CLASSES.values() for t in side))})
    random_bytes = st.tuples(st.sampled_from(all_contexts()),
                             st.one_of(st.binary(max_size=64),
                                       st.builds(lambda t, rest: bytes([t]) + rest, st.sampled_from(tags),
                                                 st.binary(max_size=64))))
    prepared = tuple((context, data, _seed_spans(context, data)) for context, data in seeds)
    return st.one_of(_mutant(prepared), _mutant(prepared), _mutant(prepared), random_bytes)
