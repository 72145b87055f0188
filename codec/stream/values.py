"""Typed column values: a tuple column's bytes turned into a Python value by its type OID.

Strategy: psycopg 3 already knows how to read every built-in PostgreSQL type in both formats, so a
connection-less :class:`psycopg.adapt.Transformer` supplies the loaders (text ``t`` and binary ``b``
alike); this module only decides *which* OID to load a column as, and what to do where psycopg cannot:

* A column whose type OID is a built-in type loads as that type.  Any other OID (domains, enums, arrays
  of them, composites, extension types) is looked up in the Type (``Y``) messages seen so far: the server
  sends the **base** type's name there, so a domain over a built-in type (``posint`` over ``int4``, a
  domain over ``int4[]`` named ``_int4``) loads as that built-in type.  A type whose Type message names a
  non-``pg_catalog`` type (an enum, a composite, ...) or that psycopg does not know stays as the server's
  text (``str``) for ``t`` columns and the raw ``bytes`` of its send function for ``b`` columns -- exactly
  what psycopg itself returns for a ``SELECT`` of an unregistered type.
* ``'u'`` (an unchanged TOASTed value that was not sent) becomes :data:`UNCHANGED_TOAST`, a marker that is
  not ``None``, not falsy-by-accident comparable to anything else, and never produced for a NULL.
* ``date``, ``timestamp`` and ``timestamptz`` ``'infinity'``/``'-infinity'`` (which psycopg refuses to
  load) become the sentinels :data:`INFINITY` and :data:`NEG_INFINITY`; ``numeric`` NaN and ±Infinity are
  ``Decimal`` values (psycopg's own), floats are ``float``.
* Where psycopg's loaders lose information, replwire's own load instead: ``interval`` is an
  :class:`Interval` (months, days and microseconds apart; psycopg folds a month into 30 days), ``json`` and
  ``jsonb`` a :class:`JsonText` (the server's text, unparsed: psycopg's floats round long numbers, and its
  JSON ``null`` is ``None`` like SQL NULL), binary ``money`` the ``int`` the server sends (the amount in the
  currency's smallest unit; psycopg gives the bytes), binary ``float4`` the shortest decimal that reads
  back as the same single (:func:`float4`: ``1.1`` as in text mode, where psycopg gives the double
  ``1.100000023841858``).  Arrays of these types hold the same.
* A value psycopg raises on for another reason (a date before year 1 or after 9999, ...) is kept whole as
  a :class:`RawValue` (kind, bytes, the reason) -- never dropped, never ``None``; for a binary date,
  timestamp, timestamptz, or a range with such a bound, its ``text`` is the server's text of the value
  (``4713-01-01 BC``; a timestamptz in UTC), which ``str()`` gives, as it gives a text value's text.
  :func:`server_text` writes a range or multirange as the server does.
* A binary (``'b'``) value is checked against its type's layout before any loader sees it, because
  psycopg's compiled binary loaders read their type's width without looking at the value's length (a
  4-byte ``float8`` would be read past its end).  A fixed-width type (:data:`BINARY_WIDTHS`: the bytes
  PostgreSQL's send function writes) must have exactly that length; a ``numeric`` its 8-byte header and
  as many digits as the header counts; an array (``array_send``), a range, a multirange and a ``record``
  a header and parts that fit the value exactly (an array the element type of its column), each part
  checked in turn as a value of its type.
  A value that does not fit is kept whole as a :class:`RawValue` whose reason names the type and the
  lengths.

Text is in the connection's client encoding (the ``encoding`` of :class:`ValueLoader`, :func:`text_value`
and :func:`untyped_row`; UTF-8 by default, as for the Strings of the messages): the server's text of a
value, and the binary form of the text types, which ``textsend`` converts too.  psycopg's loaders take
their encoding from a connection, and there is none here, so for any other encoding the loader of each
text type (``text``, ``varchar``, ``bpchar``, ``name``, ``"char"``, ``json``, ``jsonb``, and the fallback of
types psycopg has no loader for) is replaced by one that decodes in that encoding; arrays of them load
through these.  In ``SQL_ASCII`` text decodes with its codec too: bytes 128-255 become the surrogates
U+DC80-U+DCFF (psycopg itself gives ``bytes`` there).

The values replwire makes itself are in :mod:`~replwire.codec.stream.value_types`, the layout checks of
binary values in :mod:`~replwire.codec.stream.binary_layout`, and the server's text of binary values psycopg
cannot load in :mod:`~replwire.codec.stream.server_text`; this module is the loader that picks among them.

psycopg is imported lazily, on the first typed value, so ``replwire.codec`` imports without it; asking for
typed values without it raises :class:`TypedValuesUnavailable` saying what to install.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...schema.encodings import UTF8, text_codec
from ..errors import ReplwireError, install_hint
from .binary_layout import NESTING, RANGE_EMPTY, RANGE_LB_INF, RANGE_UB_INF, BinaryLayout, read_int32
from .server_text import bound_text, date_server_text, range_quote, server_text, timestamp_server_text
from .value_types import (
    INFINITY,
    NEG_INFINITY,
    UNCHANGED_TOAST,
    Infinite,
    Interval,
    JsonText,
    RawValue,
    float4,
    interval_binary,
    interval_parts,
)

__all__ = ["RowSchema", "TypedValuesUnavailable", "ValueLoader", "text_value"]


class TypedValuesUnavailable(ReplwireError, ImportError):
    """Typed values were asked for, but psycopg 3 is not installed."""


# OIDs of the types whose infinities get the sentinels, and their binary extremes.
_DATE, _TIMESTAMP, _TIMESTAMPTZ = 1082, 1114, 1184
_INFINITE_TEXT = {b"infinity": INFINITY, b"-infinity": NEG_INFINITY}
_INFINITE_BINARY = {
    _DATE: {(2**31 - 1).to_bytes(4, "big"): INFINITY, (-(2**31)).to_bytes(4, "big", signed=True): NEG_INFINITY},
    _TIMESTAMP: {(2**63 - 1).to_bytes(8, "big"): INFINITY, (-(2**63)).to_bytes(8, "big", signed=True): NEG_INFINITY},
}
_INFINITE_BINARY[_TIMESTAMPTZ] = _INFINITE_BINARY[_TIMESTAMP]


#: The text types, by OID: text, varchar, bpchar, name.
_TEXT_OIDS = (25, 1043, 1042, 19)


def _text_fast(codec: str) -> dict[int, Callable[[bytes], Any]]:
    """Text-format values whose psycopg loader amounts to one call: the most common column types, loaded
    without the loader's own overhead (same results: the tests compare with psycopg's SELECT)."""
    def text(data: bytes) -> str:
        return data.decode(codec)

    return {**dict.fromkeys(_TEXT_OIDS, text), 20: int, 21: int, 23: int}


def text_value(kind: str, data: bytes | None, encoding: str = UTF8) -> Any:
    """The untyped value of a tuple column: ``None`` for ``'n'``, :data:`UNCHANGED_TOAST` for ``'u'``, the
    text (``str``, decoded in the client ``encoding``) for ``'t'``, the raw ``bytes`` for ``'b'``."""
    if kind == "n":
        return None
    if kind == "u":
        return UNCHANGED_TOAST
    if kind == "t":
        if data is None:
            raise ValueError("a text column ('t') without data")
        return data.decode(text_codec(encoding))
    return data


@dataclass(frozen=True)
class RowSchema:
    """What loading a tuple needs, fixed when the change arrived: the Relation message then in force, and
    the Type message (or ``None``) then known for each of its columns' type OIDs."""

    relation: Any  # Relation
    types: tuple[Any, ...]  # Type | None per column

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.relation.columns]


def _adapters(codec: str) -> Any:
    """The loaders replwire uses: a copy of psycopg's with its own for the types psycopg's lose information
    of -- ``json``/``jsonb`` as :class:`JsonText`, ``interval`` as :class:`Interval`, binary ``money`` as the
    integer of the send function (the amount in the currency's smallest unit) -- and, for text not in UTF-8,
    text loaders that decode in ``codec`` (see the module docstring).  Arrays of these types load through
    them too."""
    import psycopg
    from psycopg.adapt import AdaptersMap, Loader
    from psycopg.pq import Format

    class TextLoader(Loader):
        def load(self, data: Any) -> str:
            return bytes(data).decode(codec)

    class TextBinaryLoader(TextLoader):
        format = Format.BINARY

    class JsonLoader(Loader):
        def load(self, data: Any) -> JsonText:
            return JsonText(bytes(data).decode(codec))

    class JsonBinaryLoader(JsonLoader):
        format = Format.BINARY

    class JsonbBinaryLoader(JsonLoader):
        format = Format.BINARY

        def load(self, data: Any) -> JsonText:  # a version byte (1), then the text
            if not data or data[0] != 1:
                raise ValueError(f"unknown jsonb binary format: {bytes(data[:1])!r}")
            return super().load(data[1:])

    class IntervalLoader(Loader):
        def load(self, data: Any) -> Interval:
            parts = interval_parts(bytes(data))
            if parts is None:
                raise ValueError(f"not an interval text replwire reads: {bytes(data)!r}")
            return Interval(*parts)

    class IntervalBinaryLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> Interval:
            return interval_binary(bytes(data))

    class Float4BinaryLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> float:
            return float4(bytes(data))

    class MoneyBinaryLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> int:  # cash_send: int64
            return int.from_bytes(bytes(data), "big", signed=True)

    adapters = AdaptersMap(psycopg.adapters)
    for name in ("json", "jsonb"):
        adapters.register_loader(name, JsonLoader)
    adapters.register_loader("json", JsonBinaryLoader)
    adapters.register_loader("jsonb", JsonbBinaryLoader)
    adapters.register_loader("interval", IntervalLoader)
    adapters.register_loader("interval", IntervalBinaryLoader)
    adapters.register_loader("money", MoneyBinaryLoader)
    adapters.register_loader("float4", Float4BinaryLoader)
    if codec == UTF8:
        return adapters
    adapters.register_loader(0, TextLoader)  # a type psycopg has no loader for: its text
    for name in ("text", "varchar", "bpchar", "name", '"char"'):
        adapters.register_loader(name, TextLoader)
        adapters.register_loader(name, TextBinaryLoader)
    return adapters


#: Built-in types psycopg's registry has (a test checks it), resolved without importing psycopg: bool,
#: bytea, name, int8, int2, int4, text, json, float4, float8, bpchar, varchar, date, time, timestamp,
#: timestamptz, interval, numeric, uuid, jsonb.
_BUILTIN = frozenset({16, 17, 19, 20, 21, 23, 25, 114, 700, 701, 1042, 1043, 1082, 1083, 1114, 1184, 1186, 1700,
                      2950, 3802})
#: The arrays of those types, by OID, and their element types: what psycopg's registry says of them (a test
#: checks it), without importing psycopg.
_BUILTIN_ARRAYS = {1000: 16, 1001: 17, 1003: 19, 1016: 20, 1005: 21, 1007: 23, 1009: 25, 199: 114, 1021: 700,
                   1022: 701, 1014: 1042, 1015: 1043, 1182: 1082, 1183: 1083, 1115: 1114, 1185: 1184, 1187: 1186,
                   1231: 1700, 2951: 2950, 3807: 3802}


def _psycopg() -> tuple[Any, Any, Any]:
    try:
        from psycopg.adapt import Transformer
        from psycopg.postgres import types as registry
        from psycopg.pq import Format
    except ImportError as error:  # pragma: no cover - exercised by a subprocess test
        raise TypedValuesUnavailable(
            f"typed values need psycopg 3: {install_hint('values')} (or ask for untyped values: "
            "typed=False gives str for 't' and bytes for 'b' columns)") from error
    return Transformer, registry, Format


class ValueLoader:
    """Loads tuple columns by type OID through psycopg's loaders (see the module docstring for the rules).

    One instance caches its loaders; it holds no connection.  ``encoding`` is the client encoding of the
    text (PostgreSQL's name or Python's, as for :func:`replwire.codec.parse`).  ``load(column, type_id,
    type_message)`` loads one :class:`~replwire.codec.TupleColumn`; :meth:`load_row` a whole tuple into a dict.
    """

    def __init__(self, encoding: str = UTF8) -> None:
        self.encoding = text_codec(encoding)
        if importlib.util.find_spec("psycopg") is None:
            _psycopg()  # says what to install
        self._text_fast = _text_fast(self.encoding)
        self._loaders: dict[tuple[int | None, str], Any] = {}
        self._resolved: dict[tuple[int, tuple[str, str] | None], int | None] = {}
        self._kinds: dict[int, tuple[str, int] | None] = {}
        self._layout = BinaryLayout(self.kind_of)
        self._psycopg: tuple[Any, Any, Any] | None = None  # registry, transformer, formats: imported when needed

    def _ready(self) -> tuple[Any, Any, Any]:
        """psycopg's type registry, a transformer with the loaders of :func:`_adapters` and the formats by
        kind (psycopg is imported on first need: many streams have only the types :data:`_BUILTIN` and their
        arrays)."""
        if self._psycopg is None:
            Transformer, registry, Format = _psycopg()
            self._psycopg = (registry, Transformer(_adapters(self.encoding)),
                             {"t": Format.TEXT, "b": Format.BINARY})
        return self._psycopg

    @property
    def _registry(self) -> Any:
        """psycopg's type registry."""
        return self._ready()[0]

    def resolve(self, type_id: int, type_message: Any = None) -> int | None:
        """The built-in type OID a column of ``type_id`` loads as, or ``None`` to keep text/bytes.

        ``type_message`` is the Type message for ``type_id`` (its base type's namespace and name), if any.
        """
        key = (type_id, None if type_message is None else (type_message.namespace, type_message.name))
        if key in self._resolved:
            return self._resolved[key]
        oid: int | None = None
        if type_id in _BUILTIN or type_id in _BUILTIN_ARRAYS:
            oid = type_id
        elif type_id < 10000 and self._ready()[0].get(type_id) is not None:
            oid = type_id  # a built-in type (FirstGenbkiObjectId = 10000; built-ins never get a Type message)
        elif type_message is not None and type_message.namespace in ("", "pg_catalog"):
            name = type_message.name
            registry = self._ready()[0]
            info = registry.get(name)
            if info is not None:
                oid = info.oid
            elif name.startswith("_"):  # an array of a built-in type, by its pg_type name
                element = registry.get(name[1:])
                if element is not None and element.array_oid:
                    oid = element.array_oid
        self._resolved[key] = oid
        return oid

    def text_loader(self, oid: int) -> Any:
        """psycopg's loader of text-format values of the built-in type ``oid`` (what :meth:`load` uses after
        its own cases; a value it raises on is :meth:`load`'s to keep whole)."""
        return self._loader(oid, "t")

    def array_element(self, oid: int) -> int | None:
        """The element type of the built-in array type ``oid``, or ``None`` if it is no array type."""
        kind = self.kind_of(oid)
        return kind[1] if kind is not None and kind[0] == "array" else None

    def kind_of(self, oid: int) -> tuple[str, int] | None:
        """What the built-in type ``oid`` is made of: ``("array", element OID)``, ``("range", subtype OID)``,
        ``("multirange", range OID)``, or ``None`` for any other type."""
        if oid in _BUILTIN:
            return None
        if oid in _BUILTIN_ARRAYS:
            return ("array", _BUILTIN_ARRAYS[oid])
        if oid not in self._kinds:
            info = self._registry.get(oid)
            kind: tuple[str, int] | None = None
            if info is not None and info.array_oid == oid:
                kind = ("array", info.oid)
            elif info is not None and info.oid == oid and getattr(info, "range_oid", None):
                kind = ("multirange", info.range_oid)
            elif info is not None and info.oid == oid and getattr(info, "subtype_oid", None):
                kind = ("range", info.subtype_oid)
            self._kinds[oid] = kind
        return self._kinds[oid]

    def _loader(self, oid: int | None, kind: str) -> Any:
        loader = self._loaders.get((oid, kind))
        if loader is None:
            _, transformer, formats = self._ready()
            loader = transformer.get_loader(oid if oid is not None else 0, formats[kind])
            self._loaders[(oid, kind)] = loader
        return loader

    def load(self, kind: str, data: bytes | None, type_id: int, type_message: Any = None) -> Any:
        """One column's value (``kind`` and ``data`` as on the wire)."""
        if kind == "n":
            return None
        if kind == "u":
            return UNCHANGED_TOAST
        if kind not in ("t", "b") or data is None:
            raise ValueError(f"not a tuple column kind with data: {kind!r}")
        oid = self.resolve(type_id, type_message)
        if oid is None:
            return data.decode(self.encoding) if kind == "t" else bytes(data)
        if kind == "t":
            fast = self._text_fast.get(oid)
            if fast is not None:
                return fast(data)
        if oid in _INFINITE_BINARY:
            special = _INFINITE_TEXT.get(data) if kind == "t" else _INFINITE_BINARY[oid].get(bytes(data))
            if special is not None:
                return special
        if kind == "b":
            fault = self._layout.fault(oid, bytes(data))
            if fault is not None:
                return RawValue(type_id, kind, bytes(data), f"malformed binary value: {fault}")
        try:
            return self._loader(oid, kind).load(data)
        except Exception as error:  # noqa: BLE001 - psycopg's DataError and friends: keep the value whole
            return RawValue(type_id, kind, bytes(data), f"{type(error).__name__}: {error}",
                            self._binary_text(oid, bytes(data)) if kind == "b" else None)

    def _binary_text(self, oid: int, data: bytes, depth: int = 0) -> str | None:
        """The server's text of a binary value (already checked against its layout) psycopg cannot load,
        where replwire can write it as the server does: a date, timestamp or timestamptz (in UTC) outside
        Python's years 1-9999, a range or multirange with such a bound; else ``None``."""
        if oid == _DATE:
            return date_server_text(int.from_bytes(data, "big", signed=True))
        if oid in (_TIMESTAMP, _TIMESTAMPTZ):
            return timestamp_server_text(int.from_bytes(data, "big", signed=True), oid == _TIMESTAMPTZ)
        kind = self.kind_of(oid)
        if kind is None or depth >= NESTING:
            return None
        what, inner = kind
        if what == "range":
            flags, at, bounds = data[0], 1, []
            if flags & RANGE_EMPTY:
                return "empty"
            for flag in (RANGE_LB_INF, RANGE_UB_INF):
                if flags & flag:
                    bounds.append("")
                    continue
                length = read_int32(data, at)
                bound = self.load("b", data[at + 4:at + 4 + length], inner)
                at += 4 + length
                if isinstance(bound, RawValue):
                    if bound.text is None:
                        return None
                    text = bound.text
                else:
                    text = str(bound) if isinstance(bound, Infinite) else bound_text(bound)
                bounds.append(range_quote(text))
            lower_inc, upper_inc = flags & 0x02, flags & 0x04  # RANGE_LB_INC, RANGE_UB_INC
            return f"{'[' if lower_inc else '('}{bounds[0]},{bounds[1]}{']' if upper_inc else ')'}"
        if what == "multirange":
            count, at, parts = read_int32(data, 0), 4, []
            for _ in range(count):
                length = read_int32(data, at)
                part = self._range_or_text(inner, data[at + 4:at + 4 + length], depth + 1)
                if part is None:
                    return None
                parts.append(part)
                at += 4 + length
            return "{" + ",".join(parts) + "}"
        return None

    def _range_or_text(self, oid: int, data: bytes, depth: int) -> str | None:
        value = self.load("b", data, oid)
        if isinstance(value, RawValue):
            return value.text if value.text is not None else self._binary_text(oid, data, depth)
        return server_text(value)

    def load_row(self, schema: RowSchema, columns: Any, *, only_keys: bool = False) -> dict[str, Any]:
        """A tuple as ``{column name: value}``; ``only_keys`` keeps just the replica-identity key columns."""
        out: dict[str, Any] = {}
        for meta, type_message, column in zip(schema.relation.columns, schema.types, columns):
            if only_keys and not meta.flags & 1:
                continue
            out[meta.name] = self.load(column.kind, column.data, meta.type_id, type_message)
        return out


def untyped_row(schema: RowSchema, columns: Any, *, only_keys: bool = False, encoding: str = UTF8) -> dict[str, Any]:
    """Like :meth:`ValueLoader.load_row`, with :func:`text_value` instead of psycopg (no dependency)."""
    return {meta.name: text_value(column.kind, column.data, encoding)
            for meta, column in zip(schema.relation.columns, columns) if not only_keys or meta.flags & 1}
