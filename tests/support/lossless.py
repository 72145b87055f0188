"""A table of values that lose information easily (issue 25, item 1), captured from a real server in text and
binary mode, and what the server itself says each value is -- the independent reference of the lossless-value
tests (tests/stream/test_values_lossless.py, tests/spark/test_spark_values_lossless.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from replwire.codec import LSN
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter
from tests.support.encodings import connect, database

COLUMNS = {
    "iv": "interval", "j": "json", "jb": "jsonb", "r4": "int4range", "rts": "tstzrange", "rd": "daterange",
    "nr": "numrange", "mr": "int4multirange", "m": "money", "d": "date", "ts": "timestamp", "tstz": "timestamptz",
    "n": "numeric", "n2": "numeric(12,4)", "f4": "real", "f8": "double precision", "ivs": "interval[]",
    "jbs": "jsonb[]",
}

#: (column -> SQL literal) per row; a column left out is SQL NULL
ROWS: list[dict[str, str]] = [
    {"iv": "'1 mon'", "j": """'{"n": 1.000000000000000000001, "a": 1, "a": 2}'""",
     "jb": """'{"n": 1.000000000000000000001, "big": 123456789012345678901234567890}'""",
     "r4": "'(,11)'", "rts": "'[2026-01-01 00:00:00+00,)'", "rd": "'[2026-01-01,)'", "nr": "'[1.10,2.500)'",
     "mr": "'{[1,3),[5,7)}'", "m": "'1234.56'", "d": "'4713-01-01 BC'", "ts": "'4714-11-24 00:00:00 BC'",
     "tstz": "'10000-01-01 00:00:00+00'", "n": "'1.10'", "n2": "'1.1'", "f4": "'NaN'", "f8": "'-0'",
     "ivs": "ARRAY['1 mon'::interval, '30 days', '720 hours']", "jbs": """ARRAY['{"x": 0.10}'::jsonb, 'null']"""},
    {"iv": "'30 days'", "j": "'null'", "jb": "'null'", "r4": "'empty'", "rts": "'(,2026-01-01 12:30:00.5+02)'",
     "rd": "'[0044-03-15 BC,infinity)'", "nr": "'(,)'", "mr": "'{}'", "m": "'-0.01'", "d": "'10000-01-01'",
     "ts": "'294276-12-31 23:59:59.999999'", "tstz": "'0001-01-01 00:00:00+00 BC'",
     "n": "'0.0000001000'", "n2": "'-12345678.9000'", "f4": "'Infinity'", "f8": "'-Infinity'"},
    {"iv": "'720 hours'", "j": "' [1.0e5,\n \"x\"] '", "jb": "'[1.0e5, -0.0, 1E-400]'",
     "r4": "'[-5,5]'", "rts": "'[\"4713-01-01 00:00:00+00 BC\",\"2026-01-01 00:00:00+00\")'",
     "rd": "'empty'", "m": "'92233720368547758.07'", "d": "'0001-01-01'", "ts": "'2026-06-30 12:00:00.000001'",
     "tstz": "'2026-06-30 12:00:00.25+05:30'", "n": "'NaN'", "n2": "'0.0000'", "f4": "'-0'", "f8": "'NaN'"},
    {"iv": "'-1 mon +30 days'", "n": "'Infinity'", "f4": "'1.1'", "f8": "'0.1'"},
    {"iv": "'1 mon 1 day 01:00:00.5'", "n": "'-Infinity'", "f4": "'3.4028235e38'", "f8": "'1e308'"},
    {"iv": "'-1 year -2 mons +3 days -04:05:06.789'", "f8": "'Infinity'"},
    {"iv": "'-00:00:00.000001'", "f8": "'5e-324'"},
    {"iv": "'0'", "f8": "'-1.5e-300'"},
    {"iv": "'178000000 years'"},
    {"iv": "'-178000000 years -2147483647 days -2562047788:00:54.775807'"},
    {},  # every value SQL NULL
]
ROWS_PG17: list[dict[str, str]] = [{"iv": "'infinity'"}, {"iv": "'-infinity'"}]  # infinite intervals (17+)


@dataclass
class Captured:
    """The capture of the workload in one mode: (lsn, xid, data) rows, and the file written from them."""

    binary: bool
    rows: list[tuple[str, int, bytes]]
    path: str
    dbname: str


def workload(server: Any, tmp_path: Any, name: str) -> dict[bool, Captured]:
    """Create the table, insert :data:`ROWS` (one transaction per row), capture them with pgoutput in text and
    binary mode (protocol 1); the capture files under ``tmp_path``, by ``binary``."""
    dbname = f"lossless_{name}_{server.major}"
    database(server, dbname, "UTF8")
    out = {}
    with connect(server, dbname, "UTF8") as conn:
        conn.execute("SET timezone = 'UTC'")  # the session's: the text of timestamptz values in text mode
        conn.execute("DROP TABLE IF EXISTS v")
        conn.execute("DROP PUBLICATION IF EXISTS pub")
        for slot in ("lossless_t", "lossless_b"):
            if conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone():
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        conn.execute("CREATE TABLE v (id int PRIMARY KEY, " + ", ".join(f"{c} {t}" for c, t in COLUMNS.items()) + ")")
        conn.execute("CREATE PUBLICATION pub FOR TABLE v")
        for slot in ("lossless_t", "lossless_b"):
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        rows = ROWS + (ROWS_PG17 if server.major >= 17 else [])
        for i, row in enumerate(rows):
            names = ", ".join(["id", *row])
            conn.execute(f"INSERT INTO v ({names}) VALUES ({', '.join([str(i), *row.values()])})")
        for binary, slot in ((False, "lossless_t"), (True, "lossless_b")):
            peeked = conn.execute(
                "SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, "
                "'proto_version', '1', 'publication_names', 'pub', 'binary', %s)",
                (slot, "true" if binary else "false")).fetchall()
            path = str(tmp_path / f"{name}-{'b' if binary else 't'}.rwcap")
            with CaptureWriter(path, CaptureHeader(proto_version=1, client_encoding="UTF8")) as writer:
                for lsn, xid, data in peeked:
                    writer.append(LSN(lsn), xid, bytes(data))
            out[binary] = Captured(binary, [(lsn, xid, bytes(data)) for lsn, xid, data in peeked], path, dbname)
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    return out


def rows_of(conn: Any, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    return conn.execute(sql, params).fetchall()


class Server:
    """What the server says about the workload's values: its text (``intervalstyle = iso_8601``, timezone
    UTC), and whether a text emitted for a value is that value (cast back by the server)."""

    RANGES = ("r4", "rts", "rd", "nr", "mr")
    DATES = ("d", "ts", "tstz")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        conn.execute("SET intervalstyle = iso_8601")
        conn.execute("SET timezone = 'UTC'")
        names = ", ".join(f"{c}::text" for c in COLUMNS)
        self.text = {r[0]: dict(zip(COLUMNS, r[1:])) for r in rows_of(conn, f"SELECT id, {names} FROM v")}
        self.arrays = {r[0]: {"ivs": r[1], "jbs": r[2]} for r in rows_of(
            conn, "SELECT id, array(SELECT x::text FROM unnest(ivs) x), array(SELECT x::text FROM unnest(jbs) x) "
                  "FROM v WHERE ivs IS NOT NULL")}

    def same(self, cast: str, column: str, row_id: int, text: str) -> bool:
        """Whether the server reads ``text`` as the value of ``column`` in row ``row_id`` (not if it refuses it)."""
        import psycopg

        try:
            (same,) = self.conn.execute(f"SELECT %s::{cast} IS NOT DISTINCT FROM {column} FROM v WHERE id = %s",
                                        (text, row_id)).fetchone()
        except psycopg.DataError:
            return False
        return bool(same)

    def check(self, row_id: int, column: str, value: Any, binary: bool, where: str, exact: bool = True) -> None:
        """``value`` (a JSON value as decoded with ``parse_float=Decimal``) is the value of ``column`` in row
        ``row_id``: exactly the server's text, or the same value cast back by the server (a float also the
        same number as the server's text, unless not ``exact``: a Spark ``float`` column holds the single)."""
        said = self.text[row_id][column]
        what = (where, row_id, column, value, said)
        if said is None:
            assert value is None, what
            return
        assert value is not None, what
        kind = COLUMNS[column]
        if column in ("iv", "j", "jb", "n", "n2"):  # the server's text, exactly (interval in ISO 8601)
            assert value == said, what
        elif column in ("ivs", "jbs"):
            assert value == self.arrays[row_id][column], what
        elif column in self.RANGES:
            assert isinstance(value, str) and self.same(kind, column, row_id, value) and value == said, what
        elif column == "m":
            if binary:  # the amount in cents (lc_monetary C: two fraction digits)
                assert isinstance(value, int) and self.same("numeric", "m::numeric * 100", row_id, str(value)), what
            else:
                assert value == said, what
        elif column in self.DATES:
            assert isinstance(value, str) and self.same(kind, column, row_id, value), what
            year = said.split("-")[0]
            if said.endswith("BC") or len(year) > 4:  # outside ISO's years: the server's text
                assert value == said, what
        else:  # floats: the same value, -0 included, and (exact=True) the same number as the server's text
            assert isinstance(value, (str, Decimal)), what
            (text,) = self.conn.execute(f"SELECT %s::{kind}::text", (str(value),)).fetchone()
            assert text == said, what
            if exact:
                expected, got = float(said), float(value)
                assert (math.isnan(expected) and math.isnan(got)) or (
                    got == expected and math.copysign(1, got) == math.copysign(1, expected)), what


def captured_fixture(name: str) -> Any:
    """A module fixture, on the PostgreSQL 15 and 18 servers in turn: the :func:`workload`'s captures (under
    database ``lossless_<name>_<major>``) and a :class:`Server` on that database to check values with."""
    import pytest

    @pytest.fixture(scope="module", params=[15, 18], ids=["pg15", "pg18"])
    def captured(request: Any, tmp_path_factory: Any) -> Any:
        server = request.getfixturevalue(f"pg{request.param}")
        captures = workload(server, tmp_path_factory.mktemp("lossless"), name)
        with connect(server, captures[False].dbname, "UTF8") as conn:
            yield captures, Server(conn)

    return captured
