"""The compiled row path (``committed(..., lines=...)`` on COPY-CSV input: plain transactions written to JSON
lines in C) prints what the Python path prints, byte for byte, and fails where and as it fails: on every
stream real PostgreSQL 15 and 18 servers sent, on the benchmark's synthetic stream, on streams of every
value form Hypothesis draws, on corrupted streams, and across a resume.  The Python path is itself held
to the typed objects (:mod:`tests.stream.test_json_lines`); here the real streams are held to those too."""

from __future__ import annotations

import decimal
import pathlib
import string
import struct
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import corpus
from replwire.codec import LSN, Begin, Commit, Delete, Insert, Relation, RelationColumn, Timestamp, TupleColumn, Update
from replwire.codec import build as build_message
from replwire.codec.decode import RecordError, Written, committed
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter, read_capture
from replwire.codec.split import open_inputs
from replwire.codec.stream import jsonl
from replwire.codec.stream.assembler import Assembler, Transaction
from replwire.codec.stream.values import RowSchema
from replwire.codec.wire import fast

COMPILED = fast.COMPILED is not None


FORMS = ["copy-csv", "capture"]


def write_csv(path, rows) -> None:
    """``(lsn, xid, data)`` rows as the COPY-CSV of pg_logical_slot_peek_binary_changes."""
    with open(path, "w") as out:
        for lsn, xid, data in rows:
            out.write(f"{LSN(lsn)},{xid},\\x{data.hex()}\n")


def write_stream(path, rows, form, proto_version):
    """``(lsn, xid, data)`` rows as a file of ``form``; its path."""
    if form == "copy-csv":
        write_csv(path, rows)
    else:
        with CaptureWriter(path, CaptureHeader(proto_version=proto_version, server_version=180000)) as writer:
            for lsn, xid, data in rows:
                writer.append(lsn, xid, data)
    return path


def decode(paths, proto_version, *, row_path):
    """What ``replwire decode`` prints for ``paths`` (JSON lines), its counts (transactions, changes, repeated,
    lines written by the row path, torn tails) and the error it stops with, if any (class and text)."""
    out: list[str] = []
    counts = {"transactions": 0, "changes": 0, "repeated": 0, "written": 0, "tails": []}

    def repeated(item) -> None:
        counts["repeated"] += 1

    def tail(path, problem) -> None:
        counts["tails"].append((path, str(problem)))

    try:
        inputs = open_inputs(paths, None if str(paths[0]).endswith(".rwc") else proto_version)
        writer = jsonl.JsonLines(inputs[0].encoding)
        if not row_path:  # the Python path all through: RowJson's Python writer too
            writer.rows._compiled = None
        for item in committed(inputs, rows=False, repeated=repeated, tail=tail,
                              lines=writer if row_path else None):
            if isinstance(item, Written):
                out.append(item.data.decode())
                counts["transactions"] += item.transactions
                counts["changes"] += item.changes
                counts["repeated"] += item.repeated
                counts["written"] += item.changes
                continue
            counts["transactions"] += isinstance(item, Transaction)
            for line in writer(item):
                if isinstance(line, bytes):  # lines the row path rendered inside a transaction
                    out.append(line.decode())
                    counts["changes"] += line.count(b"\n")
                    counts["written"] += line.count(b"\n")
                    continue
                out.append(line + "\n")
                counts["changes"] += 1
    except Exception as error:  # noqa: BLE001 - compared between the two paths
        return "".join(out), counts, (type(error), str(error))
    return "".join(out), counts, None


def same(paths, proto_version):
    """Both paths on ``paths``: equal text, counts and error; returns the row path's."""
    text, counts, error = decode(paths, proto_version, row_path=True)
    expected_text, expected_counts, expected_error = decode(paths, proto_version, row_path=False)
    assert error == expected_error
    assert text.splitlines() == expected_text.splitlines()
    assert text == expected_text
    assert {k: v for k, v in counts.items() if k != "written"} == {k: v for k, v in expected_counts.items()
                                                                    if k != "written"}
    assert expected_counts["written"] == 0
    return text, counts, error


def typed_lines(messages, proto_version):
    """The reference: the typed objects (values loaded by psycopg) as JSON."""
    assembler = Assembler(proto_version=proto_version)
    return "".join(jsonl.ENCODE(obj) + "\n" for data, lsn in messages for item in assembler.feed(data, lsn)
                   for obj in jsonl.objects(item))


@pytest.mark.server
@pytest.mark.parametrize("form", FORMS)
def test_real_streams(pg_captures, tmp_path, form):
    written = 0
    for n, capture in enumerate(pg_captures.captures):
        path = write_stream(tmp_path / f"{n}.{SUFFIX[form]}", [(int(LSN(lsn)), xid, data)
                                                               for lsn, xid, data in capture.rows],
                            form, capture.proto_version)
        text, counts, error = same([path], capture.proto_version)
        assert error is None, capture.config
        messages = [(data, int(LSN(lsn)) or None) for lsn, _, data in capture.rows]
        assert text == typed_lines(messages, capture.proto_version), capture.config
        written += counts["written"]
    assert written > 100 or not COMPILED


def synthetic_rows(count: int):
    return [(0x1_6000_0000 + 40 * i, 1000 + i, item.data) for i, item in enumerate(corpus.synthetic(count).items)]


def synthetic_rows_with_origins(count: int, has_origin, origin=None):
    """:func:`synthetic_rows` with an Origin (which the compiled column path leaves to Python), or the message
    ``origin`` given, after the Begin of each transaction n (from 1) for which ``has_origin(n)``."""
    from replwire.codec import Origin

    origin = build_message(origin or Origin(origin_lsn=LSN(5), name="o"), proto_version=1)
    rows, begins = [], 0
    for lsn, xid, data in synthetic_rows(count):
        rows.append((lsn, xid, data))
        if data[:1] == b"B":
            begins += 1
            if has_origin(begins):
                rows.append((lsn, xid, origin))
    return rows


@pytest.mark.parametrize("form", FORMS)
def test_synthetic_stream(tmp_path, form):
    rows = synthetic_rows(20_000)
    path = write_stream(tmp_path / f"stream.{SUFFIX[form]}", rows, form, 1)
    text, counts, error = same([path], 1)
    assert error is None
    assert text == typed_lines([(data, lsn) for lsn, _, data in rows], 1)
    assert counts["changes"] > 10_000
    if COMPILED:  # the row path wrote nearly all: the Assembler took only the transactions with a Relation
        assert counts["written"] > 0.9 * counts["changes"]


@pytest.mark.parametrize("form", FORMS)
def test_a_resume_prints_a_transaction_once(tmp_path, form):
    rows = synthetic_rows(3_000)
    again = next(i for i in range(1_000, 2_000) if rows[i][2][:1] == b"B")
    first = write_stream(tmp_path / f"a.{SUFFIX[form]}", rows[:2_000], form, 1)
    second = write_stream(tmp_path / f"b.{SUFFIX[form]}", rows[again:], form, 1)  # sent again from a Begin before
    text, counts, error = same([first, second], 1)
    assert error is None and counts["repeated"] > 50
    whole = write_stream(tmp_path / f"whole.{SUFFIX[form]}", rows, form, 1)
    assert text == decode([whole], 1, row_path=True)[0]


@pytest.mark.parametrize("form", FORMS)
def test_a_transaction_longer_than_a_read(tmp_path, form):
    """A transaction of more than one read (1 MiB) of the input."""
    begin = Begin(final_lsn=LSN(0x5000), commit_time=Timestamp(1), xid=7)
    relation = Relation(relation_id=9, namespace="public", name="t", replica_identity="d",
                        columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1),
                                 RelationColumn(flags=0, name="v", type_id=25, type_modifier=-1)])
    rows = [begin, relation, Commit(flags=0, commit_lsn=LSN(0x5000), end_lsn=LSN(0x5010), commit_time=Timestamp(1)),
            Begin(final_lsn=LSN(0x6000), commit_time=Timestamp(2), xid=8)]
    rows += [Insert(relation_id=9, new=[TupleColumn.text(str(i)), TupleColumn.text("x" * 2000)]) for i in range(800)]
    rows += [Commit(flags=0, commit_lsn=LSN(0x6000), end_lsn=LSN(0x6010), commit_time=Timestamp(2))]
    path = write_stream(tmp_path / f"long.{SUFFIX[form]}",
                        [(0x100 + i, 7, build_message(m, proto_version=1)) for i, m in enumerate(rows)], form, 1)
    text, counts, error = same([path], 1)
    assert error is None and counts["changes"] == 800
    assert counts["written"] == 800  # (by the compiled row path, or by PlainRuns under the Python codec)


@pytest.mark.parametrize("form", FORMS)
def test_a_transaction_longer_than_the_row_path_takes(tmp_path, form, monkeypatch):
    """A transaction of more input than ``rows_run`` holds at once is opened by the Assembler (which spills a
    big one to a file), and its changes rendered into its buffer by ``rows_body``; the transactions around
    it go to ``rows_run``."""
    from replwire.codec import decode

    monkeypatch.setattr(decode, "_CHUNK", 1 << 14)
    monkeypatch.setattr(decode, "_MOST", 1 << 16)
    rows = synthetic_rows(2_000)
    relation_end = max(i for i, (_, _, data) in enumerate(rows[:200]) if data[:1] == b"R")
    start = next(i for i in range(relation_end, 2_000) if rows[i][2][:1] == b"B")
    commit = next(i for i in range(start, 2_000) if rows[i][2][:1] == b"C")
    big = [rows[start + 1]] * 600  # one insert, many times: about 100 KiB of input
    rows = rows[:start + 1] + big + rows[commit:]
    path = write_stream(tmp_path / f"big.{SUFFIX[form]}", rows, form, 1)
    text, counts, error = same([path], 1)
    assert error is None and '"op":"insert"' in text
    if COMPILED:  # all but the few the Assembler takes after fruitless tries (CompiledPath's patience)
        assert counts["changes"] - 100 < counts["written"] <= counts["changes"]


# -- every value form: drawn streams over columns of many types -----------------------------------------------

#: column types by OID: text, varchar, name, int2/4/8, bool, numeric, float8, date, timestamptz, uuid, bytea,
#: jsonb, oid 999999 (unknown to the loaders: kept as text)
TYPES = [25, 1043, 19, 21, 23, 20, 16, 1700, 701, 700, 1082, 1083, 1114, 1184, 2950, 17, 3802, 114, 1186, 3904,
         3910, 1007, 1016, 1009, 1015, 1022, 1021, 1231, 1000, 2951, 1182, 999_999]
SAMPLES = {
    23: ["-0", "007", "+5", " 1", "1_0", "x", "-2147483648", "0", "12"],
    20: ["9" * 25, "-", "0", "-9223372036854775808", "9223372036854775807"],
    21: ["-32768", "00"],
    16: ["t", "f", "x", "true"],
    1700: ["1.50", "-0.000", "0.0000001", "0.000001", "0.00000000", "NaN", "12345678901234567890.5", "1e5", "abc",
           "Infinity", "-Infinity", "-0", "0", "007", "5.", "-.5", "123.000000001", "0.00000100", "-", "1.2.3"],
    701: ["1.5", "-0", "Infinity", "-Infinity", "NaN", "1e308", "1e309", "x", "0.1", "1e+15", "1e-05", "100", "-nan",
          "inf", " 1.5", "1_0", "0.30000000000000004", "4.9e-324", "1.7976931348623157e+308", "+1", ".5", "5.",
          "1e", "--1", ""],
    700: ["0.33333334", "-0", "3.4028235e+38", "1e-45", "NaN", "Infinity", "1.1"],
    1007: ["{1,2,3}", "{}", "{NULL,-2147483648}", "{{1,2},{3,4}}", "[0:1]={1,2}", "{1, 2}", "{007}", "{null}",
           "{1,,2}", "{1,2", "{1,2}}", "{\"1\"}", "{{{{{{{1}}}}}}}", "{{{{{{1}}}}}}", "{{},{}}", "{1}x", "{,}"],
    1016: ["{9223372036854775807,-9223372036854775808}", "{99999999999999999999}"],
    1009: ['{a,"b c",NULL,"NULL","",é,"q\\"u\\\\o"}', "{\"a\\nb\"}", '{"x\\', '{"\xff"}', "{a b}", "{{a},{b}}",
           "{\"\u2028\"}", '{"tab\there"}', "{Null}", '{"}', '{a"b}', "{\\}"],
    1015: ["{x,y}"],
    1022: ["{1.5,NaN,-Infinity,Infinity,-0,1e+100,NULL}", "{1e999}", "{\"1.5\"}", "{ 1}"],
    1021: ["{0.33333334,1.1}"],
    1231: ["{1.50,-0.000,NaN,12345678901234567890.5}", "{0.0000001}"],
    1000: ["{t,f,NULL}", "{true}", "{x}"],
    2951: ["{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}", "{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}"],
    1182: ["{2024-02-29,infinity}"],
    1082: ["2024-02-29", "2023-02-29", "infinity", "0099-01-01 BC", "2024-13-01", "0000-01-01", "9999-12-31",
           "2024-04-31", "2024-4-01"],
    1083: ["12:00:00", "23:59:59.999999", "24:00:00", "12:00:00.5", "12:00:00.000", "12:00:60", "12:00", "1:00:00",
           "12:00:00.1234567"],
    1114: ["2024-02-29 12:00:00.5", "2024-02-29 12:00:00", "2024-02-29 12:00:00.000000", "infinity",
           "2024-02-29T12:00:00", "2024-02-30 12:00:00", "2024-02-29 12:00:00 BC", "10000-01-01 00:00:00"],
    1184: ["2024-02-29 12:00:00.5+01", "2024-02-29 12:00:00+00", "infinity", "bad", "2024-02-29 12:00:00.25+00:00",
           "2024-02-29 12:00:00+00:00:00", "2024-02-29 12:00:00-00", "2024-02-29 23:59:59.999999+00",
           "2024-02-29 12:00:00+05:30", "0001-01-01 00:00:00+00", "2024-02-29 12:00:00+0000"],
    2950: ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "x",
           "a0eebc999c0b4ef8bb6d6bb9bd380a11", "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
           "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g"],
    17: ["\\x00ff", "\\xABCD", "\\x0", "plain", "\\x", "\\xzz", "\\X00"],
    3802: ['{"a": [1, 2.5, "\\u00e9"]}', "[]", "nul", '"\\ud800"'],
    114: ['{"n": 1.000000000000000000001, "a": 1, "a": 2}', "null", ' [1,\n 2] '],
    1186: ["1 mon", "-1 mons +30 days", "1 year 2 mons -3 days +04:05:06.789", "00:00:00", "-00:00:00.5",
           "1 mon1 day", "P1Y2M3DT4H5M6.5S", "PT", "P", "infinity", "-infinity", "1 day " + "9" * 5000 + ":00:00",
           "@ 1 mon ago", "1-2", "1 year", "-1 years -2 mons", "3 days", "-3 days -00:00:00.000001", "+04:05:06",
           "1 mon ", "1 mon  2 days", "2 days 1 mon", "178956970 years 7 mons 2147483647 days 2562047788:00:54.775807",
           "999999999 years", "-999999999 years -11 mons", "123456789:59:59.999999", "00:00:00.100000", "1 day 1",
           "1 days", "1 year 1 mon 1 day 01:00:00", "1 dayz", "5", "-", "10:00", "10:00:00.", "10:00:00.1234567"],
    3904: ["(,11)", "[1,11)", "empty", "[1,", "x"],
    3910: ['["2026-01-01 00:00:00+00",)', "(,)", "empty"],
}
VALUE_TEXT = {23: st.one_of(st.integers(-2**31, 2**31 - 1).map(str), st.sampled_from(SAMPLES[23])),
              20: st.one_of(st.integers(-2**63, 2**63 - 1).map(str), st.sampled_from(SAMPLES[20])),
              **{type_id: st.sampled_from(samples) for type_id, samples in SAMPLES.items() if type_id not in (23, 20)}}
TEXT = st.one_of(st.text(alphabet=string.printable + "\x00\x01\x1f\x7f é€𝄞\u2028\"\\"),
                 st.text()).map(lambda s: s.encode("utf-8", "surrogatepass"))
RAW = st.binary(max_size=8)  # not always UTF-8


def _int(width):
    bits = 8 * width
    return st.one_of(st.integers(-2**(bits - 1), 2**(bits - 1) - 1), st.sampled_from([-2**(bits - 1), 2**(bits - 1) - 1,
                                                                                        0, -1])
                     ).map(lambda v: v.to_bytes(width, "big", signed=True))


def _numeric_send(value):
    """numeric_send's bytes of a Decimal (as the server writes them: base-10000 digits, no leading or trailing
    zero groups, dscale the Decimal's places)."""
    if value.is_nan():
        return struct.pack(">HhHH", 0, 0, 0xC000, 0)
    if value.is_infinite():
        return struct.pack(">HhHH", 0, 0, 0xF000 if value < 0 else 0xD000, 0)
    sign, digits, exponent = value.as_tuple()
    dscale = max(0, -exponent)
    text = "".join(map(str, digits)) + "0" * max(0, exponent)  # the coefficient's digits, then the places
    text = text.rjust(dscale + 1, "0")
    whole, fraction = (text[:len(text) - dscale] or "0"), text[len(text) - dscale:] if dscale else ""
    whole = whole.lstrip("0")
    whole = "0" * (-len(whole) % 4) + whole
    fraction = fraction + "0" * (-len(fraction) % 4)
    groups = [int(whole[i:i + 4]) for i in range(0, len(whole), 4)] + [int(fraction[i:i + 4])
                                                                       for i in range(0, len(fraction), 4)]
    weight = len(whole) // 4 - 1
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight, sign = 0, 0
    return struct.pack(f">HhHH{len(groups)}H", len(groups), weight, 0x4000 if sign else 0, dscale, *groups)


def _array_send(element_oid, elements, shape=None):
    """array_send's bytes of the (flat, row-major) binary elements (None: NULL) in ``shape``."""
    if not elements:
        return struct.pack(">iiI", 0, 0, element_oid)
    shape = shape or [len(elements)]
    head = struct.pack(">iiI", len(shape), any(e is None for e in elements), element_oid)
    head += b"".join(struct.pack(">ii", n, 1) for n in shape)
    return head + b"".join(struct.pack(">i", -1) if e is None else struct.pack(">i", len(e)) + e for e in elements)


_FINITE = st.floats(allow_nan=False, allow_infinity=False)
BINARY = {
    21: _int(2), 23: _int(4), 20: _int(8), 16: st.sampled_from([b"\x00", b"\x01", b"\x02"]),
    701: st.one_of(st.floats().map(lambda v: struct.pack(">d", v)), st.binary(min_size=8, max_size=8)),
    700: st.one_of(st.floats(width=32).map(lambda v: struct.pack(">f", v)), st.binary(min_size=4, max_size=4),
                   st.sampled_from([struct.pack(">f", v) for v in (3.4028235e38, -3.4028235e38, 1e-45, 1.1, 0.1)])),
    25: TEXT, 1043: TEXT, 19: TEXT, 114: TEXT,
    3802: st.one_of(TEXT.map(lambda b: b"\x01" + b), st.just(b"\x02{}"), st.just(b"")),
    17: st.binary(max_size=20), 999_999: st.binary(max_size=20),
    2950: st.binary(min_size=16, max_size=16),
    1082: st.one_of(st.integers(-2**31, 2**31 - 1), st.integers(-800_000, 3_000_000),
                    st.sampled_from([2**31 - 1, -2**31, -730_120, -730_119, 2_921_939, 2_921_940])
                    ).map(lambda v: v.to_bytes(4, "big", signed=True)),
    1114: _int(8), 1184: _int(8),
    1083: st.one_of(st.integers(0, 86_400_000_000), _int(8).map(lambda b: int.from_bytes(b, "big", signed=True))
                    ).map(lambda v: v.to_bytes(8, "big", signed=True)),
    1186: st.one_of(st.binary(min_size=16, max_size=16),
                    st.tuples(st.integers(-10**12, 10**12), st.integers(-1000, 1000), st.integers(-50, 50)).map(
                        lambda t: struct.pack(">qii", *t)),
                    st.sampled_from([struct.pack(">qii", 2**63 - 1, 2**31 - 1, 2**31 - 1),
                                     struct.pack(">qii", -2**63, -2**31, -2**31), struct.pack(">qii", -2**63, 0, 0)])),
    1700: st.one_of(st.decimals(allow_nan=True, allow_infinity=True, places=None).map(_numeric_send),
                    st.decimals(allow_nan=False, allow_infinity=False, places=3).map(_numeric_send),
                    st.binary(min_size=8, max_size=14)),
    1007: st.lists(st.one_of(st.none(), _int(4)), max_size=5).map(lambda e: _array_send(23, e)),
    1016: st.lists(_int(8), min_size=6, max_size=6).map(lambda e: _array_send(20, e, [2, 3])),
    1009: st.lists(st.one_of(st.none(), TEXT), max_size=4).map(lambda e: _array_send(25, e)),
    1022: st.lists(st.one_of(st.none(), _FINITE.map(lambda v: struct.pack(">d", v))), max_size=4).map(
        lambda e: _array_send(701, e)),
    1021: st.lists(st.floats(width=32).map(lambda v: struct.pack(">f", v)), max_size=4).map(
        lambda e: _array_send(700, e)),
    1231: st.lists(st.decimals(allow_nan=True, places=2).map(_numeric_send), max_size=3).map(
        lambda e: _array_send(1700, e)),
    1000: st.just(_array_send(16, [b"\x01", None, b"\x00"])),
    2951: st.just(_array_send(2950, [bytes(range(16))])),
}
#: malformed arrays: a wrong element type, a short element, bytes left over, a bad dimension
BINARY_ODD_ARRAYS = st.sampled_from([_array_send(20, [b"\x00" * 8]), _array_send(23, [b"\x00" * 3]),
                                     _array_send(23, [b"\x00" * 4]) + b"\x00", struct.pack(">iiIii", 1, 0, 23, -1, 1),
                                     struct.pack(">iiIii", 7, 0, 23, 1, 1), struct.pack(">iiI", 0, 0, 23) + b"\x00"])


def column_value(type_id):
    text = VALUE_TEXT.get(type_id)
    data = TEXT if text is None else st.one_of(text.map(str.encode), TEXT)
    binary = st.one_of(BINARY.get(type_id, st.nothing()), st.binary(max_size=10), BINARY_ODD_ARRAYS)
    return st.one_of(
        data.map(lambda b: TupleColumn(kind="t", data=b)),
        RAW.map(lambda b: TupleColumn(kind="t", data=b)),
        st.just(TupleColumn.null()), st.just(TupleColumn.unchanged_toast()),
        binary.map(lambda b: TupleColumn(kind="b", data=b)))


@st.composite
def streams(draw):
    """A stream of plain transactions over two drawn tables, as (lsn, xid, data) rows."""
    tables = {}
    for relation_id in (16_400, 16_401):
        types = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=6))
        names = draw(st.lists(st.text(alphabet="abcé\"\\\n", min_size=1, max_size=4), min_size=len(types),
                              max_size=len(types), unique=True))
        columns = [RelationColumn(flags=draw(st.sampled_from([0, 1])), name=name, type_id=type_id, type_modifier=-1)
                   for name, type_id in zip(names, types)]
        tables[relation_id] = Relation(relation_id=relation_id, namespace=draw(st.sampled_from(["", "public", "s\"é"])),
                                       name=draw(st.sampled_from(["t", "ü\\n"])), replica_identity="d",
                                       columns=columns)
    lsn = draw(st.sampled_from([0x100, 0x1_0000_0000]))
    when = draw(st.sampled_from([0, 1, -1, 848_561_712_500_000, -63_082_281_600_000_000, 2**63 - 1,
                                 252_455_615_999_999_999, 252_455_616_000_000_000]))
    # the Relations in a transaction of their own (what the Assembler takes), or with the first change
    described: set[int] = set()
    messages: list = []
    if draw(st.booleans()):
        described = set(tables)
        messages += [Begin(final_lsn=LSN(lsn), commit_time=Timestamp(when), xid=99), *tables.values(),
                     Commit(flags=0, commit_lsn=LSN(lsn), end_lsn=LSN(lsn + 8), commit_time=Timestamp(when))]
    for xid in range(draw(st.integers(1, 6))):
        messages.append(Begin(final_lsn=LSN(lsn), commit_time=Timestamp(when), xid=xid))
        for _ in range(draw(st.integers(0, 3))):
            relation_id = draw(st.sampled_from(sorted(tables)))
            relation = tables[relation_id]
            if relation_id not in described:
                described.add(relation_id)
                messages.append(relation)

            def row():
                return [draw(column_value(c.type_id)) for c in relation.columns]  # noqa: B023
            kind = draw(st.sampled_from(["insert", "update", "update-key", "update-old", "delete", "delete-old"]))
            if kind == "insert":
                messages.append(Insert(relation_id=relation_id, new=row()))
            elif kind.startswith("update"):
                messages.append(Update(relation_id=relation_id, key=row() if kind == "update-key" else None,
                                       old=row() if kind == "update-old" else None, new=row()))
            else:
                messages.append(Delete(relation_id=relation_id, key=None if kind == "delete-old" else row(),
                                       old=row() if kind == "delete-old" else None))
        lsn += 0x100
        messages.append(Commit(flags=0, commit_lsn=LSN(lsn), end_lsn=LSN(lsn + 8), commit_time=Timestamp(when)))
    return [(lsn + i, 5, build_message(m, proto_version=1)) for i, m in enumerate(messages)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rows=streams(), form=st.sampled_from(FORMS))
def test_drawn_values(tmp_path_factory, rows, form):
    same([write_stream(tmp_path_factory.mktemp("drawn") / f"stream.{SUFFIX[form]}", rows, form, 1)], 1)


def row_json_outcome(row_json, schema, columns, only_keys):
    toasted: list[str] = []
    try:
        return row_json(schema, columns, only_keys=only_keys, toasted=toasted), toasted
    except Exception as error:  # noqa: BLE001 - compared between the two writers
        return (type(error), str(error)), toasted


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_row_json_writes_what_its_python_writer_writes(data):
    """RowJson (what the Spark source's rows use) through the compiled writer and through its Python writer:
    the same text, the same unchanged TOAST names, the same error."""
    types = data.draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=6))
    relation = Relation(relation_id=1, namespace="public", name="t", replica_identity="d",
                        columns=[RelationColumn(flags=data.draw(st.sampled_from([0, 1])), name=f"c{i}é\"",
                                                type_id=type_id, type_modifier=-1) for i, type_id in enumerate(types)])
    schema = RowSchema(relation, (None,) * len(types))
    columns = [data.draw(column_value(type_id)) for type_id in types]
    columns = columns[:data.draw(st.integers(0, len(columns)))] if data.draw(st.booleans()) else columns
    compiled, python = jsonl.RowJson(), jsonl.RowJson()
    python._compiled = None
    assert (compiled._compiled is not None) == COMPILED
    for only_keys in (False, True):
        assert row_json_outcome(compiled, schema, columns, only_keys) == row_json_outcome(python, schema, columns,
                                                                                          only_keys)


def test_every_value_form(tmp_path):
    """Each value form of :data:`SAMPLES` and some texts (valid UTF-8 or not) in every column type, each in
    a stream of its own (a value the Python path fails on ends its stream)."""
    columns = [RelationColumn(flags=1 if i == 0 else 0, name=f"c{type_id}", type_id=type_id, type_modifier=-1)
               for i, type_id in enumerate(TYPES)]
    relation = Relation(relation_id=16_400, namespace="public", name="t", replica_identity="d", columns=columns)
    texts = ["", "plain", 'q"uote\\', "line\nbreak\ttab\r\b\f", "\x00\x01\x1f\x7f", "é€𝄞", "\u2028"]
    values = [(type_id, text.encode()) for type_id in TYPES for text in [*texts, *SAMPLES.get(type_id, [])]]
    values += [(25, b"\xff"), (25, b"\xed\xa0\x80"), (25, b"\xc0\x80"), (25, b"\xf4\x90\x80\x80"), (25, b"\xe2\x82")]
    written = errors = 0
    for n, (type_id, data) in enumerate(values):
        row = [TupleColumn(kind="t", data=data) if c.type_id == type_id else TupleColumn.null() for c in columns]
        when = Timestamp(n * 7_654_321_987)
        messages = [Begin(final_lsn=LSN(0x100), commit_time=when, xid=1), relation,
                    Commit(flags=0, commit_lsn=LSN(0x100), end_lsn=LSN(0x108), commit_time=when),
                    Begin(final_lsn=LSN(0x200), commit_time=when, xid=2), Insert(relation_id=16_400, new=row),
                    Commit(flags=0, commit_lsn=LSN(0x200), end_lsn=LSN(0x208), commit_time=when)]
        path = tmp_path / f"{n}.csv"
        write_csv(path, [(0x100 + i, 5, build_message(m, proto_version=1)) for i, m in enumerate(messages)])
        _, counts, error = same([path], 1)
        written += counts["written"]
        errors += error is not None
    assert errors < len(values) // 4
    if COMPILED:
        assert written > len(values) // 2


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_corrupted_streams(tmp_path_factory, data):
    """A synthetic stream with bytes changed, put in or cut out, anywhere in the CSV or the capture file's
    records, or the capture file cut short: the same lines, then the same error or torn tail."""
    form = data.draw(st.sampled_from(FORMS))
    text = bytearray(CORRUPTIBLE[form])
    if form == "capture" and data.draw(st.booleans()):
        del text[data.draw(st.integers(HEADER_END + 1, len(text) - 1)):]
    for _ in range(data.draw(st.integers(0 if form == "capture" else 1, 3))):
        low = 0 if form == "copy-csv" else HEADER_END
        if len(text) <= low:
            break
        at = data.draw(st.integers(low, len(text) - 1))
        edit = data.draw(st.sampled_from(["set", "insert", "cut"]))
        byte = data.draw(st.sampled_from(list(b"0123456789abcdefABCDEF,\\x/\n\r g")))
        if edit == "set":
            text[at] = byte
        elif edit == "insert":
            text.insert(at, byte)
        else:
            del text[at]
    path = tmp_path_factory.mktemp("corrupt") / f"stream.{SUFFIX[form]}"
    path.write_bytes(bytes(text))
    same([path], 1)


def _corruptible(form) -> tuple[bytes, int]:
    """The synthetic stream's file in ``form``, and where its records start."""
    with tempfile.TemporaryDirectory() as scratch:
        path = write_stream(pathlib.Path(scratch) / f"stream.{SUFFIX[form]}", synthetic_rows(400), form, 1)
        if form == "copy-csv":
            return path.read_bytes(), 0
        with read_capture(path) as reader:
            return path.read_bytes(), reader.header_end


SUFFIX = {"copy-csv": "csv", "capture": "rwc"}
CORRUPTIBLE = {form: _corruptible(form)[0] for form in FORMS}
HEADER_END = _corruptible("capture")[1]


def test_the_fuzz_target_starts_inside_the_row_path():
    """The seeds of ``make fuzz-compiled``'s row path target are plain transactions it writes, in both forms,
    rows ending in an empty value of each way, a row of binary values, two-phase transactions (one
    committed at once, which it writes, one rolled back at once, which it takes and prints nothing of), and
    a streamed transaction's blocks, which the column path takes given the router's open streamed
    transactions; the target holds its invariants on them and on inputs cut anywhere."""
    from replwire.codec.split import fuzz

    streamed = 4 + len(fuzz._LAST_WAYS) + 4
    assert len(fuzz.SEEDS) == streamed + 3
    for n, seed in enumerate(fuzz.SEEDS):
        for cut in range(0, len(seed), 7):
            fuzz.fuzz_rows(seed[:cut])
        fuzz.fuzz_rows(seed)
        if COMPILED and n >= streamed:  # the column path takes every block, Stream Abort and Stream Commit
            body, frame = seed[1:], fuzz._FRAME if seed[0] & 1 else None
            outcomes, streams, relations = dict.fromkeys(range(len(body))), {}, []
            result = fast.COMPILED.rows_columns(body, True, fuzz._COLUMN_PLANS, 1 + (seed[0] >> 2) % 4, frame, 0,
                                                outcomes, {}, 1 << 30, 1 << 30, False, streams,
                                                dict.fromkeys(outcomes, fuzz._FACTS), relations)
            assert result[0] == len(body) and result[2] == 4 + 6 * (n == streamed + 2) and streams == {}
            assert len(relations) == 1 and relations[0][5:] == fuzz._RELATION_SENT[1:]  # (sent again in a block)
            assert fast.COMPILED.rows_columns(body, True, fuzz._COLUMN_PLANS, 1 + (seed[0] >> 2) % 4, frame, 0,
                                              outcomes, {}, 1 << 30, 1 << 30)[2] == 3 * (n == streamed + 2)
        elif COMPILED and seed[0] & 2:  # whole input
            result = fast.COMPILED.rows_run(seed[1:], True, fuzz._PLANS, 1 + (seed[0] >> 2) % 4, -1,
                                            fuzz._FRAME if seed[0] & 1 else None, None, True)
            if n < 4:  # every transaction written
                assert result[4] == 3 and result[7] == 0
            elif n >= 4 + len(fuzz._LAST_WAYS) + 2:  # two-phase: the first written, the rolled back one taken
                assert result[3:5] == (1, 1) and result[2] == 9 and result[7] == 0 and result[6] == 0x4040
            elif n >= 4 + len(fuzz._LAST_WAYS):  # the row of binary values: written in C
                assert result[4] == 1 and result[7] == 0
            elif fuzz._LAST_WAYS[n - 4] == 2:  # an empty integer: left to the Python path (int(b"") fails)
                assert result[:5] == (0, b"", 0, 0, 0) and result[7] != 0


@pytest.mark.parametrize("form", FORMS)
def test_a_stream_the_row_path_mostly_declines(tmp_path, form):
    """Transactions with a logical message (which the row path leaves to the Assembler), with a plain one
    now and then: after a run of tries that took nothing the row path is tried less often, and the output
    is the same."""
    from replwire.codec import Message

    message = Message(xid=None, flags=1, lsn=LSN(5), prefix="p", content=b"c")
    rows = synthetic_rows_with_origins(6_000, lambda n: n % 40 != 0, message)
    path = write_stream(tmp_path / f"messages.{SUFFIX[form]}", rows, form, 1)
    text, counts, error = same([path], 1)
    assert error is None and '"prefix":"p"' in text and counts["changes"] > 3_000


@pytest.mark.parametrize("form", FORMS)
def test_origins_are_written_by_the_row_path(tmp_path, form):
    """Transactions with an Origin right after their Begin (what the server sends for a change replicated
    from elsewhere) are the row path's, their lines naming it; an Origin elsewhere is the Assembler's."""
    from replwire.codec import Origin

    rows = synthetic_rows_with_origins(3_000, lambda n: n % 2 == 0, Origin(origin_lsn=LSN(5), name="o\"é"))
    path = write_stream(tmp_path / f"origins.{SUFFIX[form]}", rows, form, 1)
    text, counts, error = same([path], 1)
    assert error is None and '"origin":"o\\"é"' in text and '"origin"' not in text.splitlines()[0]
    if COMPILED:  # as many changes as without the Origins (those of the transactions with Relations: Python's)
        plain = write_stream(tmp_path / f"plain.{SUFFIX[form]}", synthetic_rows(3_000), form, 1)
        assert counts["written"] == same([plain], 1)[1]["written"] > counts["changes"] * 0.9
    late = [(lsn, xid, data) for lsn, xid, data in rows]
    first_insert = next(i for i, row in enumerate(late) if row[2][:1] == b"I")
    late.insert(first_insert + 1, (late[first_insert][0], late[first_insert][1],
                                   build_message(Origin(origin_lsn=LSN(5), name="late"), proto_version=1)))
    path = write_stream(tmp_path / f"late.{SUFFIX[form]}", late, form, 1)
    same([path], 1)


@pytest.mark.skipif(not COMPILED, reason="the compiled row path is not built")
@pytest.mark.parametrize("raised", [KeyboardInterrupt, ValueError])
def test_an_interrupt_in_a_value_function_is_not_swallowed(raised):
    """A value written through the plan's Python function: an error of the value (an Exception) leaves the
    transaction to the Python path, which raises it in its place; a KeyboardInterrupt stops the row path."""
    def call(data: bytes) -> str:
        raise raised("stop")

    starts = (b'{"op":"insert","xid":', b'{"op":"update","xid":', b'{"op":"delete","xid":')
    plans = {16_400: fast.COMPILED.rows_plan(starts, ((b'"v":', 4, True, call, "v"),))}
    when = Timestamp(0)
    messages = [Begin(final_lsn=LSN(0x100), commit_time=when, xid=1),
                Insert(relation_id=16_400, new=[TupleColumn(kind="t", data=b"1")]),
                Commit(flags=0, commit_lsn=LSN(0x100), end_lsn=LSN(0x108), commit_time=when)]
    rows = b"".join(f"{LSN(0x100 + i)},1,\\x{build_message(m, proto_version=1).hex()}\n".encode()
                    for i, m in enumerate(messages))
    body = rows[rows.index(b"\n") + 1:]  # (the Insert and the Commit: what rows_body takes inside the Begin)
    if raised is KeyboardInterrupt:
        with pytest.raises(KeyboardInterrupt, match="stop"):
            fast.COMPILED.rows_run(rows, True, plans, 1, -1, None, None)
        with pytest.raises(KeyboardInterrupt, match="stop"):
            fast.COMPILED.rows_body(body, True, plans, 1, False, None, False)
    else:  # declined at the transaction's start (the Begin, handed back as read), and at the Insert
        begin = build_message(messages[0], proto_version=1)
        assert fast.COMPILED.rows_run(rows, True, plans, 1, -1, None, None) == (
            0, b"", 0, 0, 0, 0, -1, (0x100, begin, len(rows) - len(body)), -1)
        insert = build_message(messages[1], proto_version=1)
        assert fast.COMPILED.rows_body(body, True, plans, 1, False, None, False) == (
            0, b"", 0, {}, (0x101, insert, body.index(b"\n") + 1))


def test_binary_values_written_in_c():
    """Binary values of each type the compiled writer reads, against hand-checked JSON; the compiled writer
    takes the row (it does not hand it to the Python writer), and the Python writer writes the same."""
    cases = [
        (23, b"\x00\x00\x00\x2a", "42"), (21, b"\xff\xfe", "-2"), (20, (2**63 - 1).to_bytes(8, "big"), str(2**63 - 1)),
        (16, b"\x01", "true"), (700, struct.pack(">f", 1.1), "1.1"), (700, struct.pack(">f", -0.0), "-0.0"),
        (701, struct.pack(">d", float("nan")), '"NaN"'), (701, struct.pack(">d", 1e300), "1e+300"),
        (1700, _numeric_send(decimal.Decimal("-12.50")), '"-12.50"'),
        (1700, _numeric_send(decimal.Decimal("0.00001230")), '"0.00001230"'),
        (1700, _numeric_send(decimal.Decimal("123456789.0")), '"123456789.0"'),
        (1184, bytes(8), '"2000-01-01T00:00:00+00:00"'), (1114, (-1).to_bytes(8, "big", signed=True),
                                                            '"1999-12-31T23:59:59.999999"'),
        (1082, (-1).to_bytes(4, "big", signed=True), '"1999-12-31"'),
        (1082, (2**31 - 1).to_bytes(4, "big"), '"infinity"'),
        (1083, (45_296_789_000).to_bytes(8, "big"), '"12:34:56.789000"'),
        (1186, struct.pack(">qii", 3_600_000_000, 1, 14), '"P1Y2M1DT1H"'),
        (2950, bytes(range(16)), '"00010203-0405-0607-0809-0a0b0c0d0e0f"'),
        (3802, b'\x01{"a": 1}', '"{\\"a\\": 1}"'), (17, b"\x00\xff", '"\\\\x00ff"'), (25, "é".encode(), '"é"'),
        (1007, _array_send(23, [b"\x00\x00\x00\x01", b"\x00\x00\x00\x02", b"\x00\x00\x00\x03", None], [2, 2]),
         "[[1,2],[3,null]]"),
        (1009, _array_send(25, [b"a", b'"']), '["a","\\""]'), (1007, _array_send(23, []), "[]"),
    ]
    relation = Relation(relation_id=1, namespace="public", name="t", replica_identity="d",
                        columns=[RelationColumn(flags=0, name=f"c{i}", type_id=t, type_modifier=-1)
                                 for i, (t, _, _) in enumerate(cases)])
    schema = RowSchema(relation, (None,) * len(cases))
    columns = [TupleColumn(kind="b", data=data) for _, data, _ in cases]
    expected = "{" + ",".join(f'"c{i}":{text}' for i, (_, _, text) in enumerate(cases)) + "}"
    python = jsonl.RowJson()
    python._compiled = None
    assert python(schema, columns) == expected
    if COMPILED:
        plan = fast.COMPILED.rows_plan((b"", b"", b""), jsonl.RowJson().plan_columns(schema))
        assert fast.COMPILED.rows_row(plan, columns, False, None) == expected


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_drawn_binary_values(data):
    """One binary value of a drawn type (well-formed for it, mostly): the compiled writer writes what the
    Python writer writes, or hands it over."""
    type_id = data.draw(st.sampled_from(sorted(BINARY)))
    value = data.draw(st.one_of(BINARY[type_id], BINARY[type_id], st.binary(max_size=12)))
    relation = Relation(relation_id=1, namespace="public", name="t", replica_identity="d",
                        columns=[RelationColumn(flags=1, name="v", type_id=type_id, type_modifier=-1)])
    schema = RowSchema(relation, (None,))
    columns = [TupleColumn(kind="b", data=value)]
    python = jsonl.RowJson()
    python._compiled = None
    expected = row_json_outcome(python, schema, columns, False)
    if COMPILED:
        plan = fast.COMPILED.rows_plan((b"", b"", b""), jsonl.RowJson().plan_columns(schema))
        written = fast.COMPILED.rows_row(plan, columns, False, None)
        assert written is None or (written, []) == expected


# -- streamed and two-phase transactions: the row changes inside them rendered by rows_body --------------------

def _columns(width: int, w_type: int = 20) -> list[RelationColumn]:
    names = [("id", 23, 1), ("v", 25, 0), ("w", w_type, 0)]
    return [RelationColumn(flags=flags, name=name, type_id=oid, type_modifier=-1) for name, oid, flags in names[:width]]


@st.composite
def interleaved_streams(draw):
    """A protocol 4 stream of streamed transactions whose blocks interleave with each other, with plain and
    two-phase transactions between them: subtransactions aborted between blocks (some making changes after
    their abort, which are dropped), whole transactions
    aborted, streamed ones prepared and committed or rolled back later, Relations inside blocks (the table
    changing shape mid-stream: each change is read with the Relation in force when it came), logical
    messages and truncates inside bodies (which rows_body leaves to the Assembler), a value it does not
    write in C.  As ``(lsn, xid, data)`` rows."""
    from replwire.codec import (
        BeginPrepare,
        CommitPrepared,
        Message,
        Origin,
        Prepare,
        RollbackPrepared,
        StreamAbort,
        StreamCommit,
        StreamPrepare,
        StreamStart,
        StreamStop,
        Truncate,
    )

    rows: list[tuple[int, int, bytes]] = []
    lsn = [0x7000_0000]
    width = [2]

    def emit(message, in_stream=False, xid=0):
        lsn[0] += 0x40
        rows.append((lsn[0], xid, build_message(message, proto_version=4, in_stream=in_stream)))

    def relation(xid=None):  # (w's type changes too: its values are then written another way)
        width[0] = draw(st.sampled_from([2, 3]))
        emit(Relation(xid=xid, relation_id=9, namespace="public", name="t\u00e9", replica_identity="d",
                      columns=_columns(width[0], draw(st.sampled_from([20, 25])))), in_stream=xid is not None,
             xid=xid or 0)

    def value(i):
        n = draw(st.integers(0, 9))
        return [TupleColumn.text(str(n)), TupleColumn.text(draw(st.sampled_from(["a", "\u00e9\"\\", ""]))),
                draw(st.sampled_from([TupleColumn.text(str(1 << 40)), TupleColumn.null(),
                                      TupleColumn.binary(b"\x00\x01")]))][:width[0]]  # (w binary: not int8's 8 bytes)

    def body(xid, sub=None):
        for i in range(draw(st.integers(0, 6))):
            x = sub if sub is None else draw(st.sampled_from(sub))
            kind = draw(st.sampled_from(["I", "I", "U", "D", "M", "T", "R"] if x is not None else ["I", "U", "D", "M"]))
            streamed = x is not None
            if kind == "R":
                relation(xid)
            elif kind == "I":
                emit(Insert(xid=x, relation_id=9, new=value(i)), streamed, xid)
            elif kind == "U":
                new = value(i)
                if width[0] == 3 and draw(st.booleans()):
                    new[2] = TupleColumn.unchanged_toast()
                emit(Update(xid=x, relation_id=9, key=None, old=None, new=new), streamed, xid)
            elif kind == "D":
                emit(Delete(xid=x, relation_id=9, key=[TupleColumn.text("1")] + [TupleColumn.null()] * (width[0] - 1),
                            old=None), streamed, xid)
            elif kind == "M":
                emit(Message(xid=x, flags=1, lsn=LSN(lsn[0]), prefix="p", content=b"c"), streamed, xid)
            else:
                emit(Truncate(xid=x, options=0, relation_ids=[9]), streamed, xid)

    def ends():
        lsn[0] += 0x40
        return LSN(lsn[0]), LSN(lsn[0] + 8)

    commit, end = ends()
    emit(Begin(final_lsn=commit, commit_time=Timestamp(5), xid=600), xid=600)
    relation()
    emit(Commit(flags=0, commit_lsn=commit, end_lsn=end, commit_time=Timestamp(5)), xid=600)
    open_streams: dict[int, list[int]] = {}
    prepared: list[tuple[int, str]] = []
    next_xid, next_sub = 700, 700_000
    for _ in range(draw(st.integers(1, 20))):
        action = draw(st.sampled_from(["plain", "block", "block", "block", "abort sub", "abort sub", "end", "two-phase",
                                       "finish prepared", "two-phase at once", "two-phase at once"]))
        if action == "plain":
            xid = next_xid = next_xid + 1
            commit, end = ends()
            emit(Begin(final_lsn=commit, commit_time=Timestamp(5), xid=xid), xid=xid)
            body(xid)
            emit(Commit(flags=0, commit_lsn=commit, end_lsn=end, commit_time=Timestamp(5)), xid=xid)
        elif action == "block":
            if open_streams and draw(st.booleans()):
                xid = draw(st.sampled_from(sorted(open_streams)))
                first = False
            else:
                xid = next_xid = next_xid + 1
                open_streams[xid] = [xid]
                first = True
            subs = open_streams[xid]
            if len(subs) < 3 and draw(st.booleans()):
                next_sub = next_sub + 1  # (a new subtransaction: an aborted one's xid is never used again)
                subs.append(next_sub)
            emit(StreamStart(xid=xid, first_segment=int(first)), xid=xid)
            if first and draw(st.booleans()):
                relation(xid)
            body(xid, subs)
            emit(StreamStop(), xid=xid)
        elif action == "abort sub" and any(len(subs) > 1 for subs in open_streams.values()):
            xid = draw(st.sampled_from(sorted(x for x, subs in open_streams.items() if len(subs) > 1)))
            subxid = draw(st.sampled_from(open_streams[xid][1:]))
            if draw(st.integers(0, 3)):  # (an aborted subtransaction makes no more changes, as a rule; its
                open_streams[xid].remove(subxid)  # changes after the abort are dropped wherever they are)
            emit(StreamAbort(xid=xid, subxid=subxid, abort_lsn=None, abort_time=None), xid=xid)
        elif action == "end" and open_streams:
            xid = draw(st.sampled_from(sorted(open_streams)))
            del open_streams[xid]
            how = draw(st.sampled_from(["commit", "abort", "prepare"]))
            commit, end = ends()
            if how == "commit":
                emit(StreamCommit(xid=xid, flags=0, commit_lsn=commit, end_lsn=end, commit_time=Timestamp(7)), xid=xid)
            elif how == "abort":
                emit(StreamAbort(xid=xid, subxid=xid, abort_lsn=None, abort_time=None), xid=xid)
            else:
                gid = f"g{xid}"
                emit(StreamPrepare(flags=0, prepare_lsn=commit, end_lsn=end, prepare_time=Timestamp(7), xid=xid,
                                   gid=gid), xid=xid)
                prepared.append((xid, gid))
        elif action == "two-phase":
            xid = next_xid = next_xid + 1
            commit, end = ends()
            emit(BeginPrepare(prepare_lsn=commit, end_lsn=end, prepare_time=Timestamp(6), xid=xid, gid=f"g{xid}"),
                 xid=xid)
            body(xid)
            emit(Prepare(flags=0, prepare_lsn=commit, end_lsn=end, prepare_time=Timestamp(6), xid=xid, gid=f"g{xid}"),
                 xid=xid)
            prepared.append((xid, f"g{xid}"))
        elif action == "two-phase at once":  # committed (or rolled back) right after its Prepare, as a rule
            xid = next_xid = next_xid + 1
            commit, end = ends()
            shared = "g\u00e9\"\\"  # (a gid written escaped; one only while no prepared transaction has it)
            gid = draw(st.sampled_from([f"g{xid}"] + ([shared] if all(g != shared for _, g in prepared) else [])))
            emit(BeginPrepare(prepare_lsn=commit, end_lsn=end, prepare_time=Timestamp(6), xid=xid, gid=gid), xid=xid)
            if draw(st.booleans()):
                emit(Origin(origin_lsn=LSN(0x10), name=draw(st.sampled_from(["o", "\u00e9"]))), xid=xid)
            body(xid)
            emit(Prepare(flags=0, prepare_lsn=commit, end_lsn=end, prepare_time=Timestamp(6), xid=xid, gid=gid),
                 xid=xid)
            commit, end = ends()
            finish = draw(st.sampled_from(["commit", "commit", "commit xid 0", "rollback", "later"]))
            if finish == "rollback":
                emit(RollbackPrepared(flags=0, prepare_end_lsn=commit, rollback_end_lsn=end, prepare_time=Timestamp(6),
                                      rollback_time=Timestamp(8), xid=xid, gid=gid), xid=xid)
            elif finish == "later":
                prepared.append((xid, gid))
            else:
                emit(CommitPrepared(flags=0, commit_lsn=commit, end_lsn=end, commit_time=Timestamp(8),
                                    xid=0 if finish == "commit xid 0" else xid, gid=gid), xid=xid)
        elif action == "finish prepared" and prepared:
            xid, gid = prepared.pop(draw(st.integers(0, len(prepared) - 1)))
            commit, end = ends()
            if draw(st.booleans()):
                emit(CommitPrepared(flags=0, commit_lsn=commit, end_lsn=end, commit_time=Timestamp(8), xid=xid,
                                    gid=gid), xid=xid)
            else:
                emit(RollbackPrepared(flags=0, prepare_end_lsn=commit, rollback_end_lsn=end, prepare_time=Timestamp(6),
                                      rollback_time=Timestamp(8), xid=xid, gid=gid), xid=xid)
    for xid in sorted(open_streams):  # the streams still open commit (or are prepared, and commit later)
        commit, end = ends()
        emit(StreamCommit(xid=xid, flags=0, commit_lsn=commit, end_lsn=end, commit_time=Timestamp(9)), xid=xid)
    for xid, gid in prepared:
        commit, end = ends()
        emit(CommitPrepared(flags=0, commit_lsn=commit, end_lsn=end, commit_time=Timestamp(9), xid=xid, gid=gid),
             xid=xid)
    return rows


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(rows=interleaved_streams(), form=st.sampled_from(FORMS), spill=st.booleans())
def test_interleaved_streamed_and_two_phase_transactions(tmp_path_factory, monkeypatch, rows, form, spill):
    """Streamed, prepared and plain transactions interleaved (:func:`interleaved_streams`): the row path
    prints what the Python path prints, and what the typed objects give; with ``spill`` every transaction's
    buffer goes to its spill file at once, the rendered runs with the parsed changes."""
    import functools

    from replwire.codec import decode as decode_module

    if spill:
        monkeypatch.setattr(decode_module, "Assembler", functools.partial(Assembler, spill_threshold=0))
    path = write_stream(tmp_path_factory.mktemp("interleaved") / f"s.{SUFFIX[form]}", rows, form, 4)
    text, counts, error = same([path], 4)
    assert error is None
    assert text == typed_lines([(data, lsn) for lsn, _, data in rows], 4)


def test_streamed_changes_are_rendered_by_the_row_path(tmp_path):
    """The row changes inside stream blocks and prepared transactions are written by the row path (the
    Assembler keeps their transactions), and a subtransaction aborted between blocks leaves out its lines."""
    from replwire.codec import BeginPrepare, CommitPrepared, Prepare, StreamAbort, StreamCommit, StreamStart, StreamStop

    def insert(i, xid=None):
        return Insert(xid=xid, relation_id=9, new=[TupleColumn.text(str(i)), TupleColumn.text("x")])

    at = (LSN(0x800), LSN(0x808), Timestamp(1))
    messages = [(StreamStart(xid=5, first_segment=1), False),
                (Relation(xid=5, relation_id=9, namespace="public", name="t", replica_identity="d",
                          columns=_columns(2)), True),
                *[(insert(i, 5 if i % 2 else 6), True) for i in range(40)],
                (StreamStop(), False),
                (StreamAbort(xid=5, subxid=6, abort_lsn=None, abort_time=None), False),
                (StreamCommit(xid=5, flags=0, commit_lsn=LSN(0x900), end_lsn=LSN(0x910), commit_time=Timestamp(1)),
                 False),
                (BeginPrepare(prepare_lsn=at[0], end_lsn=at[1], prepare_time=at[2], xid=8, gid="g"), False),
                *[(insert(i), False) for i in range(10)],
                (Prepare(flags=0, prepare_lsn=at[0], end_lsn=at[1], prepare_time=at[2], xid=8, gid="g"), False),
                (CommitPrepared(flags=0, commit_lsn=LSN(0xA00), end_lsn=LSN(0xA10), commit_time=Timestamp(2), xid=8,
                                gid="g"), False)]
    rows = [(0x100 + 0x10 * n, 5, build_message(m, proto_version=4, in_stream=streamed))
            for n, (m, streamed) in enumerate(messages)]
    path = write_stream(tmp_path / "s.csv", rows, "copy-csv", 4)
    text, counts, error = same([path], 4)
    assert error is None and counts["changes"] == 30
    assert text.count('"subxid":5') == 20 and text.count('"gid":"g"') == 10
    # (the Python codec's PlainRuns renders the stream block's, not a prepared transaction's)
    assert counts["written"] == (30 if COMPILED else 20)


def test_two_phase_transactions_committed_at_once_are_written_whole(tmp_path):
    """A two-phase transaction whose Commit Prepared follows its Prepare is written by rows_run in one go,
    with its gid, as a plain one is (one rolled back at once is taken too, and prints nothing); one
    committed later, and one whose gid another prepared transaction still holds (which replaces it: the
    later Commit Prepared then finds none) go to the Python path, with the same text and the same error."""
    from replwire.codec import BeginPrepare, CommitPrepared, Origin, Prepare, RollbackPrepared

    def insert(i):
        return Insert(xid=None, relation_id=9, new=[TupleColumn.text(str(i)), TupleColumn.text("x")])

    def two_phase(xid, gid, finish, origin=False):
        at = (LSN(0x1000 * xid), LSN(0x1000 * xid + 8), Timestamp(xid))
        done = (LSN(0x1000 * xid + 0x800), LSN(0x1000 * xid + 0x808), Timestamp(xid + 1))
        out = [BeginPrepare(prepare_lsn=at[0], end_lsn=at[1], prepare_time=at[2], xid=xid, gid=gid)]
        if origin:
            out.append(Origin(origin_lsn=LSN(0x10), name="elsewhere"))
        out += [insert(i) for i in range(3)]
        out.append(Prepare(flags=0, prepare_lsn=at[0], end_lsn=at[1], prepare_time=at[2], xid=xid, gid=gid))
        if finish == "commit":
            out.append(CommitPrepared(flags=0, commit_lsn=done[0], end_lsn=done[1], commit_time=done[2], xid=xid,
                                      gid=gid))
        elif finish == "rollback":
            out.append(RollbackPrepared(flags=0, prepare_end_lsn=at[1], rollback_end_lsn=done[1], prepare_time=at[2],
                                        rollback_time=done[2], xid=xid, gid=gid))
        return out

    def stream(name, messages):
        rows = [(0x100 + 0x10 * n, 5, build_message(m, proto_version=4)) for n, m in enumerate(messages)]
        return write_stream(tmp_path / name, rows, "copy-csv", 4)

    relation = Relation(xid=None, relation_id=9, namespace="public", name="t", replica_identity="d",
                        columns=_columns(2))
    begin = (Begin(final_lsn=LSN(0x900), commit_time=Timestamp(1), xid=4),
             Commit(flags=0, commit_lsn=LSN(0x900), end_lsn=LSN(0x910), commit_time=Timestamp(1)))
    messages = [begin[0], relation, begin[1], *two_phase(10, "a", "commit", origin=True),
                *two_phase(11, "b\u00e9", "commit"), *two_phase(12, "c", "rollback"), *two_phase(13, "d", "commit")]
    text, counts, error = same([stream("whole.csv", messages)], 4)
    assert error is None and counts["transactions"] == 4 and counts["changes"] == 9
    assert text.count('"origin":"elsewhere","gid":"a"') == 3 and text.count('"gid":"b\u00e9"') == 3
    assert counts["written"] == (9 if COMPILED else 0)
    inputs = open_inputs([tmp_path / "whole.csv"], 4)
    items = list(committed(inputs, rows=False, lines=jsonl.JsonLines(inputs[0].encoding)))
    assert sum(isinstance(item, Transaction) for item in items) == (1 if COMPILED else 4)  # (the first: its Relation)
    later = [begin[0], relation, begin[1], *two_phase(10, "a", "later"), *two_phase(11, "a", "commit"),
             CommitPrepared(flags=0, commit_lsn=LSN(0x20000), end_lsn=LSN(0x20008), commit_time=Timestamp(3), xid=10,
                            gid="a")]
    text, counts, error = same([stream("later.csv", later)], 4)
    assert error is not None and error[0] is RecordError and counts["changes"] == 3


@pytest.mark.parametrize("rolled_back", [True, False])
def test_a_capture_starting_where_a_rollback_ended_is_one_stream(tmp_path, rolled_back):
    """A two-phase transaction rolled back right after its Prepare (which rows_run takes) completes the
    position of its Rollback Prepared: a second capture whose slot stood there continues the stream (without
    the rollback, its start is past what the first reaches, and both paths refuse it alike)."""
    from replwire.codec import BeginPrepare, Prepare, RollbackPrepared
    from replwire.codec.stream.snapshot_records import confirmed_record

    relation = Relation(xid=None, relation_id=9, namespace="public", name="t", replica_identity="d",
                        columns=_columns(2))

    def insert(i):
        return Insert(xid=None, relation_id=9, new=[TupleColumn.text(str(i)), TupleColumn.text("x")])

    def plain(xid, at):
        return [Begin(final_lsn=LSN(at), commit_time=Timestamp(1), xid=xid), insert(xid),
                Commit(flags=0, commit_lsn=LSN(at), end_lsn=LSN(at + 8), commit_time=Timestamp(1))]

    first = [Begin(final_lsn=LSN(0x900), commit_time=Timestamp(1), xid=4), relation,
             Commit(flags=0, commit_lsn=LSN(0x900), end_lsn=LSN(0x908), commit_time=Timestamp(1)),
             *plain(5, 0xA00), *plain(6, 0xB00)]
    if rolled_back:
        first += [BeginPrepare(prepare_lsn=LSN(0xC00), end_lsn=LSN(0xC08), prepare_time=Timestamp(2), xid=7, gid="g"),
                  insert(7), Prepare(flags=0, prepare_lsn=LSN(0xC00), end_lsn=LSN(0xC08), prepare_time=Timestamp(2),
                                     xid=7, gid="g"),
                  RollbackPrepared(flags=0, prepare_end_lsn=LSN(0xC08), rollback_end_lsn=LSN(0xD08),
                                   prepare_time=Timestamp(2), rollback_time=Timestamp(3), xid=7, gid="g")]
    header = CaptureHeader(proto_version=4, server_version=180000)
    paths = [tmp_path / "a.rwc", tmp_path / "b.rwc"]
    with CaptureWriter(paths[0], header) as writer:
        writer.append(0x800, 0, confirmed_record(0x800, True))
        for n, message in enumerate(first):
            writer.append(0x900 + n, 0, build_message(message, proto_version=4))
    with CaptureWriter(paths[1], header) as writer:
        writer.append(0xD08, 0, confirmed_record(0xD08, True))
        second = plain(8, 0xE00)
        for n, message in enumerate([second[0], relation, *second[1:]]):
            writer.append(0xE00 + n, 0, build_message(message, proto_version=4))
    text, counts, error = same(paths, 4)
    if rolled_back:
        assert error is None and counts["transactions"] == 4 and text.count('"op":"insert"') == 3
    else:
        assert error is not None and "not one stream" in error[1]


def test_a_relation_changed_inside_a_stream_block_changes_how_values_are_written(tmp_path):
    """A Relation inside a stream block that changes a column's type (int8, then text): the changes after it
    are written the new way (the row path's plans follow the Relations the Python side reads)."""
    from replwire.codec import StreamCommit, StreamStart, StreamStop

    def relation(w_type):
        return Relation(xid=5, relation_id=9, namespace="public", name="t", replica_identity="d",
                        columns=_columns(3, w_type))

    def insert(i):
        return Insert(xid=5, relation_id=9, new=[TupleColumn.text(str(i)), TupleColumn.text("x"),
                                                 TupleColumn.text("42")])

    messages = [(StreamStart(xid=5, first_segment=1), False), (relation(20), True),
                *[(insert(i), True) for i in range(3)], (relation(25), True), *[(insert(i), True) for i in range(3)],
                (StreamStop(), False),
                (StreamCommit(xid=5, flags=0, commit_lsn=LSN(0x900), end_lsn=LSN(0x910), commit_time=Timestamp(1)),
                 False)]
    rows = [(0x100 + 0x10 * n, 5, build_message(m, proto_version=4, in_stream=streamed))
            for n, (m, streamed) in enumerate(messages)]
    text, counts, error = same([write_stream(tmp_path / "s.csv", rows, "copy-csv", 4)], 4)
    assert error is None and counts["written"] == 6
    assert [line.endswith('"w":42}}') for line in text.splitlines()] == [True] * 3 + [False] * 3
    assert text.count('"w":"42"}}') == 3
