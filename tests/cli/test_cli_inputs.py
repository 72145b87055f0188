"""The files of one slot's stream given in any order: ``replwire decode``, the Spark jobs and source, and
``replwire serve`` read them in stream order, and refuse files that cannot be one stream -- against a real
server, whose table and whose workload (this test's own statements) say what the stream holds.

The capture runs four times on one slot: with ``--snapshot`` into ``cap-9.rwcap``, resumed into the same
file, then into ``cap-10.rwcap`` and ``cap-11.rwcap`` (new files, the slot's confirmed position on) -- so a
glob lists ``cap-10 cap-11 cap-9``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

pytestmark = pytest.mark.server

REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")
TABLE = "inputs_rows"


def replwire(*args, **kwargs):
    return subprocess.run([REPLWIRE, *map(str, args)], capture_output=True, text=True, timeout=180, **kwargs)


def capture(pg, out, slot="inputs_slot", *more):
    result = replwire("capture", "--dsn", pg.dsn, "--slot", slot, "--publication", f"{TABLE}_pub", "--out", out,
                      "--idle-exit", "0.5", "--sync-interval", "0.05", *more)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def segments(pg18, tmp_path_factory):
    """(cap-9, cap-10, cap-11, the (op, id) of every change the workload made in order -- the snapshot's rows
    first --, the table's rows at the end)."""
    directory = tmp_path_factory.mktemp("inputs")
    paths = [directory / f"cap-{n}.rwcap" for n in (9, 10, 11)]
    expected = []
    with pg18.connect() as conn:
        conn.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, v text)")
        conn.execute(f"CREATE PUBLICATION {TABLE}_pub FOR TABLE {TABLE}")
        conn.execute(f"INSERT INTO {TABLE} SELECT g, 'before' FROM generate_series(1, 5) g")
        expected += [("snapshot", i) for i in range(1, 6)]
        try:
            capture(pg18, paths[0], "inputs_slot", "--snapshot")
            for phase, path in enumerate([paths[0], *paths]):
                base = 100 * (phase + 1)
                for i in range(base, base + 10):
                    conn.execute(f"INSERT INTO {TABLE} VALUES (%s, 'new')", (i,))
                    expected.append(("insert", i))
                conn.execute(f"UPDATE {TABLE} SET v = 'changed' WHERE id = %s", (base + 3,))
                expected.append(("update", base + 3))
                conn.execute(f"DELETE FROM {TABLE} WHERE id = %s", (phase + 1,))
                expected.append(("delete", phase + 1))
                with conn.transaction():  # one transaction of several changes
                    conn.execute(f"UPDATE {TABLE} SET v = 'both' WHERE id IN (%s, %s)", (base, base + 1))
                    conn.execute(f"DELETE FROM {TABLE} WHERE id = %s", (base + 9,))
                expected += [("update", base), ("update", base + 1), ("delete", base + 9)]
                if phase:  # (phase 0 goes on in cap-9)
                    capture(pg18, path)
            table = sorted(conn.execute(f"SELECT id, v FROM {TABLE}").fetchall())
        finally:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE slot_name = 'inputs_slot'")
    return paths, expected, table


def test_spark_cli_names_the_order_it_reads_the_files_in(segments, tmp_path):
    paths, _, _ = segments
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "taken").write_text("")  # refused before Spark starts: the note comes first
    result = replwire("spark", "changes", paths[1], paths[2], paths[0], "--out", tmp_path / "out")
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(f"note: reading the inputs in stream order (by the positions their records "
                                    f"complete): {paths[0]}, {paths[1]}, {paths[2]}\n")


def decoded(*paths):
    result = replwire("decode", *paths)
    assert result.returncode == 0, result.stderr
    changes = [json.loads(line) for line in result.stdout.splitlines()]
    return [(c["op"], (c.get("new") or c.get("key") or c.get("old"))["id"]) for c in changes], result.stderr


def folded(ops, rows):
    """The table the changes leave, from the values the decoded rows carry."""
    state = {}
    for obj in rows:
        row = obj.get("new") or obj.get("key") or obj.get("old")
        if obj["op"] == "delete":
            state.pop(row["id"], None)
        else:
            state[row["id"]] = obj["new"]["v"]
    return sorted(state.items())


@pytest.mark.parametrize("order", [(0, 1, 2), (1, 2, 0), (2, 0, 1)], ids=["in-order", "glob", "shuffled"])
def test_decode_reads_the_files_of_one_slot_in_stream_order(segments, order):
    paths, expected, table = segments
    given = [paths[i] for i in order]
    got, stderr = decoded(*given)
    assert got == expected
    if order != (0, 1, 2):
        assert (f"note: reading the inputs in stream order (by the positions their records complete): "
                f"{paths[0]}, {paths[1]}, {paths[2]}\n") in stderr
    else:
        assert "note:" not in stderr
    result = replwire("decode", *given)
    assert folded(got, [json.loads(line) for line in result.stdout.splitlines()]) == table


def ops(stdout):
    return [(c["op"], (c.get("new") or c.get("key") or c.get("old"))["id"])
            for c in map(json.loads, stdout.splitlines())]


@pytest.mark.parametrize("how", ["dash", "dev-stdin", "fifo"])
def test_decode_reads_standard_input_and_a_fifo_once(segments, tmp_path, how):
    """``-`` is standard input; /dev/stdin on a pipe and a FIFO are read once (they were opened twice: the
    first look took the magic, and the second open of a FIFO waited for a writer that was gone)."""
    paths, expected, _ = segments
    if how == "fifo":
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        writer = subprocess.Popen(["sh", "-c", f'cat "{paths[2]}" > "{fifo}"'])
        try:
            result = replwire("decode", paths[0], fifo, paths[1])
        finally:
            writer.kill()
            writer.wait()
    else:
        cat = subprocess.Popen(["cat", str(paths[2])], stdout=subprocess.PIPE)
        result = subprocess.run([REPLWIRE, "decode", str(paths[0]), "-" if how == "dash" else "/dev/stdin",
                                 str(paths[1])], stdin=cat.stdout, capture_output=True, text=True, timeout=180)
        cat.wait()
    assert result.returncode == 0, result.stderr
    assert ops(result.stdout) == expected
    name = {"dash": "standard input", "dev-stdin": "/dev/stdin", "fifo": str(tmp_path / "fifo")}[how]
    assert f"{paths[0]}, {paths[1]}, {name}\n" in result.stderr  # named as given, in stream order


def test_files_of_a_slot_created_again_are_refused(segments, pg18, tmp_path):
    """A slot dropped and created again under its name starts at a new consistent point: a file of the old
    slot and one of the new are not one stream (what happened between is in neither)."""
    from replwire.codec.serve import Source, SourceError

    paths, _, _ = segments
    again = tmp_path / "again.rwcap"
    with pg18.connect() as conn:
        try:
            capture(pg18, again, "inputs_slot", "--snapshot")
        finally:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE slot_name = 'inputs_slot'")
    out = tmp_path / "out"
    for given, reason in (([paths[0], again], "it opens with a snapshot at consistent point"),
                          ([again, paths[1]], "it holds a transaction completed at")):
        for command in (["decode"], ["spark", "changes", "--out", out]):
            result = replwire(*command, *given)
            assert result.returncode == 2, result.stderr
            assert result.stdout == "" and not out.exists()
            assert reason in result.stderr and "the inputs are not one stream" in result.stderr
            # a usage error, as decode's refusals are: one "Error:" line after the usage lines, no traceback
            assert "Traceback" not in result.stderr and result.stderr.splitlines()[-1].startswith("Error: ")
        with pytest.raises(SourceError, match=reason):
            Source.from_captures(given)
    result = replwire("serve", paths[0], again, "--listen", "127.0.0.1:0")
    assert result.returncode == 2 and result.stderr.startswith("error: ") and "not one stream" in result.stderr



def test_serve_plays_the_files_in_stream_order(segments):
    from replwire.codec import Assembler
    from replwire.codec.serve import Replay, Request, Source

    paths, expected, _ = segments
    source = Source.from_captures([paths[2], paths[0], paths[1]])
    assert [s.name for s in source.segments] == list(map(str, paths))
    assert source.scan().notes[0].startswith("serving the files in stream order")
    request = Request.from_options({"proto_version": "1", "publication_names": f"{TABLE}_pub"},
                                   server_version=180000)
    assembler = Assembler(proto_version=1, typed=False)
    got = []
    for item in assembler.feed_all((0, 0, data) for _, data in Replay(source, request).messages()):
        for change in item.changes:
            got.append((change.op, int((change.new or change.key or change.old)["id"])))
    assert got == [op for op in expected if op[0] != "snapshot"]


def test_spark_apply_and_the_source_take_the_files_in_any_order(segments, spark, tmp_path):
    from replwire.spark.jobs import apply

    paths, expected, table = segments
    glob = sorted(map(str, paths))  # cap-10, cap-11, cap-9
    assert glob != list(map(str, paths))
    apply(spark, glob, str(tmp_path / "state"))
    state = spark.read.parquet(str(tmp_path / "state" / f"public.{TABLE}")).select("id", "v").collect()
    assert sorted((r.id, r.v) for r in state) == table
    rows = spark.read.format("replwire").load(glob).select("op", "new").collect()
    got = Counter((r.op, int(json.loads(r.new)["id"]) if r.new else None) for r in rows)
    want = Counter(op for op in expected if op[0] != "delete")
    assert {k: v for k, v in got.items() if k[1] is not None} == want


@pytest.mark.parametrize("command", [["spark", "changes", "--out", "out"], ["serve", "--listen", "127.0.0.1:0"]],
                         ids=["spark", "serve"])
def test_a_fifo_is_refused_where_it_would_be_read_twice(tmp_path, command):
    """Only decode reads a FIFO (once, into a temporary file): the Spark jobs and serve open their inputs more
    than once, so a FIFO is refused before anything opens it (opening one with no writer waited for one)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result = subprocess.run([REPLWIRE, *command, str(fifo)], capture_output=True, text=True, timeout=30,
                            cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1] == (f"Error: {fifo}: not a regular file: a pipe, a FIFO or a device can "
                                              "be read only once (replwire decode reads one, and - for standard "
                                              "input; otherwise copy it to a file first)")


# -- a missing file ------------------------------------------------------------------------------------------

GAP_TABLE, GAP_SLOT = "gap_rows", "gap_slot"


def gap_capture(pg, out, *more):
    result = replwire("capture", "--dsn", pg.dsn, "--slot", GAP_SLOT, "--publication", f"{GAP_TABLE}_pub",
                      "--out", out, "--idle-exit", "0.5", "--sync-interval", "0.05", *more)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def gapped(pg18, tmp_path_factory):
    """(a, b, missing, c, the ids inserted in order): four files of one slot, each followed by WAL with nothing
    for the publication (a table outside it) before the next capture starts -- so each capture starts past
    the last transaction the file before holds, at a position only a SlotConfirmed in that file names.  b is
    captured through the SQL functions, the others over the walsender."""
    directory = tmp_path_factory.mktemp("gaps")
    a, b, missing, c = (directory / f"{name}.rwcap" for name in ("a", "b", "missing", "c"))
    ids = []
    with pg18.connect() as conn:
        conn.execute(f"CREATE TABLE {GAP_TABLE} (id int PRIMARY KEY)")
        conn.execute(f"CREATE TABLE {GAP_TABLE}_other (id int)")
        conn.execute(f"CREATE PUBLICATION {GAP_TABLE}_pub FOR TABLE {GAP_TABLE}")
        try:
            gap_capture(pg18, a)  # (creates the slot)
            for number, (path, more) in enumerate(((a, ()), (b, ("--via", "sql")), (missing, ()), (c, ()))):
                for i in range(10 * number + 1, 10 * number + 4):
                    conn.execute(f"INSERT INTO {GAP_TABLE} VALUES (%s)", (i,))
                    ids.append(i)
                conn.execute(f"INSERT INTO {GAP_TABLE}_other SELECT generate_series(1, 100)")
                gap_capture(pg18, path, *more)
        finally:
            conn.execute(f"SELECT pg_drop_replication_slot('{GAP_SLOT}')")
    return a, b, missing, c, ids


def test_files_that_follow_each_other_are_read_as_one_stream(gapped):
    """Each capture starts at a position past its file-before's last transaction (the server's WAL end it
    confirmed when idle): the SlotConfirmed that file holds says so, and the files are one stream."""
    from replwire.codec import parse
    from replwire.codec.io.capture_file import read_capture
    from replwire.codec.stream import snapshot_records

    a, b, missing, c, ids = gapped
    last_commit, marks = {}, {}
    for path in (a, b, missing, c):
        with read_capture(path) as reader:
            found = [(lsn, snapshot_records.parse_record(data).at_start) for _, lsn, _, data in reader.records(raw=True)
                     if data and data[0] == snapshot_records.CONFIRMED]
            last_commit[path] = max(parse(data, proto_version=1).end_lsn
                                    for _, _, _, data in reader.records(raw=True) if data[:1] == b"C")
        marks[path] = found
        assert found[0][1] == 1 and any(not at_start for _, at_start in found)
    # what makes the check necessary: the next capture starts past the last commit of the file before
    for before, after in ((a, b), (b, missing), (missing, c)):
        assert marks[after][0][0] > last_commit[before]
    result = replwire("decode", a, b, missing, c)
    assert result.returncode == 0, result.stderr
    assert ops(result.stdout) == [("insert", i) for i in ids]


@pytest.mark.parametrize("command", [["decode"], ["spark", "changes", "--out", "{tmp}/out"]], ids=["decode", "spark"])
def test_a_missing_file_is_refused(gapped, tmp_path, command):
    a, b, missing, c, ids = gapped
    result = replwire(*[part.format(tmp=tmp_path) for part in command], a, b, c)
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr
    assert f"{c}" in result.stderr and "the inputs are not one stream" in result.stderr
    assert "the slot had moved past changes no input holds" in result.stderr
    if command == ["decode"]:  # what comes before the gap is written, and nothing after it
        assert ops(result.stdout) == [("insert", i) for i in ids[:6]]


def test_serve_refuses_a_missing_file(gapped):
    from replwire.codec.serve import InputsRefused, Source

    a, b, missing, c, _ = gapped
    Source.from_captures([a, b, missing, c]).scan()
    with pytest.raises(InputsRefused, match="the slot had moved past changes no input holds"):
        Source.from_captures([a, b, c]).scan()
    result = replwire("serve", a, b, c, "--listen", "127.0.0.1:0")
    assert result.returncode == 2 and "the slot had moved past changes no input holds" in result.stderr
