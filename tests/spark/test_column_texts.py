"""A typed column's text values read many at once (``ColumnType.texts``: by the compiled codec's
``texts_typed``, and without it by Arrow) are the values read one by one (``ColumnType.value``, psycopg's
loaders): for the forms PostgreSQL's output functions write, and for everything else -- which must make
``texts`` give ``None`` (the caller then reads value by value) or read exactly what ``value`` reads, never
something else.  Each test runs both readers."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replwire.codec.stream.values import ValueLoader

pytest.importorskip("pyspark")

from replwire.spark import types  # noqa: E402
from replwire.spark.types import ColumnType, Unrepresentable  # noqa: E402

READERS = ["c", "python"]


def column_type(oid: int, modifier: int, reader: str) -> ColumnType:
    """The column type whose ``texts`` is the compiled codec's (``c``) or Arrow's (``python``)."""
    with pytest.MonkeyPatch.context() as patch:
        if reader == "python":
            patch.setattr(types, "COMPILED", None)
        else:
            assert types.COMPILED is not None, "the compiled codec is not built"
        return types.column_type(oid, modifier, None, ValueLoader())

# (type OID, type modifier): int2, int4, int8, float4, float8, bool, numeric(12, 2), numeric(38, 0), date,
# timestamp, timestamptz, bytea, int2[], int4[], int8[], text[], varchar[], interval
TYPES = [(21, -1), (23, -1), (20, -1), (700, -1), (701, -1), (16, -1), (1700, (12 << 16 | 2) + 4),
         (1700, (38 << 16) + 4), (1082, -1), (1114, -1), (1184, -1), (17, -1), (1005, -1), (1007, -1),
         (1016, -1), (1009, -1), (1015, -1), (1186, -1)]

# what the output functions write, and near misses of it
_INT_ARRAYS = ["{}", "{1,2,3}", "{-5}", "{1,NULL}", "{{1,2},{3,4}}", "[0:1]={1,2}", "{99999}", "{40000}",
               "{3000000000}", '{"1"}', "{1, 2}", "{0x10}", "{,}", "{1,}", "{NULL,null,3}", "{NULLx}"]
_TEXT_ARRAYS = ["{}", "{tag1,x1,z}", "{a,NULL}", "{a,null}", "{a,nullx}", '{"a b",c}', '{"",x}', '{"\\"}',
                "{{a,b},{c,d}}", "{é,ü}", "{NULL}", "{Null}", '{"NULL"}', "[2:2]={a}", "{a\tb}", "{ a}"]
SEEN = {
    17: ["\\x", "\\x00ff", "\\xC4CA", "\\x0", "\\xzz", "abc", "\\000", "x00"],
    1005: _INT_ARRAYS, 1007: _INT_ARRAYS, 1016: _INT_ARRAYS, 1009: _TEXT_ARRAYS, 1015: _TEXT_ARRAYS,
    21: ["0", "-32768", "32767", "32768", " 1", "+1", "1.0", ""],
    23: ["12", "-2147483648", "2147483647", "2147483648", "1e3", "0x10"],
    20: ["-9223372036854775808", "9223372036854775807", "9223372036854775808", "007", "1_000"],
    700: ["NaN", "Infinity", "-Infinity", "-0", "0.33333334", "3.4028235e+38", "1e-45", "1e39", "1_0", " 1",
          "inf", "nan", "0x1p3", "1.5e", "16777217"],
    701: ["NaN", "Infinity", "-Infinity", "-0", "0.1", "1.7976931348623157e+308", "5e-324", "1e309", "1e-400",
          "1_000", "infinity", "+1.5", ".5", "5.", "0x10"],
    16: ["t", "f", "true", "false", "T", "1", ""],
    1700: ["79.19", "-0.50", "1", "0.005", "NaN", "Infinity", "-Infinity", "1e3", "9999999999.99", "99999999999.99",
           "+1.00", ".5", "00012.30", "1_0"],
    1082: ["2020-01-02", "0001-01-01", "9999-12-31", "2020-01-02 BC", "infinity", "-infinity", "10000-01-01",
           "2024-02-30", "20200102", "2020-1-2", "01/02/2020", "0000-01-01", "0000-12-31"],
    1114: ["2024-01-01 00:00:37", "2024-01-01 00:00:37.123456", "2024-01-01 00:00:37.5", "2024-01-01T00:00:37",
           "2024-01-01 24:00:00", "infinity", "0044-03-15 12:00:00 BC", "10000-01-01 00:00:00",
           "2024-01-01 00:00:37+00", "2024-01-01 00:00", "2024-01-01", "0000-06-01 00:00:00"],
    # interval_out (intervalstyle postgres; from PostgreSQL 18's regression output), the ISO style, and misses
    1186: ["00:00:00", "1 day", "-1 days", "1 year 2 mons 3 days 04:05:06.789", "-1 years -2 mons +3 days -04:05:06",
           "6 years 5 mons 4 days 03:02:01", "-00:00:00.5", "-14 mons", "1 day -00:00:01", "34 years",
           "+1 day", "00:00:00.000001", "2562047788:00:54.775807", "infinity", "-infinity", "P1Y2M",
           "1 year ", "", "1 yr", "00:00", "1 day 1 day", "12:60:00"],
    1184: ["2024-01-01 00:00:01+00", "2024-01-01 00:00:01.25-07", "2024-01-01 00:00:01+05:30",
           "1900-01-01 00:00:00+05:53:28", "infinity", "2024-01-01 00:00:01", "2024-01-01T00:00:01Z",
           "2024-01-01 00:00:01+0530", "0044-03-15 12:00:00+00 BC", "2024-01-01 00:00:01.1234567+00",
           "0000-06-01 00:00:00+00", "0001-01-01 00:00:00+01", "9999-12-31 23:59:59-01"],
}


def _one_by_one(kind_type: ColumnType, texts: list[bytes | None]) -> pa.Array | None:
    """The values read one by one, or None where one of them is refused (unrepresentable or an error)."""
    values = []
    for text in texts:
        if text is None:
            values.append(None)
            continue
        try:
            values.append(kind_type.value("t", text))
        except (Unrepresentable, ValueError, ArithmeticError):
            return None
    return pa.array(values, kind_type.arrow)


def _same(a: pa.Array, b: pa.Array) -> bool:
    if a.type != b.type or len(a) != len(b):
        return False
    for x, y in zip(a.to_pylist(), b.to_pylist()):
        if isinstance(x, float) and isinstance(y, float):
            if not (x == y and math.copysign(1, x) == math.copysign(1, y) or math.isnan(x) and math.isnan(y)):
                return False
        elif x != y:
            return False
    return True


def _check(kind_type: ColumnType, texts: list[bytes | None]) -> None:
    assert kind_type.texts is not None
    many = kind_type.texts(pa.array(texts, pa.binary()))
    if many is None:
        return  # read value by value
    expected = _one_by_one(kind_type, texts)
    assert expected is not None, f"Arrow read {texts!r}, which the one-by-one reading refuses"
    assert _same(many, expected), (texts, many, expected)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(("oid", "modifier"), TYPES)
def test_each_seen_text_alone_and_together(oid, modifier, reader):
    kind_type = column_type(oid, modifier, reader)
    forms = [t.encode() for t in SEEN[oid]]
    read = 0
    for form in forms:
        _check(kind_type, [form, None])
        read += kind_type.texts(pa.array([form], pa.binary())) is not None  # type: ignore[misc]
    assert read >= 1  # the server's own forms are read many at once
    _check(kind_type, [*forms, None])


def _text_of(oid: int) -> st.SearchStrategy[str]:
    if oid == 17:
        return st.binary(max_size=8).map(lambda b: "\\x" + b.hex())
    if oid in (1005, 1007, 1016):
        return st.lists(st.integers(-2**40, 2**40).map(str) | st.just("NULL"), max_size=4).map(
            lambda items: "{" + ",".join(items) + "}")
    if oid in (1009, 1015):
        return st.lists(st.text(alphabet="ab, \"\\{}NULnul\té", max_size=4), max_size=4).map(
            lambda items: "{" + ",".join(items) + "}")
    if oid in (21, 23, 20):
        return st.integers(-2**63, 2**63).map(str)
    if oid in (700, 701):
        return st.floats(width=32 if oid == 700 else 64).map(
            lambda f: "NaN" if math.isnan(f) else "Infinity" if f == math.inf else "-Infinity" if f == -math.inf
            else repr(f))
    if oid == 16:
        return st.sampled_from(["t", "f"])
    if oid == 1700:
        return st.decimals(allow_nan=False, allow_infinity=False, places=2,
                           min_value=-10**10, max_value=10**10).map(str)
    if oid == 1186:  # interval_out's parts, each drawn or left out
        number = st.integers(-10**9 + 1, 10**9 - 1)
        unit = st.tuples(st.sampled_from(["", "+"]), number)

        def spelt(parts):
            years, months, days, time = parts
            out = [f"{part[0]}{part[1]} {word}{'' if part[1] in (1, -1) else 's'}"
                   for part, word in ((years, "year"), (months, "mon"), (days, "day")) if part is not None]
            if time is not None:
                sign, hours, minutes, seconds, fraction = time
                out.append(f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}{fraction}")
            return " ".join(out) or "00:00:00"  # (interval_out's zero)
        maybe = st.none() | unit.map(lambda u: u if u[1] >= 0 else ("", u[1]))
        time = st.none() | st.tuples(st.sampled_from(["", "-", "+"]), st.integers(0, 10**9 - 1), st.integers(0, 59),
                                     st.integers(0, 59), st.sampled_from(["", ".5", ".000001", ".123456", ".10"]))
        return st.tuples(maybe, maybe, maybe, time).map(spelt)
    if oid == 1082:
        return st.dates().map(lambda d: d.isoformat())
    if oid == 1114:
        return st.datetimes().map(lambda d: d.isoformat(" "))
    return st.tuples(st.datetimes(), st.sampled_from(["+00", "-07", "+05:30", "+14"])).map(
        lambda pair: pair[0].isoformat(" ") + pair[1])


@pytest.mark.parametrize("reader", READERS)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_drawn_columns(reader, data):
    oid, modifier = data.draw(st.sampled_from(TYPES))
    kind_type = column_type(oid, modifier, reader)
    texts = data.draw(st.lists(st.one_of(st.none(), _text_of(oid).map(str.encode)
                                         | st.sampled_from([t.encode() for t in SEEN[oid]])), max_size=20))
    _check(kind_type, texts)


@pytest.mark.parametrize("reader", READERS)
@settings(max_examples=300, deadline=None)
@given(st.lists(st.none() | _text_of(1186).map(str.encode), min_size=1, max_size=8))
def test_drawn_intervals(reader, texts):
    """Intervals are computed, not parsed: each part's sign and carry drawn on their own."""
    kind_type = column_type(1186, -1, reader)
    assert kind_type.texts is not None
    assert kind_type.texts(pa.array(texts, pa.binary())) is not None  # interval_out's forms are all read at once
    _check(kind_type, texts)
