"""Binary values of the wrong length never reach psycopg's loaders: psycopg's compiled binary loaders read
their type's width whatever the value's length, so a short value would be read past its end.  The widths
are checked against a real server's send functions (``pg_type.typsend``: ``float8send`` ...), and each wrong
length must give the same :class:`RawValue` on every load, the bytes kept whole."""

from __future__ import annotations

import struct
from decimal import Decimal

import psycopg
import pytest

from replwire.codec import RawValue
from replwire.codec.stream.binary_layout import BINARY_WIDTHS
from replwire.codec.stream.values import ValueLoader

#: Each fixed-width type, by name, with an SQL value for the server's send function.
SAMPLES = {"bool": "true", "int2": "1", "int4": "1", "int8": "1", "oid": "1", "float4": "1.5", "float8": "1.5",
           "date": "'2024-01-02'", "time": "'01:02:03'", "timetz": "'01:02:03+04'",
           "timestamp": "'2024-01-02 03:04:05'", "timestamptz": "'2024-01-02 03:04:05+00'",
           "interval": "'1 day 2 hours'", "uuid": "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "money": "'1.25'"}
OIDS = {"bool": 16, "int2": 21, "int4": 23, "int8": 20, "oid": 26, "float4": 700, "float8": 701, "date": 1082,
        "time": 1083, "timetz": 1266, "timestamp": 1114, "timestamptz": 1184, "interval": 1186, "uuid": 2950,
        "money": 790}


@pytest.fixture(scope="module")
def loader():
    return ValueLoader()


def test_widths_are_what_the_server_sends(pg15):
    assert set(BINARY_WIDTHS) == set(OIDS.values())
    with psycopg.connect(pg15.dsn, autocommit=True) as conn:
        for name, sql in SAMPLES.items():
            send = conn.execute("SELECT typsend::text FROM pg_type WHERE oid = %s", (OIDS[name],)).fetchone()[0]
            sent = conn.execute(f"SELECT {send}({sql}::{name})").fetchone()[0]
            assert BINARY_WIDTHS[OIDS[name]] == len(sent), name


#: Values with arrays, ranges, multiranges and records, as the server sends them (``pg_type.typsend``).
LAYOUTS = ["ARRAY[[1, 2], [3, NULL]]::int4[]", "ARRAY[1.5, NULL, '-Infinity']::float8[]", "ARRAY[true, false]",
           "ARRAY[1, -2]::int2[]", "ARRAY['1 day', NULL]::interval[]", "ARRAY['01:02+03']::timetz[]",
           "ARRAY['a', NULL, '']::text[]", "ARRAY[1.25, 'NaN', -7]::numeric[]", "'{}'::int8[]",
           "'[1,5)'::int4range", "'empty'::int4range", "'[2024-01-01,)'::daterange", "'(,1.5]'::numrange",
           "'[1,2]'::numrange",
           "'[2024-01-01 00:00+00,2024-01-02 00:00+00)'::tstzrange", "'{[1,3), [5,7)}'::int4multirange",
           "'{}'::nummultirange", "ARRAY['[1,2)'::int8range, 'empty']", "ROW(1, 'x', 1.5::float8, NULL, ARRAY[1, 2])",
           "ROW(ROW(1, 2.5::numeric), '[1,2)'::int4range)"]


def test_server_sent_layouts_load_as_psycopg_loads_them(pg15, loader):
    with psycopg.connect(pg15.dsn, autocommit=True) as conn:
        for sql in LAYOUTS:
            oid, send = conn.execute(f"SELECT t.oid::int, t.typsend::text FROM pg_type t "
                                     f"WHERE t.oid = pg_typeof({sql})").fetchone()
            sent = bytes(conn.execute(f"SELECT {send}({sql})").fetchone()[0])
            selected = conn.cursor(binary=True).execute(f"SELECT {sql}").fetchone()[0]
            value = loader.load("b", sent, oid)
            if oid == 1187:  # interval[]: replwire keeps the parts psycopg's timedelta folds (test_values_lossless)
                value = [v.timedelta() if v is not None else None for v in value]
            assert not isinstance(value, RawValue) and value == selected, (sql, value, selected)


def wrong_lengths(width: int) -> list[bytes]:
    # fresh objects of varied contents, each one byte short, empty, or one byte long
    return [bytes(range(1, width)), b"", bytes(range(7, 7 + width + 1)), b"\xff" * (width + 8)]


@pytest.mark.parametrize("name", sorted(OIDS))
def test_wrong_width_is_kept_raw_on_every_load(loader, name):
    oid, width = OIDS[name], BINARY_WIDTHS[OIDS[name]]
    for data in wrong_lengths(width):
        for _ in range(20):
            value = loader.load("b", bytearray(data), oid)
            assert value == RawValue(oid, "b", data, f"malformed binary value: a binary {name} is {width} bytes, "
                                                     f"this value is {len(data)}"), (name, data)


def test_right_width_still_loads(loader):
    assert loader.load("b", struct.pack(">d", 1.5), 701) == 1.5
    assert loader.load("b", struct.pack(">q", -7), 20) == -7
    assert loader.load("b", b"\x01", 16) is True


def numeric(ndigits: int, *digits: int) -> bytes:  # numeric_send: ndigits, weight, sign, dscale, digits
    return struct.pack(">hhHh", ndigits, 0, 0, 0) + b"".join(struct.pack(">h", d) for d in digits)


@pytest.mark.parametrize(("data", "reason"), [
    (b"", "a binary numeric has an 8-byte header, this value is 0 bytes"),
    (b"\x00\x01", "a binary numeric has an 8-byte header, this value is 2 bytes"),
    (numeric(2, 12), "a binary numeric with this header is 12 bytes, this value is 10"),
    (numeric(1, 12, 34), "a binary numeric with this header is 10 bytes, this value is 12"),
])
def test_numeric_of_the_wrong_length(loader, data, reason):
    assert loader.load("b", data, 1700) == RawValue(1700, "b", data, f"malformed binary value: {reason}")
    assert loader.load("b", numeric(1, 12), 1700) == Decimal(12)


def array(element: int, *items: bytes | None, dims: tuple[int, ...] | None = None) -> bytes:
    """array_send's layout: ndim, has-nulls, element OID, (length, lower bound) per dimension, elements."""
    dims = (len(items),) if dims is None else dims
    head = struct.pack(">iiI", len(dims), int(None in items), element)
    head += b"".join(struct.pack(">ii", d, 1) for d in dims)
    return head + b"".join(struct.pack(">i", -1) if i is None else struct.pack(">i", len(i)) + i for i in items)


def test_arrays_that_fit_load(loader):
    assert loader.load("b", array(701, struct.pack(">d", 2.5), None), 1022) == [2.5, None]
    assert loader.load("b", array(23, *(struct.pack(">i", i) for i in range(4)), dims=(2, 2)), 1007) \
        == [[0, 1], [2, 3]]
    assert loader.load("b", struct.pack(">iiI", 0, 0, 23), 1007) == []
    assert loader.load("b", array(25, b"ab", None, b""), 1009) == ["ab", None, ""]
    assert loader.load("b", array(16, b"\x01", b"\x00"), 1000) == [True, False]


@pytest.mark.parametrize(("oid", "data", "reason"), [
    (1022, array(701, b"\x00" * 4), "element 1 of a binary array: a binary float8 is 8 bytes, this value is 4"),
    (1007, array(23, b"\x00" * 3, b"\x00" * 5),  # as long as two int4s, not two int4s
     "element 1 of a binary array: a binary int4 is 4 bytes, this value is 3"),
    (1009, array(25, b"ab", b"cd")[:-1], "element 2 of a binary array has length 2, past the end (31 bytes)"),
    (1007, array(23, b"\x00" * 4, b"\x00" * 8),
     "element 2 of a binary array: a binary int4 is 4 bytes, this value is 8"),
    (1016, array(20, b"\x00" * 8)[:-1], "element 1 of a binary array has length 8, past the end (31 bytes)"),
    (1007, array(23, b"\x00" * 4) + b"\x00", "a binary array of 1 elements ends at byte 28, this value is 29 bytes"),
    (1007, array(20, b"\x00" * 8), "a binary array of element type 23 says its elements are of type 20"),
    (1007, array(23, dims=(1000,)), "a binary array of 1000 elements cannot be 20 bytes"),
    (1007, array(23, dims=(-1,)), "dimension 1 of a binary array has length -1"),
    (1007, array(23, dims=(1,) * 7), "a binary array has 0 to 6 dimensions, this value says 7"),
    (1007, struct.pack(">ii", 1, 0), "a binary array has a 12-byte header, this value is 8 bytes"),
    (1007, struct.pack(">iiI", 1, 0, 23),
     "a binary array of 1 dimensions has a 20-byte header, this value is 12 bytes"),
    (1007, struct.pack(">iiI", 0, 0, 23) + b"\x00", "an empty binary array is 12 bytes, this value is 13"),
])
def test_arrays_that_do_not_fit_are_kept_raw(loader, oid, data, reason):
    for _ in range(5):
        assert loader.load("b", data, oid) == RawValue(oid, "b", data, f"malformed binary value: {reason}")


def test_numeric_array_elements_are_checked(loader):
    data = array(1700, numeric(2, 12))
    assert loader.load("b", data, 1231) == RawValue(
        1231, "b", data, "malformed binary value: element 1 of a binary array: a binary numeric with this header is 12 "
                         "bytes, this value is 10")


def test_through_the_assembler_and_json_lines():
    """A short float8 and an int4[] claiming more elements than it holds, in a decoded Insert: the row keeps
    its other values, the two are RawValues, and a JSON line writes their bytes in hex."""
    from replwire.codec import LSN, Assembler, Begin, Commit, Insert, Relation, RelationColumn, TupleColumn, build
    from replwire.codec.stream.jsonl import RowJson
    from replwire.codec.stream.values import RowSchema

    columns = [RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1),
               RelationColumn(flags=0, name="f", type_id=701, type_modifier=-1),
               RelationColumn(flags=0, name="a", type_id=1007, type_modifier=-1)]
    relation = Relation(relation_id=16385, namespace="public", name="t", replica_identity="d", columns=columns)
    short, claims = b"\x3f\xf8\x00\x00", array(23, dims=(1000,))
    new = [TupleColumn.binary(struct.pack(">i", 7)), TupleColumn.binary(short), TupleColumn.binary(claims)]
    sequence = [Begin(final_lsn=LSN(0x1000), commit_time=1, xid=1), relation, Insert(relation_id=16385, new=new),
                Commit(commit_lsn=LSN(0x1000), end_lsn=LSN(0x1030), commit_time=1)]
    for _ in range(5):
        asm = Assembler(proto_version=1)
        out = [item for position, message in enumerate(sequence)
               for item in asm.feed(build(message, proto_version=1), lsn=0x100 + position)]
        assert out[0].changes[0].new == {
            "id": 7,
            "f": RawValue(701, "b", short, "malformed binary value: a binary float8 is 8 bytes, this value is 4"),
            "a": RawValue(1007, "b", claims,
                          "malformed binary value: a binary array of 1000 elements cannot be 20 bytes")}
        line = RowJson()(RowSchema(relation, (None, None, None)), new)
        assert line == f'{{"id":7,"f":"{short.hex()}","a":"{claims.hex()}"}}'


def part(data: bytes | None) -> bytes:  # an int32 length (-1 for NULL), then the bytes
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def int4(value: int) -> bytes:
    return struct.pack(">i", value)


def record(*fields: tuple[int, bytes | None]) -> bytes:  # record_send: count, then (OID, part) per field
    return struct.pack(">i", len(fields)) + b"".join(struct.pack(">I", oid) + part(data) for oid, data in fields)


def test_ranges_multiranges_and_records_that_fit_load(loader):
    from psycopg.types.multirange import Multirange
    from psycopg.types.range import Range

    int4range = b"\x02" + part(int4(1)) + part(int4(5))  # range_send: flags (lower inclusive), the bounds
    assert loader.load("b", int4range, 3904) == Range(1, 5, "[)")
    assert loader.load("b", b"\x01", 3904) == Range(empty=True)
    assert loader.load("b", b"\x18", 3904) == Range(None, None, "()")  # both bounds infinite
    assert loader.load("b", int4(1) + part(int4range), 4451) == Multirange([Range(1, 5, "[)")])
    assert loader.load("b", record((23, int4(7)), (25, b"x"), (701, None)), 2249) == (7, "x", None)


@pytest.mark.parametrize(("oid", "data", "reason"), [
    (3904, b"\x02" + part(b"\x01") + part(int4(5)),
     "the lower bound of a binary range: a binary int4 is 4 bytes, this value is 1"),
    (3904, b"\x12" + part(int4(1) + b"\x00"),
     "the lower bound of a binary range: a binary int4 is 4 bytes, this value is 5"),
    (3912, b"\x08" + part(b"\x00" * 3), "the upper bound of a binary range: a binary date is 4 bytes, this value is 3"),
    (3904, b"\x02" + part(int4(1)) + struct.pack(">i", 40),
     "the upper bound of a binary range has length 40, past the end (13 bytes)"),
    (3904, b"\x02" + part(int4(1)), "the upper bound of a binary range starts past the end (9 bytes)"),
    (3904, b"\x01\x00", "a binary range ends at byte 1, this value is 2 bytes"),
    (3904, b"", "a binary range has a flags byte, this value is empty"),
    (4451, int4(1) + part(b"\x18\x00"), "range 1 of a binary multirange: a binary range ends at byte 1, this "
                                         "value is 2 bytes"),
    (4451, int4(1) + part(b"\x10" + part(b"\x01")),
     "range 1 of a binary multirange: the lower bound of a binary range: a binary int4 is 4 bytes, this value is 1"),
    (4451, int4(9), "a binary multirange of 9 ranges cannot be 4 bytes"),
    (4451, b"\x00", "a binary multirange has a 4-byte count, this value is 1 bytes"),
    (2249, record((701, int4(1))), "field 1 of a binary record: a binary float8 is 8 bytes, this value is 4"),
    (2249, record((23, int4(1))) + b"\x00", "a binary record ends at byte 16, this value is 17 bytes"),
    (2249, int4(100) + int4(23), "a binary record of 100 fields cannot be 8 bytes"),
    (2249, record((1007, b"\x00" * 4)),
     "field 1 of a binary record: a binary array has a 12-byte header, this value is 4 bytes"),
    (3905, array(3904, b"\x02" + part(b"\x01") + part(int4(5))),
     "element 1 of a binary array: the lower bound of a binary range: a binary int4 is 4 bytes, this value is 1"),
])
def test_ranges_multiranges_and_records_that_do_not_fit_are_kept_raw(loader, oid, data, reason):
    for _ in range(5):
        assert loader.load("b", data, oid) == RawValue(oid, "b", data, f"malformed binary value: {reason}")


def test_nesting_is_bounded(loader):
    nested = record()  # 16 records, one in another
    for _ in range(15):
        nested = record((2249, nested))
    assert isinstance(loader.load("b", nested, 2249), tuple)
    deeper = record((2249, nested))
    value = loader.load("b", deeper, 2249)
    assert isinstance(value, RawValue) and value.reason.endswith("a binary value nested more than 16 deep")
