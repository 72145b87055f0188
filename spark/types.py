"""Spark column types of a table, derived from its Relation message, and the values that fill them.

Strategy: a column's PostgreSQL type OID (a domain resolved to its base type through the Type messages, by
:meth:`replwire.codec.stream.values.ValueLoader.resolve`) and type modifier pick one :class:`ColumnType`:

=====================================  ==================================  ==============================
PostgreSQL                             Spark                               value
=====================================  ==================================  ==============================
int2, int4, int8                       short, int, long
numeric(p, s) with 0 <= s <= p <= 38   decimal(p, s)                       exact
numeric (unconstrained, or wider)      string                              the server's text, exact
float4, float8                         float, double
bool                                   boolean
date                                   date
timestamp                              timestamp_ntz
timestamptz                            timestamp (UTC instants)
bytea                                  binary
arrays                                 array<...> of the element's type    one-dimensional
interval                               string                              ISO 8601, as ``replwire decode``
text, varchar, char, name, uuid,       string                              the server's text
json, jsonb, ranges, everything else
=====================================  ==================================  ==============================

Values are loaded through psycopg (text ``t`` and binary ``b`` columns alike) except string columns in
text format, which keep the server's exact text; where a whole batch of a column's text values is in the
form the type's output function writes (integers, floats, bool, numeric(p, s), ISO dates and timestamps,
hex bytea, one-dimensional integer and text arrays, intervals), they are read at once, to the same values:
by the compiled codec (``texts_typed``, ``codec/stream/values.c``) where it is there, else (and arrays
always) by Arrow.  A
string column in binary format becomes text again, the server's text where replwire can write it as the
server does: uuid, json and jsonb exactly, ranges and
multiranges as range_out writes them (a timestamptz bound in UTC, ``+00``); other types as ``replwire
decode`` writes them (``money`` as the integer amount in the currency's smallest unit, ``\\x`` hex for bytes
of a type replwire cannot read).  ``interval`` is the ISO 8601 duration ``replwire decode`` writes
(``P1M1DT1H0.5S``: months, days and time kept apart, as PostgreSQL's ``intervalstyle = iso_8601`` prints
them) in both formats, so that it agrees with the JSON columns.

Some values have no Spark equivalent: numeric ``NaN``/``Infinity``, date/timestamp ``infinity`` and dates
outside years 1-9999 (a timestamptz's in UTC), multi-dimensional arrays.  They are never turned into NULL:
the typed column is left null and the value's text goes into the row's ``_unrepresentable`` map (column
name -> text), beside ``_unchanged_toast`` (the columns whose unchanged TOASTed value the server did not
send).  Both take leading underscores in a table that has columns of those names
(:func:`replwire.spark.rows.meta_names`).
"""

from __future__ import annotations

import codecs
import datetime as dt
import decimal
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from replwire.codec.stream.binary_layout import BINARY_WIDTHS
from replwire.codec.stream.jsonl import json_value
from replwire.codec.stream.value_types import Infinite, RawValue
from replwire.codec.stream.values import ValueLoader
from replwire.codec.wire.fast import COMPILED
from replwire.codec.wire.gen.text_forms import FORMS

__all__ = ["ColumnType", "Unrepresentable", "column_type", "numeric_precision_scale"]

_INT: dict[int, tuple[T.DataType, pa.DataType]] = {
    21: (T.ShortType(), pa.int16()), 23: (T.IntegerType(), pa.int32()), 20: (T.LongType(), pa.int64())}
_FLOAT: dict[int, tuple[T.DataType, pa.DataType]] = {
    700: (T.FloatType(), pa.float32()), 701: (T.DoubleType(), pa.float64())}
_BOOL, _DATE, _TIMESTAMP, _TIMESTAMPTZ, _BYTEA, _NUMERIC = 16, 1082, 1114, 1184, 17, 1700
_UUID, _JSON, _JSONB, _INTERVAL = 2950, 114, 3802, 1186
_UTC = dt.timezone.utc


class Unrepresentable(Exception):
    """A value the column's Spark type cannot hold (it goes to ``_unrepresentable``)."""


@dataclass(frozen=True)
class ColumnType:
    """How one PostgreSQL column becomes a Spark column: its Spark and Arrow types, and ``value(kind,
    data)`` making the Arrow-ready value of a ``t``/``b`` tuple column (raising :class:`Unrepresentable`);
    ``texts(data)``, where there is one, makes the Arrow array of many text (``t``) values at once (a binary
    array, null for no value), equal to ``value`` of each -- or gives ``None`` when one of them is not in the form it
    reads, and the caller then takes ``value`` of each."""

    spark: T.DataType
    arrow: pa.DataType
    value: Callable[[str, bytes], Any]
    oid: int | None
    texts: Callable[[pa.Array], pa.Array | None] | None = None


def numeric_precision_scale(type_modifier: int) -> tuple[int, int] | None:
    """``(precision, scale)`` of a ``numeric(p, s)`` type modifier, ``None`` for unconstrained numeric."""
    if type_modifier < 4:
        return None
    packed = type_modifier - 4
    scale = ((packed & 0x7FF) ^ 1024) - 1024  # PostgreSQL 15+ allows a negative scale
    return (packed >> 16) & 0xFFFF, scale


def column_type(type_id: int, type_modifier: int, type_message: Any, loader: ValueLoader) -> ColumnType:
    """The :class:`ColumnType` of a column (see the module docstring)."""
    oid = loader.resolve(type_id, type_message)
    if oid is not None:
        element = _element_of(oid, loader)
        if element is not None:
            inner = _scalar(element, -1, loader) or ColumnType(T.StringType(), pa.string(),
                                                               _text_value(element, None, loader), element)
            return ColumnType(T.ArrayType(inner.spark, True), pa.list_(inner.arrow),
                              _array_value(oid, type_id, type_message, inner, loader), oid,
                              _array_texts(element, pa.list_(inner.arrow)))
        else:
            scalar = _scalar(oid, type_modifier, loader)
            if scalar is not None:
                return scalar
    return ColumnType(T.StringType(), pa.string(), _text_value(type_id, type_message, loader), oid,
                      _texts(loader.encoding))


def _texts(encoding: str) -> Callable[[pa.Array], pa.Array]:
    """Many text values of a string column at once: decoded by Arrow (which checks UTF-8) when the client
    encoding is UTF-8 -- else, and for bytes that are not UTF-8 (to raise the same error), one by one."""
    utf8 = codecs.lookup(encoding).name == "utf-8"

    def texts(data: pa.Array) -> pa.Array:
        if utf8:
            try:
                return data.cast(pa.string())
            except pa.ArrowInvalid:
                pass
        return pa.array([d.decode(encoding) if d is not None else None for d in data.to_pylist()], pa.string())
    return texts


def _many(form: str, arrow: pa.DataType, python: Callable[[pa.Array], pa.Array | None], precision: int = 0,
          scale: int = 0) -> Callable[[pa.Array], pa.Array | None]:
    """Many text values read at once as ``form`` (one of :data:`~replwire.codec.wire.gen.text_forms.FORMS`) into
    an Arrow array of ``arrow``: by the compiled codec (``texts_typed``) where it is there, else by ``python``,
    the same reading in Arrow calls.  Both give ``None`` where a value is in a form they do not read."""
    if COMPILED is None:
        return python
    number = FORMS[form]

    def texts(data: pa.Array) -> pa.Array | None:
        if not len(data):
            return pa.array([], arrow)
        validity, offsets, values = data.buffers()
        made = COMPILED.texts_typed(number, len(data), data.offset, validity, offsets,
                                    values if values is not None else b"", precision, scale)
        if made is None:
            return None
        valid, out, text = made
        buffers = [None if valid is None else pa.py_buffer(valid), pa.py_buffer(out)]
        return pa.Array.from_buffers(arrow, len(data), buffers if text is None else [*buffers, pa.py_buffer(text)])
    return texts


def _parsed(form: str, parse: pa.DataType, arrow: pa.DataType,
            bounds: tuple[int, int] | None = None) -> Callable[[pa.Array], pa.Array | None]:
    """Many text values parsed by Arrow as ``parse``, then cast to ``arrow``, when every one is in ``form``
    (a regular expression of what the type's output function writes, in which Arrow's parser and ``value``
    read the same value); else ``None``, and the caller reads them value by value: a BC date, ``infinity``,
    a DateStyle other than ISO, an offset with seconds, numeric ``NaN``, a value out of the type's range or
    outside ``bounds`` (least, most, as the parsed values' integers).  The forms are ASCII, which every
    client encoding PostgreSQL has spells alike."""
    def texts(data: pa.Array) -> pa.Array | None:
        try:
            text = data.cast(pa.string())
            if pc.any(pc.invert(pc.match_substring_regex(text, form))).as_py():
                return None
            out = text.cast(parse)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        if bounds is not None and out.null_count < len(out):
            least, most = pc.min_max(out.cast(pa.int64())).values()
            if least.as_py() < bounds[0] or most.as_py() > bounds[1]:
                return None
        return out if parse == arrow else out.cast(arrow, safe=False)
    return texts


#: the forms :func:`_parsed` reads (int*out, float*out, numeric_out, date_out and timestamp*_out in ISO style)
_INTEGER = r"^-?[0-9]{1,19}$"
_FLOAT_FORM = r"^(-?[0-9]+(\.[0-9]+)?(e[-+][0-9]+)?|NaN|-?Infinity)$"
_DECIMAL = r"^-?[0-9]+(\.[0-9]+)?$"
_DAY = r"([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])-[0-9]{2}-[0-9]{2}"  # years 1-9999
_TIME = _DAY + r" [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?"


def _booleans(text: pa.Array) -> pa.Array | None:
    """Many bool texts (``t`` or ``f``, as boolout writes them) at once; ``None`` if one is anything else."""
    true = pc.equal(text, b"t")
    if (pc.sum(pc.or_(true, pc.equal(text, b"f"))).as_py() or 0) != len(text) - text.null_count:
        return None
    return true


def _hex_bytes(data: pa.Array) -> pa.Array | None:
    """Many bytea texts in byteaout's hex form (``\\x`` and pairs of hex digits) at once; ``None`` if one is in
    any other (the escape form of ``bytea_output = escape``)."""
    try:
        text = data.cast(pa.string())
    except pa.ArrowInvalid:
        return None
    if pc.any(pc.invert(pc.match_substring_regex(text, r"^\\x([0-9a-fA-F]{2})*$"))).as_py():
        return None
    return pa.array([bytes.fromhex(t[2:]) if t is not None else None for t in text.to_pylist()], pa.binary())


#: interval_out's text under intervalstyle postgres (``1 year 2 mons -3 days -04:05:06.5``), each part
#: optional and in that order, one space between parts, numbers of at most 9 digits (the larger, and
#: ``infinity``, are read value by value)
_INTERVAL_FORM = (r"^(?:(?P<y>[+-]?[0-9]{1,9}) years?(?: |$))?(?:(?P<mo>[+-]?[0-9]{1,9}) mons?(?: |$))?"
                  r"(?:(?P<d>[+-]?[0-9]{1,9}) days?(?: |$))?(?:(?P<sign>[+-]?)(?P<h>[0-9]{1,9}):(?P<mi>[0-9]{2}):"
                  r"(?P<s>[0-9]{2})(?:\.(?P<f>[0-9]{1,6}))?)?$")
_MICROS = {"h": 3_600_000_000, "mi": 60_000_000, "s": 1_000_000}


def _intervals(data: pa.Array) -> pa.Array | None:
    """Many interval texts at once, as the ISO 8601 durations :func:`~replwire.codec.stream.value_types.interval_iso`
    writes (months, days and time kept apart, each part with its own sign); ``None`` if one is not in
    :data:`_INTERVAL_FORM` (or ends in a space, or is empty)."""
    distinct = pc.unique(data)  # values repeat, and each costs some thirty Arrow calls' share
    if len(distinct) < len(data):
        made = _intervals(distinct)
        return None if made is None else made.take(pc.index_in(data, distinct))
    try:
        text = data.cast(pa.string())
    except pa.ArrowInvalid:
        return None
    sent = pc.is_valid(text)
    fits = pc.and_(pc.match_substring_regex(text, _INTERVAL_FORM), pc.invert(pc.match_substring_regex(text, r"(^| )$")))
    if not pc.all(pc.or_kleene(pc.invert(sent), fits)).as_py():
        return None
    parts = pc.extract_regex(pc.fill_null(text, "0 days"), _INTERVAL_FORM)

    def number(name: str) -> pa.Array:
        digits = parts.field(name)
        return pc.if_else(pc.equal(digits, ""), "0", pc.utf8_ltrim(digits, "+")).cast(pa.int64())  # (no "+" in Arrow)

    zero = pa.scalar(0, pa.int64())
    months = pc.add(pc.multiply(number("y"), 12), number("mo"))
    days = number("d")
    fraction = pc.utf8_rpad(parts.field("f"), 6, "0").cast(pa.int64())
    micro = fraction
    for name, scale in _MICROS.items():
        micro = pc.add(micro, pc.multiply(number(name), scale))
    micro = pc.if_else(pc.equal(parts.field("sign"), "-"), pc.negate(micro), micro)

    def written(value: pa.Array, suffix: str, sign: pa.Array | str = "") -> pa.Array:
        """``{sign}{value}{suffix}`` where value is not 0, else the empty text."""
        text = pc.binary_join_element_wise(sign, value.cast(pa.string()), suffix, "")
        return pc.if_else(pc.equal(value, zero), "", text)

    # months as years and months, each with the sign of the whole, as C's truncating division gives them
    negative_months = pc.less(months, zero)
    whole = pc.abs(months)
    years = pc.divide(whole, 12)
    left = pc.subtract(whole, pc.multiply(years, 12))
    years = pc.if_else(negative_months, pc.negate(years), years)
    left = pc.if_else(negative_months, pc.negate(left), left)
    sign = pc.if_else(pc.less(micro, zero), "-", "")
    size = pc.abs(micro)
    hours = pc.divide(size, _MICROS["h"])
    minutes = pc.divide(pc.subtract(size, pc.multiply(hours, _MICROS["h"])), _MICROS["mi"])
    rest = pc.subtract(size, pc.add(pc.multiply(hours, _MICROS["h"]), pc.multiply(minutes, _MICROS["mi"])))
    seconds = pc.divide(rest, _MICROS["s"])
    part = pc.subtract(rest, pc.multiply(seconds, _MICROS["s"]))
    with_fraction = pc.binary_join_element_wise(
        sign, seconds.cast(pa.string()), ".", pc.utf8_rtrim(pc.utf8_lpad(part.cast(pa.string()), 6, "0"), "0"), "S", "")
    second = pc.if_else(pc.equal(part, zero), written(seconds, "S", sign), with_fraction)
    time = pc.if_else(pc.equal(micro, zero), "", pc.binary_join_element_wise(
        "T", written(hours, "H", sign), written(minutes, "M", sign), second, ""))
    iso = pc.binary_join_element_wise("P", written(years, "Y"), written(left, "M"), written(days, "D"), time, "")
    iso = pc.if_else(pc.equal(iso, "P"), "PT0S", iso)
    return pc.if_else(sent, iso, pa.scalar(None, pa.string()))


#: the element forms :func:`_array_texts` reads: integers, and text elements array_out writes unquoted
_ARRAY_ELEMENTS = {21: _INTEGER[1:-1], 23: _INTEGER[1:-1], 20: _INTEGER[1:-1]}
_PLAIN_ELEMENT = r'[^",{}\\ \t\n\r\x0b\x0c]+'
_TEXT_ELEMENTS = (25, 1043, 19)  # text, varchar, name
_NULL = "NULL"  # an unquoted NULL element is a null (array_out quotes any text element spelt so in any case)


def _array_texts(element: int, arrow: pa.DataType) -> Callable[[pa.Array], pa.Array | None] | None:
    """Many one-dimensional array texts at once, where every element is one array_out writes as it is (no
    quotes, no escapes, no bounds decoration) of an integer or text type, or NULL; ``None`` for other element
    types, and from the reader when one value is in any other form."""
    form = _ARRAY_ELEMENTS.get(element) or (_PLAIN_ELEMENT if element in _TEXT_ELEMENTS else None)
    if form is None:
        return None
    item = f"({form}|{_NULL})"
    whole = rf"^\{{({item}(,{item})*)?\}}$"

    def texts(data: pa.Array) -> pa.Array | None:
        try:
            text = data.cast(pa.string())
            if pc.any(pc.invert(pc.match_substring_regex(text, whole))).as_py():
                return None
            items = pc.split_pattern(pc.utf8_slice_codeunits(text, 1, -1), ",")
            items = pc.if_else(pc.equal(text, "{}"), pa.scalar([], items.type), items)  # ("" splits into [""])
            values = items.values
            values = pc.if_else(pc.match_substring_regex(values, f"^{_NULL}$"), pa.scalar(None, values.type), values)
            return pa.ListArray.from_arrays(items.offsets, values, mask=pc.is_null(items)).cast(arrow)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
    return texts


def _element_of(oid: int, loader: ValueLoader) -> int | None:
    registry = loader._registry  # psycopg's type registry: which built-in array type has this OID
    cache: dict[int, int] = _element_of.__dict__.setdefault("cache", {})
    if not cache:
        for info in registry:
            if info.array_oid:
                cache[info.array_oid] = info.oid
    return cache.get(oid)


def _scalar(oid: int, type_modifier: int, loader: ValueLoader) -> ColumnType | None:
    def typed(check: Callable[[Any], Any] | None = None) -> Callable[[str, bytes], Any]:
        load = loader.load

        def value(kind: str, data: bytes) -> Any:
            out = load(kind, data, oid)
            if isinstance(out, (Infinite, RawValue)):
                raise Unrepresentable(str(out))
            return check(out) if check is not None else out
        return value

    if oid in _INT:
        spark, arrow = _INT[oid]
        return ColumnType(spark, arrow, _int_value(oid, loader), oid,
                          _many(str(arrow), arrow, _parsed(_INTEGER, arrow, arrow)))
    if oid in _FLOAT:  # float4 too is read as a double first, as float() does before Arrow narrows it
        spark, arrow = _FLOAT[oid]
        return ColumnType(spark, arrow, typed(), oid, _many("float32" if oid == 700 else "float64", arrow,
                                                            _parsed(_FLOAT_FORM, pa.float64(), arrow)))
    if oid == _BOOL:
        return ColumnType(T.BooleanType(), pa.bool_(), typed(), oid, _many("bool", pa.bool_(), _booleans))
    if oid == _NUMERIC:
        ps = numeric_precision_scale(type_modifier)
        if ps is None or not 0 <= ps[1] <= ps[0] <= 38:
            return None  # exact, as text

        def finite(value: decimal.Decimal) -> decimal.Decimal:
            if not value.is_finite():
                raise Unrepresentable(str(value))
            return value
        decimal_type = pa.decimal128(*ps)
        return ColumnType(T.DecimalType(*ps), decimal_type, typed(finite), oid,
                          _many("decimal128", decimal_type, _parsed(_DECIMAL, decimal_type, decimal_type), *ps))
    if oid == _DATE:
        return ColumnType(T.DateType(), pa.date32(), typed(), oid,
                          _many("date32", pa.date32(), _parsed(f"^{_DAY}$", pa.date32(), pa.date32())))
    if oid == _TIMESTAMP:
        arrow = pa.timestamp("us")
        return ColumnType(T.TimestampNTZType(), arrow, typed(), oid,
                          _many("timestamp", arrow, _parsed(f"^{_TIME}$", arrow, arrow)))
    if oid == _TIMESTAMPTZ:
        arrow = pa.timestamp("us", tz="UTC")
        return ColumnType(T.TimestampType(), arrow, typed(_in_utc), oid, _many("timestamptz", arrow, _parsed(
            f"^{_TIME}[-+][0-9]{{2}}(:[0-9]{{2}})?$", arrow, arrow, _UTC_RANGE)))
    if oid == _BYTEA:
        return ColumnType(T.BinaryType(), pa.binary(), typed(bytes), oid, _many("hex_bytes", pa.binary(), _hex_bytes))
    if oid == _INTERVAL:  # the ISO 8601 text replwire decode writes (months, days and time apart), in both formats
        load = loader.load

        def interval(kind: str, data: bytes) -> str:
            return str(load(kind, data, oid))
        return ColumnType(T.StringType(), pa.string(), interval, oid, _many("interval", pa.string(), _intervals))
    return None


#: the instants a datetime holds in UTC, in microseconds from 1970 (a timestamptz whose offset moves it past
#: them is unrepresentable)
_UTC_RANGE = (-62135596800_000000, 253402300799_999999)


def _in_utc(value: dt.datetime) -> dt.datetime:
    try:
        return value.astimezone(_UTC)
    except OverflowError:  # (year 1 east of UTC, year 9999 west of it)
        raise Unrepresentable(str(value)) from None


def _int_value(oid: int, loader: ValueLoader) -> Callable[[str, bytes], Any]:
    size = BINARY_WIDTHS[oid]

    def value(kind: str, data: bytes) -> int:
        if kind == "t":
            return int(data)
        if len(data) != size:
            raise Unrepresentable(data.hex())
        return int.from_bytes(data, "big", signed=True)
    return value


def _array_value(oid: int, type_id: int, type_message: Any, inner: ColumnType,
                 loader: ValueLoader) -> Callable[[str, bytes], Any]:
    def value(kind: str, data: bytes) -> Any:
        out = loader.load(kind, data, type_id, type_message)
        if isinstance(out, RawValue) or not isinstance(out, list):
            raise Unrepresentable(str(out))
        for item in out:
            if isinstance(item, list):
                raise Unrepresentable(data.decode(loader.encoding, "replace") if kind == "t" else data.hex())
            if isinstance(item, (Infinite, RawValue)) or (isinstance(item, decimal.Decimal) and not item.is_finite()):
                raise Unrepresentable(data.decode(loader.encoding, "replace") if kind == "t" else str(out))
        if isinstance(inner.arrow, pa.TimestampType) and inner.arrow.tz is not None:
            return [v.astimezone(_UTC) if v is not None else None for v in out]
        if inner.arrow == pa.string():
            return [_text(v) if v is not None else None for v in out]
        return out
    return value


def _text(value: Any) -> str:
    """A loaded value as text (for a string column sent in binary)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    rendered = json_value(value)
    return rendered if isinstance(rendered, str) else json.dumps(rendered, ensure_ascii=False)


def _text_value(type_id: int, type_message: Any, loader: ValueLoader) -> Callable[[str, bytes], Any]:
    oid = loader.resolve(type_id, type_message)

    encoding = loader.encoding  # the client encoding of the text

    def value(kind: str, data: bytes) -> str:
        if kind == "t":
            return data.decode(encoding)
        if oid == _JSON:  # json_send sends the text itself, jsonb_send a version byte (1) and the text
            return data.decode(encoding)
        if oid == _JSONB and data[:1] == b"\x01":
            return data[1:].decode(encoding)
        return _text(loader.load(kind, data, type_id, type_message))
    return value
