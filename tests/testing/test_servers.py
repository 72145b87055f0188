"""Smoke tests of the real-server test infrastructure: servers, workload, captures, test_decoding, walsender.

They check the infrastructure itself with nothing but ``struct`` (no replwire code), so they stay meaningful
while the codec is being written.
"""

from __future__ import annotations

import os
import pwd
import struct
import time

import pytest

from replwire.codec.testing.localserver import TEST_OS_USER, PgServer, server_settings
from tests.conftest import ALL_MAJORS
from tests.support import workload
from tests.support.capture import (
    UNCHANGED_TOAST,
    CaptureRun,
    capture_configs,
    max_proto_version,
    parse_test_decoding,
    parse_test_decoding_line,
)
from tests.support.walsender import (
    WalSender,
    int_to_lsn,
    keepalive_fields,
    lsn_to_int,
    pgoutput_slot,
    status_update_for_tests,
    xlogdata_fields,
)

pytestmark = pytest.mark.server

#: Every pgoutput message tag (``LogicalRepMsgType`` in PostgreSQL's ``src/include/replication/logicalproto.h``).
ALL_TAGS = set("BCORYIUDTMSEcAbPKrp")
assert len(ALL_TAGS) == 19
BASE_TAGS = set("BCORYIUDT")  # what a plain configuration shows for this workload


# --------------------------------------------------------------------------------------------------------------
# helpers (hand parsing with struct, enough for the checks below)
# --------------------------------------------------------------------------------------------------------------


def _with_stream_flag(rows: list[bytes]) -> list[tuple[bool, bytes]]:
    """Pair each message with whether it is inside a Stream Start…Stop block."""
    out, inside = [], False
    for data in rows:
        tag = data[:1]
        if tag == b"S":
            out.append((False, data))
            inside = True
        elif tag == b"E":
            out.append((False, data))
            inside = False
        else:
            out.append((inside, data))
    return out


def _message(data: bytes, in_stream: bool) -> dict[str, object]:
    pos, xid = 1, None
    if in_stream:
        (xid,) = struct.unpack_from("!I", data, 1)
        pos = 5
    flags, lsn = struct.unpack_from("!BQ", data, pos)
    pos += 9
    end = data.index(b"\0", pos)
    prefix = data[pos:end].decode()
    (n,) = struct.unpack_from("!i", data, end + 1)
    content = data[end + 5:end + 5 + n]
    assert end + 5 + n == len(data)
    return {"xid": xid, "transactional": bool(flags & 1), "lsn": int_to_lsn(lsn), "prefix": prefix,
            "content": content}


def _relid(data: bytes, in_stream: bool) -> int:
    return struct.unpack_from("!I", data, 5 if in_stream else 1)[0]


def _tuple_kinds(data: bytes, pos: int) -> tuple[list[str], int]:
    """Kinds of the columns of the TupleData at ``pos``, and the position after it."""
    (ncols,) = struct.unpack_from("!H", data, pos)
    pos += 2
    kinds = []
    for _ in range(ncols):
        kind = chr(data[pos])
        pos += 1
        kinds.append(kind)
        if kind in "tb":
            (n,) = struct.unpack_from("!i", data, pos)
            pos += 4 + n
    return kinds, pos


def _stream_aborts(rows: list[bytes]) -> list[tuple[int, int, int]]:
    """(xid, subxid, payload length after the tag) of every Stream Abort."""
    return [struct.unpack_from("!II", d, 1) + (len(d) - 1,) for d in rows if d[:1] == b"A"]


def _is_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


# --------------------------------------------------------------------------------------------------------------
# servers
# --------------------------------------------------------------------------------------------------------------


def test_server_runs_unprivileged_with_test_settings(pg_server: PgServer) -> None:
    assert pg_server.version_num // 10000 == pg_server.major
    assert pg_server.pid is not None
    uid = os.stat(f"/proc/{pg_server.pid}").st_uid
    if os.geteuid() == 0:
        assert uid == pwd.getpwnam(TEST_OS_USER).pw_uid != 0
        assert pg_server.os_user == TEST_OS_USER
    else:
        assert uid == os.geteuid()
    assert os.path.exists(os.path.join(pg_server.socket_dir, f".s.PGSQL.{pg_server.port}"))
    names = ["wal_level", "max_replication_slots", "max_wal_senders", "max_prepared_transactions",
             "track_commit_timestamp", "logical_decoding_work_mem", "synchronous_commit", "listen_addresses",
             "unix_socket_directories", "server_encoding"]
    with pg_server.connect() as conn:
        got = dict(conn.execute("SELECT name, current_setting(name) FROM unnest(%s::text[]) name", (names,)))
        user, is_super = conn.execute("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user"
                                      ).fetchone()  # type: ignore[misc]
    assert got == {
        "wal_level": "logical", "max_replication_slots": "40", "max_wal_senders": "10",
        "max_prepared_transactions": "10", "track_commit_timestamp": "on", "logical_decoding_work_mem": "64kB",
        "synchronous_commit": "on", "listen_addresses": "", "unix_socket_directories": pg_server.socket_dir,
        "server_encoding": "UTF8",
    }
    assert "synchronous_commit" not in server_settings(pg_server.major)
    assert (user, is_super) == (pg_server.superuser, True)
    assert f"host='{pg_server.socket_dir}'" in pg_server.dsn


@pytest.mark.parametrize("major", ALL_MAJORS)
def test_start_stop_leaves_nothing_behind(major: int) -> None:
    srv = PgServer.start(major)
    try:
        pid, base = srv.pid, srv.base_dir
        assert pid is not None and base.is_dir()
        with srv.connect() as conn:
            backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            assert _is_alive(backend)
            srv.stop()  # with a client still connected
    finally:
        srv.stop()
    assert not base.exists()
    assert not _is_alive(pid) and not _is_alive(backend)
    assert not srv.running
    srv.stop()  # idempotent


# --------------------------------------------------------------------------------------------------------------
# captures
# --------------------------------------------------------------------------------------------------------------


def test_capture_configurations(pg_captures: CaptureRun) -> None:
    run = pg_captures
    caps = run.captures
    maxp = max_proto_version(run.version_num)
    assert [c.config for c in caps] == [c.name for c in capture_configs(run.version_num)]
    assert len(caps) <= 40
    plain = {c.proto_version for c in caps if set(c.options) == {"proto_version", "publication_names"}}
    assert plain == set(range(1, maxp + 1))
    options = {(k, v) for c in caps for k, v in c.options.items() if k not in ("proto_version", "publication_names")}
    expected = {("binary", "true"), ("messages", "true"), ("streaming", "on"), ("two_phase", "true")}
    if run.version_num >= 160000:
        expected |= {("streaming", "parallel"), ("origin", "none"), ("origin", "any")}
    assert options == expected
    for c in caps:
        assert c.rows, c.config
        assert c.two_phase_slot == (c.options.get("two_phase") == "true")
        assert all(isinstance(lsn, str) and isinstance(xid, int) and data for lsn, xid, data in c.rows)


def test_tag_coverage(pg_captures: CaptureRun) -> None:
    """All 19 message kinds appear on both servers through the SQL interface."""
    assert pg_captures.tags() == ALL_TAGS


def test_tags_per_configuration(pg_captures: CaptureRun) -> None:
    """Each option brings exactly its message kinds."""
    for c in pg_captures.captures:
        o = c.options
        expected = set(BASE_TAGS)
        if o.get("messages") == "true":
            expected |= set("M")
        if o.get("streaming") in ("on", "parallel"):
            expected |= set("SEcA")
        if o.get("two_phase") == "true":
            expected |= set("bPKr")
            if "streaming" in o:
                expected |= set("p")
        if o.get("origin") == "none":
            expected -= set("O")
        assert c.tags == expected, c.config


def test_messages_match_facts(pg_captures: CaptureRun) -> None:
    facts = pg_captures.facts
    emitted = [m for m in facts["messages"] if not m.get("rolled_back")]
    by_lsn = {m["lsn"]: m for m in emitted}
    big_xid = facts["xids"]["big_commit"]
    for c in pg_captures.captures:
        if c.options.get("messages") != "true":
            continue
        streaming = "streaming" in c.options
        seen = []
        rows = {id(data): (lsn, xid) for lsn, xid, data in c.rows}
        for in_stream, data in _with_stream_flag([d for _, _, d in c.rows]):
            if data[:1] != b"M":
                continue
            m = _message(data, in_stream)
            row_lsn, row_xid = rows[id(data)]
            want = by_lsn[m["lsn"]]
            assert (m["transactional"], m["prefix"], m["content"]) == (
                want["transactional"], want["prefix"], want["content"]), c.config
            assert row_lsn == want["lsn"]
            assert row_xid == (want["xid"] or 0)  # non-transactional inside a txn with an xid: that xid
            if streaming and want["name"] == "msg_tx_in_big":
                assert m["xid"] == big_xid  # transactional message inside the stream carries [X]
            else:
                assert m["xid"] is None
            seen.append(want["name"])
        assert sorted(seen) == sorted(m["name"] for m in emitted), c.config


def test_stream_aborts(pg_captures: CaptureRun) -> None:
    """Stream Abort forms: 8 bytes (xid, subxid) or 24 with streaming=parallel; which aborts appear."""
    run = pg_captures
    xids, aborted = run.facts["xids"], run.facts["aborted_xids"]
    for c in run.captures:
        if "streaming" not in c.options:
            continue
        aborts = _stream_aborts([d for _, _, d in c.rows])
        size = 24 if c.options["streaming"] == "parallel" else 8
        assert {n for _, _, n in aborts} == {size}, c.config
        kinds = {(x, "top" if x == sub else "sub") for x, sub, _ in aborts}
        if run.major >= 18:
            # the SQL interface skips transactions already aborted when decoded (docs/reference/quirks.md)
            assert kinds == {(xids["savepoint"], "sub")}, c.config
        else:
            expected = {(aborted["big_abort"], "top"), (xids["savepoint"], "sub")}
            if c.options.get("two_phase") != "true":
                expected.add((aborted["prepared_big_rollback"], "top"))
            assert kinds == expected, c.config


def test_unchanged_toast_and_nothing_identity(pg_captures: CaptureRun) -> None:
    run = pg_captures
    tables = run.schema["tables"]
    v1 = run.by_config()["v1"]
    updates = [(xid, d) for _, xid, d in v1.rows if d[:1] == b"U" and _relid(d, False) == tables["toasty"]]
    first = dict(updates)[run.facts["xids"]["toast_update"]]
    assert first[5:6] == b"N"  # no old tuple: the key did not change
    assert _tuple_kinds(first, 6)[0] == ["t", "u", "t"]
    nothing = [d[:1] for _, _, d in v1.rows if d[:1] in b"IUD" and _relid(d, False) == tables["ri_nothing"]]
    assert nothing == [b"I", b"I"]  # UPDATE/DELETE run but are not published (see tests/support/workload.py)


def test_test_decoding_output(pg_captures: CaptureRun) -> None:
    run = pg_captures
    facts = run.facts
    recs = parse_test_decoding(run.test_decoding)
    assert len(recs) == len(run.test_decoding) > 0
    committed = {r.xid for r in recs if r.kind in ("COMMIT", "COMMIT PREPARED")}
    message_only = {facts["xids"]["msg_tx"], facts["xids"]["msg_bin"]}  # PG15 prints no BEGIN/COMMIT for them
    assert set(facts["xids"].values()) - message_only <= committed
    assert not committed & set(facts["aborted_xids"].values())

    all_types = [r for r in recs if r.table == "public.all_types"]
    # the all_types step, then the streamed row of big_commit
    assert [r.kind for r in all_types] == ["INSERT"] * 4 + ["UPDATE", "DELETE"] + ["INSERT", "UPDATE", "DELETE"]
    row1 = {c.name: c.value for c in all_types[0].new or []}
    assert row1["c_text"] == workload.NON_ASCII and row1["c_bool"] == "t" and row1["c_bit"] == "1010"
    assert row1["c_text_arr"] == '{"a b","c,d","\\"q\\"",NULL,"",ü}'
    assert all(v is None for k, v in ((c.name, c.value) for c in all_types[1].new or []) if k != "id")
    row3 = {c.name: c.value for c in all_types[2].new or []}
    assert (row3["c_numeric"], row3["c_text"], row3["c_timestamptz"], row3["c_bool"]) == ("NaN", "", "infinity", "f")
    row4 = {c.name: c.value for c in all_types[3].new or []}
    assert row4["c_text"] == "it's a \\ \"quote\"\nnewline\ttab " + workload.NON_ASCII

    toast = [r for r in recs if r.table in ("public.toasty", "public.toasty_full") and r.kind == "UPDATE"]
    assert [dict((c.name, c.value) for c in r.new or [])["big"] for r in toast[:2]] == [UNCHANGED_TOAST] * 2
    full_old = dict((c.name, c.value) for c in toast[1].old or [])["big"]
    assert isinstance(full_old, str) and len(full_old) == workload.TOAST_LENGTH
    assert full_old.startswith(facts["toast"]["value_prefix"])

    nothing = [(r.kind, r.no_tuple_data) for r in recs if r.table == "public.ri_nothing"]
    assert nothing == [("INSERT", False), ("INSERT", False), ("UPDATE", False), ("DELETE", True)]

    msgs = [(r.transactional, r.prefix, r.content) for r in recs if r.kind == "MESSAGE"]
    assert msgs == [(m["transactional"], m["prefix"], m["content"])
                    for m in facts["messages"] if not m.get("rolled_back")]

    trunc = [sorted(r.flags or ()) for r in recs if r.kind == "TRUNCATE"]
    # the four truncate steps, then the TRUNCATE inside big_commit
    assert trunc == [[], ["cascade"], ["restart_seqs"], ["cascade", "restart_seqs"], []]

    gids = {(r.kind, r.gid) for r in recs if r.gid is not None}
    for step, p in facts["prepared"].items():
        end = "COMMIT PREPARED" if p["outcome"] == "commit" else "ROLLBACK PREPARED"
        assert (end, p["gid"]) in gids
        if step != "prepared_big_rollback" or run.major < 18:  # PG18: already aborted, nothing to prepare
            assert ("PREPARE", p["gid"]) in gids


def test_test_decoding_line_shapes() -> None:
    rec = parse_test_decoding_line(
        'table public."We ird": UPDATE: old-key: id[integer]:1 new-tuple: id[integer]:2 "a b"[text]:\'x\'\'y\' '
        "t[timestamp with time zone]:null arr[integer[]]:'{1,2}' big[text]:unchanged-toast-datum f[real]:-Infinity")
    assert rec.kind == "UPDATE" and rec.table == 'public."We ird"'
    assert [(c.name, c.type, c.value) for c in rec.old or []] == [("id", "integer", "1")]
    assert [(c.name, c.value) for c in rec.new or []] == [
        ("id", "2"), ('"a b"', "x'y"), ("t", None), ("arr", "{1,2}"), ("big", UNCHANGED_TOAST), ("f", "-Infinity")]
    rec = parse_test_decoding_line("message: transactional: 0 prefix: a, sz: 1 content:, sz: 1 content:z")
    assert (rec.prefix, rec.content) == ("a, sz: 1 content:", b"z")
    rec = parse_test_decoding_line("COMMIT PREPARED 'it''s', txid 7 (at 2000-01-01 00:00:00+00)")
    assert (rec.kind, rec.gid, rec.xid, rec.timestamp) == ("COMMIT PREPARED", "it's", 7, "2000-01-01 00:00:00+00")
    assert parse_test_decoding_line("table public.t: DELETE: (no-tuple-data)").no_tuple_data


# --------------------------------------------------------------------------------------------------------------
# walsender
# --------------------------------------------------------------------------------------------------------------


def test_walsender_client(pg_server: PgServer) -> None:
    slot = "rw_walsender_smoke"
    with pg_server.connect() as conn, pgoutput_slot(conn, slot, "ws_smoke"):
        conn.execute("INSERT INTO ws_smoke SELECT g, 'row ' || g FROM generate_series(1, 3) g")
        target = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]  # type: ignore[index]
        before = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                              (slot,)).fetchone()[0]  # type: ignore[index]
        with WalSender.connect(pg_server, params={"wal_sender_timeout": "2s"}) as ws:
            ws.start_replication(slot, {"proto_version": "1", "publication_names": '"ws_smoke_pub"'})
            frames = ws.collect(target, timeout=15)
            assert {f[:1] for f in frames} == {b"w", b"k"}
            assert all(len(f) == 18 for f in frames if f[:1] == b"k")
            xlog = [xlogdata_fields(f) for f in frames if f[:1] == b"w"]
            assert [x.data[:1] for x in xlog] == [b"B", b"R", b"I", b"I", b"I", b"C"]
            for x in xlog:
                assert x.data_start == x.wal_end
                assert (x.data_start == 0) == (x.data[:1] == b"R")
            commit_end = struct.unpack_from("!Q", xlog[-1].data, 10)[0]
            assert lsn_to_int(before) < commit_end <= lsn_to_int(target)

            ws.send_copy_data(status_update_for_tests(commit_end, commit_end, commit_end))
            deadline = time.monotonic() + 10
            while lsn_to_int(conn.execute(
                    "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                    (slot,)).fetchone()[0]) < commit_end:  # type: ignore[index]
                assert time.monotonic() < deadline, "status update did not advance the slot"
                time.sleep(0.01)

            # no reply for wal_sender_timeout/2: the server asks for one
            for _ in range(100):
                frame = ws.read_frame(5)
                assert frame is not None and frame[:1] == b"k"
                if keepalive_fields(frame).reply_requested:
                    break
            else:
                pytest.fail("no keepalive with replyRequested")
            ws.send_copy_data(status_update_for_tests(commit_end, commit_end, commit_end))
            ws.end_copy()
            assert ws.command_tags[-1] == "START_REPLICATION"


def test_live_walsender_capture(pg_captures: CaptureRun) -> None:
    """Streaming over the walsender during the workload shows every tag, and top-level Stream Aborts on PG18."""
    run = pg_captures
    (live,) = run.walsender
    assert live.tags == ALL_TAGS
    frames = live.frames
    assert any(f[:1] == b"k" for f in frames)
    assert all(len(f) == 18 for f in frames if f[:1] == b"k")
    for f in frames:
        if f[:1] == b"w":
            x = xlogdata_fields(f)
            assert x.data_start == x.wal_end
            if x.data[:1] in (b"R", b"Y"):
                assert x.data_start == 0
    aborts = _stream_aborts(live.messages())
    parallel = live.options["streaming"] == "parallel"
    assert {n for _, _, n in aborts} == {24 if parallel else 8}
    assert {(x, x == sub) for x, sub, _ in aborts} == {
        (run.facts["aborted_xids"]["big_abort"], True), (run.facts["xids"]["savepoint"], False)}
