"""Databases whose encoding is not UTF-8, on real servers (issue 17, item 7).

A LATIN1 and a SQL_ASCII database on PostgreSQL 15 and 18, with non-ASCII table, column, origin, prefix and
GID names and values, read through the SQL functions (over a LATIN1 connection, and over a UTF8 one) and
through live capture; parsed, assembled into typed values, and checked against what the server itself says:
the names from ``pg_class``/``pg_attribute``, the values from a ``SELECT`` over a UTF8 connection (LATIN1),
or the values' bytes (SQL_ASCII, whose bytes are not text in any encoding).
"""

from __future__ import annotations

import json
import threading
from decimal import Decimal

import pytest
from click.testing import CliRunner
from psycopg.conninfo import make_conninfo

from replwire.codec import LSN, Assembler, Transaction
from replwire.codec.cli.main import main
from replwire.codec.decode import committed
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter, read_capture
from replwire.codec.io.connection import CaptureSettings
from replwire.codec.io.live import LiveCapture
from replwire.codec.split import open_inputs
from replwire.codec.stream.value_types import JsonText
from tests.support.encodings import PEEK, connect, database, latin1_workload

pytestmark = pytest.mark.server

def transactions(datas, encoding):
    assembler = Assembler(proto_version=3, encoding=encoding)
    out = []
    for data in datas:
        for item in assembler.feed(data):
            assert isinstance(item, Transaction)
            with item:
                out.append((item, list(item.changes)))
    return out


# -- LATIN1 -------------------------------------------------------------------------------------------------


def check_latin1(said: dict, items: list) -> None:
    (insert_txn, [insert]), (_, [message]), (update_txn, [update]) = items
    assert (insert.schema, insert.table) == ("public", said["table"])
    assert list(insert.new) == said["columns"]
    row = dict(zip(said["columns"], said["row"]))
    assert insert.new == {**row, "naïve": "crème brûlée", "doc": JsonText(json.dumps(row["doc"], ensure_ascii=False))}
    assert insert.new["prix"] == Decimal("12.50") and insert.new["étiquettes"] == ["été", "hiver ÿ"]
    assert insert.new["doc"] == JsonText('{"clé": "à"}')  # the server's jsonb text
    assert insert_txn.origin is not None and insert_txn.origin[0] == said["origin"]
    assert (message.op, message.prefix, message.content) == ("message", "préfixe", b"contenu")
    assert update_txn.gid == "gïd-1"
    assert update.new == {**row, "doc": insert.new["doc"]}  # after the update: what SELECT says now


@pytest.mark.parametrize("major", [15, 18])
def test_latin1_database_through_the_sql_functions(major, request):
    server = request.getfixturevalue(f"pg{major}")
    dbname, slot = f"enc_latin1_sql_{major}", "enc_sql"
    said = latin1_workload(server, dbname, slot)
    with connect(server, dbname, "LATIN1") as conn:
        encoding = conn.info.parameter_status("client_encoding")
        latin1 = [bytes(r[0]) for r in conn.execute(PEEK, (slot,))]
    with connect(server, dbname, "UTF8") as conn:
        utf8 = [bytes(r[0]) for r in conn.execute(PEEK, (slot,))]
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    assert encoding == "LATIN1"
    relation = next(d for d in latin1 if d[:1] == b"R")
    assert b"\0caf\xe9\0" in relation and b"\0na\xefve\0" in relation  # ISO 8859-1: é = E9, ï = EF
    assert b"\0caf\xc3\xa9\0" in next(d for d in utf8 if d[:1] == b"R")  # the server converts to the client's
    check_latin1(said, transactions(latin1, "LATIN1"))
    check_latin1(said, transactions(utf8, "UTF8"))


@pytest.mark.parametrize("via", ["replication", "sql"])
@pytest.mark.parametrize("major", [15, 18])
def test_latin1_database_through_live_capture_and_decode(major, via, request, tmp_path):
    server = request.getfixturevalue(f"pg{major}")
    dbname, slot = f"enc_latin1_live_{via}_{major}", "enc_live"
    said = latin1_workload(server, dbname, slot)
    dsn = make_conninfo(server.dsn, dbname=dbname)  # no client_encoding: the database's own, LATIN1
    settings = CaptureSettings(slot=slot, publication="pub", proto_version=3, messages=True, two_phase=True)
    capture = LiveCapture(dsn, tmp_path / "latin1.rwcap", settings, create_slot=False, sync_interval=0.1, via=via)
    runner = threading.Thread(target=capture.run, kwargs={"idle_exit": 1.5})
    runner.start()
    runner.join(60)
    assert not runner.is_alive()
    with connect(server, dbname, "UTF8") as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    with read_capture(tmp_path / "latin1.rwcap") as reader:
        assert reader.header.client_encoding == "LATIN1"
        assert "client_encoding" not in reader.header.options
    items: list = []
    for item in committed(open_inputs([tmp_path / "latin1.rwcap"])):
        with item:
            items.append((item, list(item.changes)))
    check_latin1(said, items)
    result = CliRunner().invoke(main, ["decode", str(tmp_path / "latin1.rwcap")])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(o["op"], o.get("table")) for o in lines] == [("insert", "café"), ("message", None), ("update", "café")]
    assert lines[0]["new"]["naïve"] == "crème brûlée" and lines[0]["new"]["étiquettes"] == ["été", "hiver ÿ"]


# -- SQL_ASCII ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("major", [15, 18])
def test_sql_ascii_database_sends_its_bytes_unconverted(major, request, tmp_path):
    """Names and values written as LATIN1 bytes and as UTF-8 bytes, side by side: neither is converted."""
    server = request.getfixturevalue(f"pg{major}")
    dbname, slot = f"enc_sql_ascii_{major}", "enc_ascii"
    database(server, dbname, "SQL_ASCII")
    with connect(server, dbname, "SQL_ASCII") as conn:
        conn.execute(b'CREATE TABLE "caf\xe9" (id int PRIMARY KEY, "na\xc3\xafve" text, "\xff" text)')
        conn.execute(b'CREATE PUBLICATION pub FOR TABLE "caf\xe9"')
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, true)", (slot,))
        origin_name = b"or\xedgen " + dbname.encode()  # origins belong to the cluster
        conn.execute(b"SELECT pg_replication_origin_create('" + origin_name + b"')")
        conn.execute(b"SELECT pg_replication_origin_session_setup('" + origin_name + b"')")
        conn.execute(b"""INSERT INTO "caf\xe9" VALUES (1, 'cr\xe8me', 'cr\xc3\xa8me \x80\xff')""")
        conn.execute("SELECT pg_replication_origin_session_reset()")
        conn.execute(b"SELECT pg_logical_emit_message(true, 'pr\xe9fixe', 'x')")
        conn.execute("BEGIN")
        conn.execute(b"""DELETE FROM "caf\xe9" WHERE id = 1""")
        conn.execute(b"PREPARE TRANSACTION 'g\xefd'")
        conn.execute(b"COMMIT PREPARED 'g\xefd'")
        encoding = conn.info.parameter_status("client_encoding")
        rows = conn.execute(PEEK.replace("data", "lsn::text, xid::text::bigint, data"), (slot,)).fetchall()
        datas = [bytes(r[2]) for r in rows]
        # what the server says, as bytes: the text types' bytes are the database's own
        table = conn.execute(b"""SELECT relname::text::bytea FROM pg_class
                                 WHERE oid = '"caf\xe9"'::regclass""").fetchone()[0]
        columns = [r[0] for r in conn.execute(b"""SELECT attname::text::bytea FROM pg_attribute
                                                  WHERE attrelid = '"caf\xe9"'::regclass AND attnum > 0
                                                  ORDER BY attnum""")]
        origin = conn.execute(b"SELECT roname::bytea FROM pg_replication_origin WHERE roname::bytea = '\\x"
                              + origin_name.hex().encode() + b"'").fetchone()[0]
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    assert encoding == "SQL_ASCII"
    assert (table, columns, origin) == (b"caf\xe9", [b"id", b"na\xc3\xafve", b"\xff"], origin_name)
    (insert_txn, [insert]), (_, [message]), (delete_txn, [delete]) = transactions(datas, encoding)

    def raw(text: str) -> bytes:  # SQL_ASCII's text back to the bytes it came from
        return text.encode("ascii", "surrogateescape")

    assert raw(insert.table) == table and [raw(c) for c in insert.new] == columns
    assert insert.table == "caf\udce9"
    assert insert.new == {"id": 1, "na\udcc3\udcafve": "cr\udce8me", "\udcff": "cr\udcc3\udca8me \udc80\udcff"}
    assert raw(insert_txn.origin[0]) == origin
    assert raw(message.prefix) == b"pr\xe9fixe"
    assert raw(delete_txn.gid) == b"g\xefd" and delete.key == {"id": 1}

    # a capture file of the same bytes records the encoding, and decode prints JSON that reads back the same
    with CaptureWriter(tmp_path / "ascii.rwcap", CaptureHeader(proto_version=3, client_encoding=encoding)) as writer:
        for lsn, xid, data in rows:
            writer.append(LSN(lsn.decode()), xid, bytes(data))  # psycopg gives SQL_ASCII text as bytes
    result = CliRunner().invoke(main, ["decode", str(tmp_path / "ascii.rwcap")])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout.splitlines()[0])
    assert (printed["table"], printed["new"]) == (insert.table, insert.new)
