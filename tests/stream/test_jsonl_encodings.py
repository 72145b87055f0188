"""The compiled JSON writers on streams whose client encoding is LATIN1 or SQL_ASCII: what they print is, byte
for byte, what the Python writers print, and they do print it (the compiled row path is taken).

The references are independent of the C: the Python path (the Assembler and RowJson's Python writer, under
the same process; the Python codec, in a process of its own, for the command), hand-checked bytes for a few
values, and ``json.loads`` of every line against the text the value's bytes decode to.  The bytes of a
SQL_ASCII stream's lines are compared as ``replwire decode`` prints them: its standard output writes the
surrogates U+DC80-U+DCFF (bytes 128-255) as the escapes ``\\udc80``-``\\udcff`` (``errors="backslashreplace"``),
which the compiled path writes itself.  Real servers' streams (a LATIN1 and a SQL_ASCII database) are at the
end.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from replwire.codec import (
    LSN,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    Message,
    Origin,
    Prepare,
    Relation,
    RelationColumn,
    StreamCommit,
    StreamStart,
    StreamStop,
    Timestamp,
    TupleColumn,
    Update,
)
from replwire.codec import build as build_message
from replwire.codec.decode import Written, committed
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter
from replwire.codec.split import open_inputs
from replwire.codec.stream import fuzz, jsonl
from replwire.codec.stream.debezium import DebeziumEvents
from replwire.codec.stream.values import ValueLoader
from replwire.codec.wire import fast

pytestmark = pytest.mark.skipif(fast.COMPILED is None, reason="the compiled codec is not in use")

#: PostgreSQL's names of the encodings, and the Python codecs they read as.
ENCODINGS = {"LATIN1": "iso8859-1", "SQL_ASCII": "sql_ascii"}
PROTO = 3

#: Text values: every byte 0x80-0xff, escapes (quote, backslash, control characters, DEL), and plain ones.
HIGH = bytes(range(0x80, 0x100))
TEXTS = [b"cr\xe8me br\xfbl\xe9e", b'q"uote \\ back\\slash', b"\x01\x1f\t\n\r\x08\x0c ctl \x7f", HIGH,
         b"\x80\x9f\xa0\xc3\xa9\xff", b"", b"plain ascii"]
#: The relation: names with bytes past ASCII, a quote and a backslash; a column of each kind of text.
SCHEMA, TABLE = b"sch\xe9ma", b'caf\xe9 "q" \\'
COLUMNS = [(b"id", 23), (b"na\xefve", 25), (b"\xff", 1043), (b"j\xe9", 3802), (b"js", 114), (b"tags", 1009),
           (b"mood", 16_500), (b"prix", 1700), (b"at", 1184), (b"n", 19), (b"c", 1042)]


def _array(texts: list[bytes]) -> bytes:
    """array_out's text of ``texts``: each element quoted, its quotes and backslashes escaped."""
    return b"{" + b",".join(b'"' + t.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"' for t in texts) + b"}"


def _json(text: bytes) -> bytes:
    """A JSON object with ``text`` as a key and as a value (escaped as JSON escapes them)."""
    escaped = b"".join(b"\\u%04x" % c if c < 0x20 else b"\\" + bytes([c]) if c in b'"\\' else bytes([c]) for c in text)
    return b'{"' + escaped + b'": "' + escaped + b'", "n": 1.50}'


def row(i: int, binary: bool = False) -> list[TupleColumn]:
    """A row of the relation, its texts from :data:`TEXTS` (turned by ``i``); with ``binary`` its text, varchar,
    json and jsonb values in binary format (textsend's bytes are the text's)."""
    text = TEXTS[i % len(TEXTS)]
    other = TEXTS[(i + 3) % len(TEXTS)]

    def value(data: bytes, binary_data: bytes | None = None) -> TupleColumn:
        if binary and binary_data is not None:
            return TupleColumn(kind="b", data=binary_data)
        return TupleColumn(kind="t", data=data)

    return [TupleColumn.text(str(i)), value(text, text), value(other, other), value(_json(text), b"\x01" + _json(text)),
            value(_json(other), _json(other)), value(_array([text, other, b"NULL"]) if i % 2 else b"{a\xe9,NULL,b}"),
            value(b"\xe9t\xe9" if i % 2 else b"happy"), value(b"12.50"), value(b"2026-11-29 10:00:00.5+00"),
            value(text[:63]), value(other + b"  ")]


def relation(codec: str, table: bytes = TABLE) -> Relation:
    return Relation(relation_id=16_384, namespace=SCHEMA.decode(codec) if table == TABLE else "public",
                    name=table.decode(codec),
                    replica_identity="d", columns=[RelationColumn(flags=int(name == b"id"), name=name.decode(codec),
                                                                  type_id=type_id, type_modifier=-1)
                                                   for name, type_id in COLUMNS])


def stream(codec: str, table: bytes = TABLE) -> list[tuple[int, int, bytes]]:
    """``(lsn, xid, data)`` records of a stream in ``codec``: a transaction that sends the Relation (the
    Assembler's, written by ``rows_row``), plain transactions with an Origin (``rows_run``), a two-phase one with
    a gid past ASCII (``rows_run``), a streamed one (``rows_body`` and ``rows_join``), binary values, a logical
    message.  ``table``: the relation's name (another than :data:`TABLE` in the schema public)."""
    stamp = Timestamp(848_561_712_500_000)
    origin = Origin(origin_lsn=LSN(0x10), name=b"or\xedgen \x80".decode(codec))
    gid = b"g\xefd \xff".decode(codec)
    out: list[tuple[Any, bool]] = []
    xid = 700

    def here() -> LSN:  # the LSN of the next record (each record's is its place's: they rise)
        return LSN(0x10000 * (len(out) + 1))

    def plain(changes: list[Any], with_origin: bool = False) -> None:
        nonlocal xid
        xid += 1
        out.append((Begin(final_lsn=LSN(here() + 0x10000 * (len(changes) + 1 + with_origin)), commit_time=stamp,
                          xid=xid), False))
        if with_origin:
            out.append((origin, False))
        out.extend((change, False) for change in changes)
        out.append((Commit(flags=0, commit_lsn=here(), end_lsn=LSN(here() + 8), commit_time=stamp), False))

    plain([relation(codec, table), *(Insert(relation_id=16_384, new=row(i)) for i in range(7))], with_origin=True)
    key = [TupleColumn.text("3"), *[TupleColumn.null()] * (len(COLUMNS) - 1)]
    plain([Insert(relation_id=16_384, new=row(i)) for i in range(7, 21)], with_origin=True)
    plain([Update(relation_id=16_384, key=None, new=row(22)), Delete(relation_id=16_384, key=key),
           Update(relation_id=16_384, key=None, new=[*row(23)[:2], TupleColumn.unchanged_toast(), *row(23)[3:]])])
    plain([Insert(relation_id=16_384, new=row(i, binary=True)) for i in range(24, 31)])
    xid += 1
    at = LSN(here() + 0x30000)  # (the Prepare's)
    out += [(BeginPrepare(prepare_lsn=at, end_lsn=LSN(at + 8), prepare_time=stamp, xid=xid, gid=gid), False),
            (origin, False), (Insert(relation_id=16_384, new=row(31)), False),
            (Prepare(flags=0, prepare_lsn=at, end_lsn=LSN(at + 8), prepare_time=stamp, xid=xid, gid=gid), False)]
    out.append((CommitPrepared(flags=0, commit_lsn=here(), end_lsn=LSN(here() + 8), commit_time=stamp, xid=xid,
                               gid=gid), False))
    out += [(StreamStart(xid=900, first_segment=1), False),
            *((Insert(xid=900, relation_id=16_384, new=row(i)), True) for i in range(32, 40)),
            (StreamStop(), True)]
    out.append((StreamCommit(xid=900, flags=0, commit_lsn=here(), end_lsn=LSN(here() + 8), commit_time=stamp),
                False))
    out.append((Message(flags=0, lsn=here(), prefix=b"pr\xe9fixe".decode(codec), content=b"\xe9"), False))
    plain([Insert(relation_id=16_384, new=row(i)) for i in range(41, 45)], with_origin=True)
    # a key change among inserts: Debezium's events of it are the Python writer's, of the inserts the C's, all
    # counted per table together
    plain([Insert(relation_id=16_384, new=row(45)), Update(relation_id=16_384, key=key, new=row(46)),
           Insert(relation_id=16_384, new=row(47))])
    return [(0x10000 * (n + 1), 0, build_message(message, proto_version=PROTO, in_stream=in_stream, encoding=codec))
            for n, (message, in_stream) in enumerate(out)]


def write(path, records, encoding: str, form: str):
    if form == "capture":
        with CaptureWriter(path, CaptureHeader(proto_version=PROTO, client_encoding=encoding)) as writer:
            for lsn, xid, data in records:
                writer.append(lsn, xid, data)
    else:
        with open(path, "w") as out:
            for lsn, xid, data in records:
                out.write(f"{LSN(lsn)},{xid},\\x{data.hex()}\n")
    return path


class _Counting:
    """The compiled module, counting the rows ``rows_row`` wrote (not None)."""

    def __init__(self) -> None:
        self.rows = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(fast.COMPILED, name)

    def rows_row(self, *args: Any) -> Any:
        text = fast.COMPILED.rows_row(*args)
        self.rows += text is not None
        return text


def decode(path, encoding: str, *, compiled: bool, debezium: bool = False) -> tuple[bytes, dict[str, int]]:
    """What ``replwire decode`` prints of ``path`` as bytes (a str line as its standard output writes it), and
    how much the compiled writers wrote: lines of the row path (``written``), rows of ``rows_row``."""
    capture = str(path).endswith(".rwc")
    inputs = open_inputs([path], None if capture else PROTO, None if capture else encoding)
    if debezium:
        writer: Any = DebeziumEvents("test", encoding=inputs[0].encoding)
        lines = writer.lines
    else:
        writer = lines = jsonl.JsonLines(inputs[0].encoding)
    rows = writer._row_json() if debezium else writer.rows
    counting = _Counting()
    rows._compiled = counting if compiled and rows._compiled is not None else None
    out: list[bytes] = []
    counts = {"written": 0, "rows_row": 0}
    for item in committed(inputs, rows=False, lines=writer if compiled else None):
        if isinstance(item, Written):
            out.append(item.data)
            counts["written"] += item.changes
            continue
        for line in lines(item):
            if isinstance(line, bytes):  # rendered by the row path inside a transaction
                out.append(line)
                counts["written"] += line.count(b"\n")
            else:
                out.append(jsonl.line_bytes(line + "\n"))
    counts["rows_row"] = counting.rows
    return b"".join(out), counts


def _no_times(text: bytes) -> bytes:
    """Debezium's events without the times they were made at (and the commit's, which is the same in both)."""
    return re.sub(rb'"ts_(ms|us|ns)":\d+', b'"ts":0', text)


@pytest.mark.parametrize("form", ["capture", "copy-csv"])
@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_the_compiled_writers_print_what_the_python_writers_print(tmp_path, encoding, form):
    path = write(tmp_path / ("s.rwc" if form == "capture" else "s.csv"), stream(ENCODINGS[encoding]), encoding, form)
    got, counts = decode(path, encoding, compiled=True)
    expected, python = decode(path, encoding, compiled=False)
    assert got.splitlines() == expected.splitlines()
    assert got == expected
    assert python == {"written": 0, "rows_row": 0}
    # the compiled ways were taken: the row path's runs, and its rendered changes inside transactions
    assert counts["written"] >= 40, counts
    assert len(expected.splitlines()) == 48
    got.decode("utf-8")  # (UTF-8 through and through: LATIN1 transcoded, SQL_ASCII's bytes 128-255 escaped)


@pytest.mark.parametrize("table", [TABLE, b"plain"])
@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_the_compiled_debezium_events_are_the_python_writers(tmp_path, encoding, table):
    path = write(tmp_path / "s.rwc", stream(ENCODINGS[encoding], table), encoding, "capture")
    got, counts = decode(path, encoding, compiled=True, debezium=True)
    expected, _ = decode(path, encoding, compiled=False, debezium=True)
    assert _no_times(got).splitlines() == _no_times(expected).splitlines()
    assert len(expected.splitlines()) == 51  # (a tombstone after a delete; a key change three events more)
    assert counts["written"] >= 40, counts


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_the_lines_read_back_as_the_texts_the_bytes_decode_to(tmp_path, encoding):
    """Independent of both writers: each text value of each line is its bytes decoded in the encoding."""
    codec = ENCODINGS[encoding]
    records = stream(codec)
    got, _ = decode(write(tmp_path / "s.rwc", records, encoding, "capture"), encoding, compiled=True)
    lines = [json.loads(line) for line in got.splitlines()]
    changes = [line for line in lines if line["op"] == "insert"]
    assert len(changes) == 43
    names = [name.decode(codec) for name, _ in COLUMNS]
    for line in changes:
        i = line["new"]["id"]
        assert (line["schema"], line["table"]) == (SCHEMA.decode(codec), TABLE.decode(codec))
        assert list(line["new"]) == names
        text, other = TEXTS[i % len(TEXTS)], TEXTS[(i + 3) % len(TEXTS)]
        assert line["new"][names[1]] == text.decode(codec)
        assert line["new"][names[2]] == other.decode(codec)
        assert line["new"][names[3]] == _json(text).decode(codec)
        assert json.loads(line["new"][names[3]]) == {text.decode(codec): text.decode(codec), "n": 1.5}
        assert line["new"][names[6]] == (b"\xe9t\xe9" if i % 2 else b"happy").decode(codec)
        if i % 2:
            assert line["new"][names[5]] == [text.decode(codec), other.decode(codec), "NULL"]
    origins = {line.get("origin") for line in lines}
    assert b"or\xedgen \x80".decode(codec) in origins
    assert b"g\xefd \xff".decode(codec) in {line.get("gid") for line in lines}


def small(tmp_path, encoding: str, text: bytes):
    """A capture file in ``encoding`` of a Relation's transaction, then one inserting the text ``text``."""
    records = [(0x1000 + n, 0, build_message(m, proto_version=1, encoding=jsonl.text_codec(encoding))) for n, m in
               enumerate((Begin(final_lsn=LSN(0x1000), commit_time=Timestamp(0), xid=7),
                          Relation(relation_id=1, namespace="public", name="t", replica_identity="d",
                                   columns=[RelationColumn(flags=1, name="v", type_id=25, type_modifier=-1)]),
                          Commit(flags=0, commit_lsn=LSN(0x1000), end_lsn=LSN(0x1008), commit_time=Timestamp(0)),
                          Begin(final_lsn=LSN(0x2000), commit_time=Timestamp(0), xid=8),
                          Insert(relation_id=1, new=[TupleColumn(kind="t", data=text)]),
                          Commit(flags=0, commit_lsn=LSN(0x2000), end_lsn=LSN(0x2008), commit_time=Timestamp(0))))]
    with CaptureWriter(tmp_path / "s.rwc", CaptureHeader(proto_version=1, client_encoding=encoding)) as writer:
        for lsn, xid, data in records:
            writer.append(lsn, xid, data)
    return tmp_path / "s.rwc"


@pytest.mark.parametrize(("encoding", "text", "expected"), [
    ("LATIN1", b'\xe9"\\\x01\xff\x7f\x80', b'"\xc3\xa9\\"\\\\\\u0001\xc3\xbf\x7f\xc2\x80"'),
    ("SQL_ASCII", b'\xe9"\\\x01\xff\x7f\x80', b'"\\udce9\\"\\\\\\u0001\\udcff\x7f\\udc80"'),
    ("LATIN1", HIGH, b'"' + HIGH.decode("latin-1").encode() + b'"'),
    ("SQL_ASCII", HIGH, b'"' + b"".join(b"\\udc%02x" % c for c in HIGH) + b'"'),
])
def test_hand_checked_values(tmp_path, encoding, text, expected):
    got, counts = decode(small(tmp_path, encoding, text), encoding, compiled=True)
    assert counts["written"] == 1
    assert got == (b'{"op":"insert","schema":"public","table":"t","xid":8,"lsn":"0/1004","commit_lsn":"0/2000",'
                   b'"commit_time":"2000-01-01T00:00:00+00:00","new":{"v":' + expected + b"}}\n")


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_row_json_writes_what_its_python_writer_writes(encoding):
    """RowJson's compiled writer (``rows_row``, a str back: SQL_ASCII's surrogates as they are) against its
    Python writer and the typed row's JSON, on rows of the stream's relation (text, binary, unchanged TOAST)."""
    from replwire.codec.stream.values import RowSchema

    codec = ENCODINGS[encoding]
    schema = RowSchema(relation(codec), [None] * len(COLUMNS))
    compiled, python = jsonl.RowJson(ValueLoader(encoding)), jsonl.RowJson(ValueLoader(encoding))
    compiled._compiled = counting = _Counting()
    python._compiled = None
    loader = ValueLoader(encoding)
    for i in range(2 * len(TEXTS)):
        for columns in (row(i), row(i, binary=True), [*row(i)[:3], TupleColumn.unchanged_toast(), *row(i)[4:]]):
            toasted: list[str] = []
            text = compiled(schema, columns, toasted=toasted)
            assert text == python(schema, columns) and toasted == ([COLUMNS[3][0].decode(codec)]
                                                                  if columns[3].kind == "u" else [])
            assert text == compiled(schema, columns)
            typed = jsonl._row(loader.load_row(schema, columns))  # (unchanged TOAST left out)
            assert text == jsonl.ENCODE(typed)
    assert counting.rows == 2 * 3 * 2 * len(TEXTS)  # (each row written twice, every one in C)


def test_one_place_chooses_the_compiled_writers():
    assert jsonl.compiled_rows("LATIN1") is fast.COMPILED and jsonl.compiled_rows("iso8859-1") is fast.COMPILED
    assert jsonl.compiled_rows("SQL_ASCII") is fast.COMPILED and jsonl.compiled_rows("UTF8") is fast.COMPILED
    assert jsonl.compiled_rows("WIN1252") is None and jsonl.compiled_rows("EUC_JP") is None
    assert jsonl.RowJson(ValueLoader("WIN1252"))._compiled is None
    assert jsonl.RowJson(ValueLoader("LATIN1"))._compiled is fast.COMPILED


def test_other_encodings_stay_on_the_python_writers(tmp_path):
    path = small(tmp_path, "WIN1252", b"\x80 caf\xe9")
    got, counts = decode(path, "WIN1252", compiled=True)
    assert got.endswith(b'"new":{"v":"\xe2\x82\xac caf\xc3\xa9"}}\n')  # (the euro sign, 0x80 in WIN1252)
    assert got == decode(path, "WIN1252", compiled=False)[0] and counts == {"written": 0, "rows_row": 0}


def _command(path, env: str, *args: str) -> bytes:
    result = subprocess.run([sys.executable, "-m", "replwire.codec.cli", "decode", str(path), *args],
                            capture_output=True, env={**os.environ, "REPLWIRE_IMPL": env}, check=True)
    return result.stdout


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_the_command_prints_the_same_bytes_with_either_codec(tmp_path, encoding):
    path = write(tmp_path / "s.rwc", stream(ENCODINGS[encoding]), encoding, "capture")
    compiled, python = _command(path, "c"), _command(path, "python")
    assert compiled == python and len(compiled.splitlines()) == 48
    csv = write(tmp_path / "s.csv", stream(ENCODINGS[encoding]), encoding, "copy-csv")
    assert _command(csv, "c", "--proto-version", "3", "--encoding", encoding) == python
    events = _command(path, "c", "--format", "debezium")
    assert _no_times(events) == _no_times(_command(path, "python", "--format", "debezium"))


@pytest.mark.parametrize("seed", fuzz.STRING_SEEDS + fuzz.SEEDS)
def test_the_string_fuzz_target_on_its_seeds_and_every_cut(seed):
    """``fuzz_strings`` (the libFuzzer run under the sanitizers is ``make fuzz-compiled``): every cut of each
    seed, in each encoding, is written as the Python writer writes it, or declined where it is no UTF-8."""
    for encoding in range(4):
        for cut in range(1, len(seed) + 1):
            fuzz.fuzz_strings(bytes([encoding]) + seed[1:cut])


# -- real servers ---------------------------------------------------------------------------------------------

#: A table of the kinds of text a row carries, in a database of each encoding: names past ASCII, text with
#: quotes, backslashes and control characters, varchar, an enum (no Type message: its text), json, jsonb, text[]
#: and typed columns beside them.
_DDL = (b'CREATE TYPE "humeur" AS ENUM (\'gai\', \'tr\xe8s gai\', \'\xff\'); '
        b'CREATE TABLE "caf\xe9" (id int PRIMARY KEY, "na\xefve" text, v varchar(40), h "humeur", j json, '
        b'"cl\xe9s" jsonb, t text[], prix numeric, at timestamptz)')
#: Each row's texts: every byte 0xa0-0xff and 0x80-0x9f (LATIN1's C1 controls), escapes.
_TEXTS = [bytes(range(0xA0, 0x100)), b'q"uote \\ back\\slash \x01\x1f\t\n\x7f', bytes(range(0x80, 0xA0)),
          b"cr\xe8me br\xfbl\xe9e"]


def _server_stream(server, dbname: str, encoding: str, slot: str, binary: bool) -> list[tuple[int, int, bytes]]:
    """The ``(lsn, xid, data)`` records of the table's changes (plain and two-phase transactions, one with an
    Origin) as the server sends them to a client in ``encoding`` (``binary``: values in binary format)."""
    from tests.support.encodings import connect, database

    database(server, dbname, encoding)
    with connect(server, dbname, encoding) as conn:
        conn.execute(_DDL)
        conn.execute(b'CREATE PUBLICATION pub FOR TABLE "caf\xe9"')
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, true)", (slot,))
        origin = b"or\xedgen \xff " + dbname.encode()
        conn.execute(b"SELECT pg_replication_origin_create('" + origin + b"')")
        conn.execute(b"SELECT pg_replication_origin_session_setup('" + origin + b"')")
        for i, text in enumerate(_TEXTS):
            quoted = b"E'" + text.replace(b"\\", b"\\\\").replace(b"'", b"''") + b"'"
            conn.execute(b'INSERT INTO "caf\xe9" VALUES (' + str(i).encode() + b", " + quoted + b", left(" + quoted
                         + b", 40), '" + (b"tr\xe8s gai" if i % 2 else b"\xff") + b"', json_build_object("
                         + quoted + b", " + quoted + b"), jsonb_build_object(" + quoted + b", ARRAY[" + quoted
                         + b"]), ARRAY[" + quoted + b", 'NULL', NULL, 'a b'], 12.50, '2026-11-29 10:00:00.5+00')")
        conn.execute("SELECT pg_replication_origin_session_reset()")
        conn.execute("BEGIN")
        conn.execute(b'UPDATE "caf\xe9" SET "na\xefve" = "na\xefve" || \'\xe9\' WHERE id < 2')
        conn.execute(b"PREPARE TRANSACTION 'g\xefd \xff'")
        conn.execute(b"COMMIT PREPARED 'g\xefd \xff'")
        conn.execute(b'DELETE FROM "caf\xe9" WHERE id = 3')
        peek = ("SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
                "'proto_version', '3', 'publication_names', 'pub', 'two_phase', 'on', 'binary', %s)")
        rows = conn.execute(peek, (slot, "true" if binary else "false")).fetchall()
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    return [(int(LSN(lsn if isinstance(lsn, str) else lsn.decode())), xid, bytes(data)) for lsn, xid, data in rows]


@pytest.mark.server
@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize("major", [15, 18])
def test_real_server_streams(request, tmp_path, major, encoding, binary):
    """A LATIN1 and a SQL_ASCII database's stream, text and binary: the compiled writers print the Python
    writers' bytes (and the command the Python codec's, its Debezium events too), and the values read back
    as the server's bytes."""
    dbname = f"jsonl_{encoding.lower()}_{'binary' if binary else 'text'}"
    records = _server_stream(request.getfixturevalue(f"pg{major}"), dbname, encoding, "jsonl_enc", binary)
    path = write(tmp_path / "s.rwc", records, encoding, "capture")
    got, counts = decode(path, encoding, compiled=True)
    expected, _ = decode(path, encoding, compiled=False)
    assert got == expected
    assert counts["written"] == 4 + 2 + 1, counts  # every change by the compiled writers
    assert _command(path, "c") == _command(path, "python") == got
    events = _command(path, "c", "--format", "debezium")
    assert _no_times(events) == _no_times(_command(path, "python", "--format", "debezium"))
    assert len(events.splitlines()) == 7 + 1  # (a tombstone after the delete)
    codec = ENCODINGS[encoding]
    lines = [json.loads(line) for line in got.splitlines()]
    assert [line["op"] for line in lines] == ["insert"] * 4 + ["update"] * 2 + ["delete"]
    assert lines[0]["table"] == b"caf\xe9".decode(codec)
    assert lines[0]["origin"].startswith(b"or\xedgen \xff".decode(codec))
    assert {line.get("gid") for line in lines[4:6]} == {b"g\xefd \xff".decode(codec)}
    for line, text in zip(lines, _TEXTS):
        value = text.decode(codec)
        new = line["new"]
        assert new[b"na\xefve".decode(codec)] == value and new["v"] == text[:40].decode(codec)
        assert json.loads(new["j"]) == {value: value} and json.loads(new[b"cl\xe9s".decode(codec)]) == {value: [value]}
        assert new["t"] == [value, "NULL", None, "a b"]
        if not binary:  # (an enum's binary value, of a type replwire does not know, is its bytes in hex)
            assert new["h"] == (b"tr\xe8s gai" if new["id"] % 2 else b"\xff").decode(codec)
