"""``replwire capture --backfill`` in the cases test_backfill.py leaves out, against real PostgreSQL 15 and 18:
a table added to the publication while the capture runs, asked for with ``replwire backfill``; two captures
of one database backfilling the same table at once (each ignoring the other's watermarks); and the binary
key types a moved row is read again by (``_key_text``: the server's text of a binary key, which ``CAST``
reads back as the same value), each checked against the server and end to end."""

from __future__ import annotations

import random
import subprocess
import threading
import time

import pytest

from replwire.codec.io.backfill_state import HeldRun, read_state
from tests.support.snapshot import REPLWIRE, database, drop_slots, folded, rows_of, run, selected, slot_of, wait_for

pytestmark = pytest.mark.server

NONE = HeldRun(-1)  # (a table with no run in the file yet)


def _execute(dsn: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def _oid(dsn: str, table: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT %s::regclass::oid", (table,)).fetchone()[0]


def _capture(dsn: str, out, slot: str, *more: str) -> subprocess.Popen[str]:
    return subprocess.Popen([REPLWIRE, "capture", "--dsn", dsn, "--slot", slot, "--publication", "pub", "--out",
                             str(out), "--sync-interval", "0.05", *more],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _ended(path, oid: int) -> bool:
    """Whether the capture file at ``path`` holds the end of a backfill run of table ``oid`` (a file whose
    header is not written yet holds none)."""
    from replwire.codec.io.capture_file import CaptureFileError

    try:
        return path.exists() and bool(read_state(str(path)).runs.get(oid, NONE).ended)
    except CaptureFileError:
        return False


@pytest.fixture
def started():
    """The captures a test starts (it appends them), killed at its end if still running: a failed test
    leaves none behind."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)


class Writer(threading.Thread):
    """Changes ``tables`` (each ``(id int PRIMARY KEY, v text, n int)`` with ids 1..``rows``) until stopped:
    updates, key moves, deletes and inserts, a rolled-back update, now and then a transaction held open."""

    def __init__(self, dsn: str, tables: list[str], rows: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.tables, self.rows, self.stop, self.rounds = dsn, tables, rows, threading.Event(), 0

    def run(self) -> None:
        import psycopg

        rng = random.Random(7)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                self.rounds += 1
                for table in self.tables:
                    i = rng.randrange(1, self.rows)
                    conn.execute(f"UPDATE {table} SET v = v || '+', n = n + 1 WHERE id = %s", (i,))
                    conn.execute(f"UPDATE {table} SET id = id + 10000000 WHERE id = %s", (rng.randrange(1, self.rows),))
                    conn.execute(f"DELETE FROM {table} WHERE id = %s", (rng.randrange(1, self.rows),))
                    conn.execute(f"INSERT INTO {table} VALUES (%s, 'new', 0) ON CONFLICT DO NOTHING",
                                 (rng.randrange(1, self.rows),))
                    with conn.transaction():
                        conn.execute(f"UPDATE {table} SET v = 'rolled back' WHERE id = %s", (i,))
                        raise psycopg.Rollback()
                if self.rounds % 20 == 0:
                    with conn.transaction():
                        for table in self.tables:
                            conn.execute(f"UPDATE {table} SET v = 'long' WHERE id BETWEEN %s AND %s", (i, i + 20))
                        time.sleep(0.2)
                time.sleep(0.002)


# -- a table added to the publication while the capture runs ------------------------------------------------


def test_a_table_added_to_the_publication_is_backfilled_when_asked(pg18, tmp_path, started):
    """``newtable`` holds rows and a writer changes it before it is in the publication: the stream has none
    of that; after ``ALTER PUBLICATION ... ADD TABLE`` the stream carries its changes, and ``replwire
    backfill`` asks the running capture to copy it; the file folds to ``SELECT *`` of it and of ``old`` (in
    the publication from the start, created empty, written only while the capture runs)."""
    dsn = database(pg18, "bfadded")
    rows = 30_000
    _execute(dsn, "CREATE TABLE old (id int PRIMARY KEY, v text, n int)",
             "CREATE TABLE newtable (id int PRIMARY KEY, v text, n int)",
             f"INSERT INTO newtable SELECT g, 'v' || g, g FROM generate_series(1, {rows}) g",
             "CREATE PUBLICATION pub FOR TABLE old")
    out = tmp_path / "added.rwcap"
    capture = _capture(dsn, out, slot_of(dsn), "--messages", "--idle-exit", "2", "--backfill-budget", "0.005")
    started.append(capture)
    wait_for(lambda: out.exists() and out.stat().st_size > 0, what="the capture file")
    _execute(dsn, f"INSERT INTO old SELECT g, 'o' || g, g FROM generate_series(1, {rows}) g")
    writer = Writer(dsn, ["old", "newtable"], rows)
    writer.start()  # (changes of newtable before it is published: in no stream, only in what is read)
    wait_for(lambda: writer.rounds > 10, what="the writer under way")
    _execute(dsn, "ALTER PUBLICATION pub ADD TABLE newtable")
    asked = run([REPLWIRE, "backfill", "--dsn", dsn, "--slot", slot_of(dsn), "public.newtable"])
    assert asked.returncode == 0, asked.stderr
    assert f"asked the capture on slot '{slot_of(dsn)}' to backfill public.newtable" in asked.stdout
    oid = _oid(dsn, "newtable")
    wait_for(lambda: capture.poll() is not None or (_ended(out, oid) and writer.rounds > 60),
             timeout=90, what="the backfill of newtable's end")
    writer.stop.set()
    writer.join(60)
    _, stderr = capture.communicate(timeout=60)
    assert capture.returncode == 0, stderr
    held = read_state(str(out)).runs[oid]
    assert held.ended and held.chunk > 5, held  # (chunks: windows with the writer's changes in them)
    tables, _ = folded([out])
    assert rows_of(tables["public.newtable"]) == selected(dsn, "SELECT * FROM newtable")
    assert rows_of(tables["public.old"]) == selected(dsn, "SELECT * FROM old")
    drop_slots(dsn)


# -- two captures of one database backfilling the same table at once ----------------------------------------


def test_two_captures_backfilling_one_table_at_once_each_fold_to_select_star(pg15, tmp_path, started):
    """Two captures on two slots of one database back ``big`` up at the same time while a writer changes it:
    each slot's stream carries both captures' watermarks (the same run and chunk numbers, interleaved), and
    each capture must follow only its own session's; each file folds to ``SELECT *``."""
    dsn = database(pg15, "bftwo")
    rows = 60_000
    _execute(dsn, "CREATE TABLE big (id int PRIMARY KEY, v text, n int)",
             f"INSERT INTO big SELECT g, 'v' || g, g FROM generate_series(1, {rows}) g",
             "CREATE PUBLICATION pub FOR TABLE big")
    outs = [tmp_path / "one.rwcap", tmp_path / "two.rwcap"]
    slots = [slot_of(dsn) + "_one", slot_of(dsn) + "_two"]
    oid = _oid(dsn, "big")
    writer = Writer(dsn, ["big"], rows)
    writer.start()
    captures = [_capture(dsn, out, slot, "--backfill", "public.big", "--backfill-budget", "0.003",
                         "--idle-exit", "2") for out, slot in zip(outs, slots)]
    started.extend(captures)

    wait_for(lambda: any(c.poll() is not None for c in captures)
             or (all(_ended(out, oid) for out in outs) and writer.rounds > 40),
             timeout=90, what="both backfills' ends")
    writer.stop.set()
    writer.join(60)
    for capture in captures:
        _, stderr = capture.communicate(timeout=60)
        assert capture.returncode == 0, stderr
        assert "backfill public.big: done, " in stderr, stderr
    expected = selected(dsn, "SELECT * FROM big")
    for out in outs:
        held = read_state(str(out)).runs[oid]
        assert held.ended and held.chunk > 5, held
        tables, _ = folded([out])
        assert rows_of(tables["public.big"]) == expected, out.name
    # each file's chunks, each right after a high watermark of its own capture's session (one for the whole
    # file) with the chunk's numbers; and the other capture's watermarks among them (both slots see both)
    sessions = []
    for out in outs:
        highs = _highs_before_chunks(out)
        assert len(highs) == read_state(str(out)).runs[oid].chunk
        assert [(h["r"], h["c"]) for h in highs] == [(0, c) for c in range(len(highs))]
        assert len({h["s"] for h in highs}) == 1
        sessions.append(highs[0]["s"])
    assert sessions[0] != sessions[1]
    for out, other in zip(outs, reversed(sessions)):
        found = _watermarks(out)
        chunks = [i for i, m in enumerate(found) if m is None]
        assert other in {m["s"] for m in found[chunks[0]:chunks[-1]] if m is not None}, "not at the same time"
    drop_slots(dsn)


def _watermarks(path) -> list[dict]:
    """The contents of the backfill's messages in a capture file, in order (``None`` for the records between
    them that are a backfill chunk's)."""
    import json

    from replwire.codec.io.capture_file import read_capture
    from replwire.codec.stream import snapshot_records
    from replwire.schema.capture import BACKFILL_PREFIX

    marker = BACKFILL_PREFIX.encode() + b"\x00"
    found: list = []
    with read_capture(str(path)) as reader:
        for _, _, _, data in reader.records(raw=True):
            if data[:1] == bytes((snapshot_records.CHUNK,)):
                found.append(None)
            elif data[:1] == b"M" and marker in data:
                at = data.index(marker) + len(marker)
                found.append(json.loads(bytes(data[at + 4:at + 4 + int.from_bytes(data[at:at + 4], "big")])))
    return found


def _highs_before_chunks(path) -> list[dict]:
    """The message each chunk record of the file follows (the last backfill message before it)."""
    found = _watermarks(path)
    return [found[i - 1] for i, m in enumerate(found) if m is None and i > 0 and found[i - 1] is not None]


@pytest.mark.parametrize("planted", [False, True], ids=["other-session", "planted-same-session"])
def test_another_sessions_watermark_inside_a_chunks_window_is_ignored(pg15, tmp_path, monkeypatch, planted):
    """Deterministic: inside chunk 1's window (after a commit its snapshot misses, before its high watermark)
    comes a low watermark of the same run and chunk numbers from another capture's session, as a second
    capture of the database backfilling its own run 0 writes it.  Ignored, the window applies the missed
    update and no chunk is read again.  Taken as this session's (planted: the other capture's session id the
    same), it opens the window again after the commit, whose guard then has the chunk read again (the test
    can fail: the chunk's row is right either way, but a second capture would have every chunk of this one
    read again, or forever)."""
    import json

    import psycopg

    from replwire.codec.io import backfill as module
    from replwire.codec.io.connection import CaptureSettings
    from replwire.codec.io.live import LiveCapture
    from replwire.schema.capture import BACKFILL_PREFIX

    dsn = database(pg15, "bfother")
    _execute(dsn, "CREATE TABLE big (id int PRIMARY KEY, v text, n int)",
             "INSERT INTO big SELECT g, 'v' || g, g FROM generate_series(1, 1000) g",
             "CREATE PUBLICATION pub FOR TABLE big")
    held = psycopg.connect(dsn)
    emitted = module.Backfill._emit
    done: set[str] = set()

    def emit(self, cur, transactional, content, flush=False):
        if content.get("k") == "low" and content.get("c") == 1 and "low" not in done:  # before chunk 1's read
            done.add("low")
            held.execute("UPDATE big SET v = 'missed by the snapshot' WHERE id = 150")
        if content.get("k") == "high" and content.get("c") == 1 and "high" not in done:  # after it, before H
            done.add("high")
            held.commit()
            other = {"v": 1, "s": self.session if planted else "0123456789ab", "k": "low", "r": content["r"],
                     "c": 1}
            cur.execute("SELECT pg_logical_emit_message(false, %s, %s)", (BACKFILL_PREFIX, json.dumps(other)))
        emitted(self, cur, transactional, content, flush)

    monkeypatch.setattr(module.Backfill, "_emit", emit)
    for name in ("FIRST_ROWS", "LEAST_ROWS", "MOST_ROWS"):
        monkeypatch.setattr(module, name, 100)  # chunks of 100 rows: the second holds id 150
    out = tmp_path / "other.rwcap"
    said: list[str] = []
    settings = CaptureSettings(slot=slot_of(dsn), publication="pub", messages=True)
    LiveCapture(dsn, out, settings, sync_interval=0.05, backfill=["public.big"], log=said.append).run(idle_exit=1.5)
    held.close()
    (ended,) = [line for line in said if line.startswith("backfill public.big: done, 1,000 rows")]
    assert ("1 read again" in ended) == planted, ended
    tables, _ = folded([out])
    assert dict(row[:2] for row in rows_of(tables["public.big"]))[150] == "missed by the snapshot"
    assert rows_of(tables["public.big"]) == selected(dsn, "SELECT * FROM big")
    drop_slots(dsn)


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
