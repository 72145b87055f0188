"""``replwire capture --backfill`` in the cases test_backfill.py leaves out, against real PostgreSQL 15 and 18:
the binary key types a moved row is read again by (``_key_text``: the server's text of a binary key, which
``CAST`` reads back as the same value), each checked against the server and end to end."""

from __future__ import annotations

import pytest

from tests.support.snapshot import database, drop_slots, folded, rows_of, selected, slot_of

pytestmark = pytest.mark.server


def _execute(dsn: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


# -- binary keys: the server's text of each type, and a moved row read again by it ---------------------------

#: Per key type, values whose binary form (the type's send function) _key_text turns into the server's text.
KEY_VALUES = {
    "numeric": ["0", "1.10", "-0.000001", "123456789012345678901234567890.123456789012345678901234567890",
                "NaN", "Infinity", "-Infinity", "1e-300", "-9e300", "100000"],
    "date": ["2024-02-29", "0001-01-01", "0001-12-31 BC", "4714-11-24 BC", "5874897-12-31", "infinity",
             "-infinity"],
    "timestamp": ["2024-01-02 03:04:05.123456", "1999-12-31 23:59:59.5", "0044-03-15 12:00:00 BC",
                  "294276-12-31 23:59:59.999999", "4714-11-24 00:00:00 BC", "infinity", "-infinity"],
    "timestamptz": ["2024-06-01 12:00:00+02", "1900-01-01 00:00:00.5-03:30", "0044-03-15 12:00:00+00 BC",
                    "10000-01-01 00:00:00+00", "2024-03-31 01:30:00.000001+00", "infinity", "-infinity"],
    "time": ["00:00:00", "23:59:59.999999", "12:34:56.5"],
    "timetz": ["12:34:56.5+05:30", "00:00:00-12", "23:59:59.999999+14", "01:02:03+01:02:03"],
    "bool": ["true", "false"],
    "bytea": ["\\x", "\\x00ff10", "plain text"],
    "float8": ["0", "-0", "0.1", "1.1", "3.141592653589793", "1e308", "5e-324", "2.2250738585072014e-308",
               "-1.7976931348623157e308", "123456789012345680", "NaN", "Infinity", "-Infinity"],
    "float4": ["0", "0.1", "1.1", "3.4028235e38", "1e-45", "1.17549435e-38", "16777216", "NaN", "-Infinity"],
    "interval": ["1 year 2 mons -3 days 04:05:06.5", "-00:00:01.000001", "0", "1 mon -1 day",
                 "-1 year -2 mons +3 days -04:05:06", "infinity", "-infinity"],
    "jsonb": ['{"a": [1, 2.50, null], "b": "x\\ny"}', '"s"', "1e100"],
    "int2": ["-32768", "32767"], "int4": ["-2147483648", "0"], "int8": ["-9223372036854775808"],
    "oid": ["4294967295"], "uuid": ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"], "text": ["t\u00e9xt"],
    "varchar": [""], "bpchar": ["ab  "],
}


@pytest.fixture(scope="module")
def key_server(pg18):
    """A database of the key tests' own, and a connection to it in a time zone that is not UTC (a
    timestamptz text must carry its offset)."""
    import psycopg

    dsn = database(pg18, "bfkeys")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET TimeZone = 'America/St_Johns'")
        yield dsn, conn
    drop_slots(dsn)


@pytest.mark.parametrize("type_name", list(KEY_VALUES))
def test_a_binary_key_is_the_text_the_server_casts_back_to_the_same_value(key_server, type_name):
    """Each value's binary form (from the type's send function) as ``_key_text`` writes it, cast back by the
    server: the same binary form, byte for byte (the same value: every float digit, a numeric's scale, a
    timestamptz's instant)."""
    from replwire.codec.io.backfill import _key_text

    _, conn = key_server
    oid, send = conn.execute("SELECT oid::int, typsend::text FROM pg_type WHERE oid = %s::regtype",
                             (type_name,)).fetchone()
    for literal in KEY_VALUES[type_name]:
        raw = conn.execute(f"SELECT {send}(CAST(%s AS {type_name}))", (literal,)).fetchone()[0]
        text = _key_text(oid, bytes(raw), True, "utf-8")
        back = conn.execute(f"SELECT {send}(CAST(%s AS {type_name}))", (text,)).fetchone()[0]
        assert bytes(back) == bytes(raw), (type_name, literal, text)


def test_a_binary_key_of_a_type_not_read_is_refused(key_server):
    from replwire.codec.io.backfill import _key_text

    _, conn = key_server
    raw = conn.execute("SELECT range_send('[1,5)'::int4range)").fetchone()[0]
    with pytest.raises(ValueError, match="OID 3904"):
        _key_text(3904, bytes(raw), True, "utf-8")
    with pytest.raises(ValueError, match="OID 1700"):  # (a binary numeric whose header says more digits)
        _key_text(1700, b"\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01", True, "utf-8")
    assert _key_text(1700, b"1.50", False, "utf-8") == "1.50"  # (text mode: the text as it is)


#: Per key type of the moved-row case: the key of row ``g`` (many digits: a chunk's cursor must read back
#: exactly), and the key the row moves to (before every other).
MOVED_KEYS = {"numeric": ("g::numeric / 7", "-1.5"),
              "timestamptz": ("timestamptz '2000-01-01 00:00:00.123457+00' + g * interval '1 hour 0.000003 s'",
                              "1970-01-01 00:00:00.000001+00")}


@pytest.mark.parametrize("key_type, planted", [("numeric", False), ("timestamptz", False), ("numeric", True)],
                         ids=["numeric", "timestamptz", "planted-fault"])
def test_a_row_moved_into_keys_already_read_is_read_again_by_its_binary_key(pg18, tmp_path, monkeypatch, key_type,
                                                                            planted):
    """In binary mode, a key change moves a row whose TOASTed body it leaves unchanged from keys not read
    yet to keys already read: the moved row is read again at the run's end by its binary key's text, so its
    body is known.  Planted: ``_key_text`` as it was (no numeric, no timestamptz) -- the body stays
    unknown."""
    from replwire.codec.io import backfill as module
    from replwire.codec.io.connection import CaptureSettings
    from replwire.codec.io.live import LiveCapture

    dsn = database(pg18, "bfmovekey")
    key, moved_to = MOVED_KEYS[key_type]
    _execute(dsn, f"CREATE TABLE moving (k {key_type} PRIMARY KEY, g int, body text, note text)",
             "ALTER TABLE moving ALTER COLUMN body SET STORAGE EXTERNAL",  # TOASTed uncompressed: 'u' in updates
             f"INSERT INTO moving SELECT {key}, g, CASE WHEN g % 10 = 0 THEN repeat(md5(g::text), 200) "
             "ELSE 'short' END, 'n' FROM generate_series(1, 3000) g",
             "CREATE PUBLICATION pub FOR TABLE moving")
    emitted = module.Backfill._emit

    def emit(self, cur, transactional, content, flush=False):
        if content.get("k") == "low" and content.get("c") == 2:  # between chunks 1 and 2, outside any window
            _execute(dsn, f"UPDATE moving SET k = '{moved_to}', note = 'moved' WHERE g = 2950")
        emitted(self, cur, transactional, content, flush)

    monkeypatch.setattr(module.Backfill, "_emit", emit)
    for name in ("FIRST_ROWS", "LEAST_ROWS", "MOST_ROWS"):
        monkeypatch.setattr(module, name, 100)
    if planted:
        read = module._key_text

        def before(type_id, raw, binary, codec):  # (integers, texts and uuid only)
            if binary and type_id not in (*module._INTEGERS, *module._TEXTS, module._UUID):
                raise ValueError(f"a binary key of type OID {type_id}")
            return read(type_id, raw, binary, codec)

        monkeypatch.setattr(module, "_key_text", before)
    said: list[str] = []
    out = tmp_path / "movekey.rwcap"
    settings = CaptureSettings(slot=slot_of(dsn), publication="pub", messages=True, binary=True)
    LiveCapture(dsn, out, settings, sync_interval=0.05, backfill=["public.moving"], log=said.append).run(
        idle_exit=1.5)
    tables, _ = folded([out])
    moved = next(row for row in tables["public.moving"] if row[1] == 2950)
    if planted:
        assert moved[2] is None and moved[-2] == ("body",)  # unknown: nothing read the moved row again
        assert any("a moved row cannot be read again" in line for line in said), said
    else:
        assert moved[2] == selected(dsn, "SELECT body FROM moving WHERE g = 2950")[0][0]
        assert not any("cannot be read again" in line for line in said), said
        assert rows_of(tables["public.moving"]) == selected(dsn, "SELECT * FROM moving")
    drop_slots(dsn)
