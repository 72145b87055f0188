"""A capture is resumed only from the slot it came from: the header records the slot, the server's system
identifier and the database; a file from another one, or one whose slot is gone, is refused -- before
anything is created on the server -- and so is an output that cannot be a capture file."""

from __future__ import annotations

import pytest

from replwire.codec.io.capture_file import (
    CaptureFileError,
    CaptureHeader,
    CaptureWriter,
    encode_header,
    read_capture,
)
from replwire.codec.io.connection import CaptureError, CaptureSettings
from replwire.codec.io.live import LiveCapture
from replwire.codec.serve.source import Source
from replwire.codec.split import open_inputs
from replwire.schema import capture as layout
from tests.support.capture import pgoutput_records

SOURCE = {"slot_name": "app", "system_identifier": "7312345678901234567", "database": "shop"}


# -- the header ----------------------------------------------------------------------------------------------

def test_the_header_records_where_the_records_came_from(tmp_path):
    header = CaptureHeader(proto_version=2, options={"publication_names": "p"}, client_encoding="LATIN1", **SOURCE)
    path = tmp_path / "a.rwcap"
    with CaptureWriter(path, header):
        pass
    with read_capture(path) as reader:
        assert reader.header == header
        assert reader.header.options == {"publication_names": "p"}  # not pgoutput options: never among them
        assert reader.header.source == SOURCE
        assert reader.header.format_version == layout.FORMAT_VERSION == 5
    # on disk: more name/value options after the pgoutput ones and client_encoding (count 5), format unchanged
    assert (b"\x00\x05publication_names\x00p\x00client_encoding\x00LATIN1\x00slot_name\x00app\x00"
            b"system_identifier\x007312345678901234567\x00database\x00shop\x00") in path.read_bytes()
    # what reads capture files for their options sees the pgoutput options only: serve, and decode's inputs
    assert Source.from_captures([path]).segments[0].options == {"publication_names": "p"}
    assert open_inputs([path])[0].encoding == "iso8859-1"


def test_a_header_without_them_is_from_an_unknown_source(tmp_path):
    path = tmp_path / "old.rwcap"
    with CaptureWriter(path, CaptureHeader(proto_version=1, options={"binary": "true"})):
        pass
    with read_capture(path) as reader:
        assert reader.header.source == {"slot_name": None, "system_identifier": None, "database": None}
        assert reader.header.options == {"binary": "true"}
    assert b"slot_name" not in path.read_bytes()


@pytest.mark.parametrize("name", ["slot_name", "system_identifier", "database"])
def test_they_are_not_pgoutput_options(name):
    with pytest.raises(ValueError, match=f"{name} is not a pgoutput option"):
        encode_header(CaptureHeader(proto_version=1, options={name: "x"}))


def test_inputs_from_another_slot_server_or_database_are_not_one_stream(tmp_path):
    """decode and Spark read several files as segments of one stream: files that say they came from different
    slots, servers or databases are refused (before, another slot's transactions were skipped as repeats, or
    folded with this one's); a file that does not say where it came from goes with any."""
    import subprocess
    import sys

    paths = {}
    for name, source in (("app", SOURCE), ("other", {**SOURCE, "slot_name": "apq"}),
                         ("elsewhere", {**SOURCE, "system_identifier": "1"}), ("db", {**SOURCE, "database": "x"}),
                         ("unknown", {})):
        paths[name] = tmp_path / f"{name}.rwcap"
        with CaptureWriter(paths[name], CaptureHeader(proto_version=1, **source)):
            pass
    assert len(open_inputs([paths["app"], paths["unknown"], paths["app"]])) == 3
    for name, field, value in (("other", "slot_name", "apq"), ("elsewhere", "system_identifier", "1"),
                               ("db", "database", "x")):
        with pytest.raises(CaptureFileError, match=rf"the inputs are not one stream: .*app.rwcap was captured "
                                                   rf"with {field} '{SOURCE[field]}', this file with '{value}'"):
            open_inputs([paths["app"], paths["unknown"], paths[name]])
    result = subprocess.run([sys.executable, "-m", "replwire.codec.cli", "decode", str(paths["app"]),
                             str(paths["other"])], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "the inputs are not one stream" in result.stderr, result.stderr


def test_appending_checks_the_settings_not_the_source(tmp_path):
    # an older file (no source) is continued by a writer whose header has one; the file's header stays
    path = tmp_path / "old.rwcap"
    with CaptureWriter(path, CaptureHeader(proto_version=1)) as writer:
        writer.append(1, 0, b"x")
    with CaptureWriter(path, CaptureHeader(proto_version=1, **SOURCE)) as writer:
        writer.append(2, 0, b"y")
    with read_capture(path) as reader:
        assert reader.header.slot_name is None and [r.data for r in reader.records()] == [b"x", b"y"]


# -- resuming, on real servers -----------------------------------------------------------------------------

def slots(conn):
    return {row[0] for row in conn.execute("SELECT slot_name FROM pg_replication_slots")}


def capture(server, out, slot, publication, **kwargs):
    settings = CaptureSettings(slot=slot, publication=publication, proto_version=kwargs.pop("proto_version", None))
    return LiveCapture(server.dsn, out, settings, sync_interval=0.05, **kwargs)


@pytest.mark.server
@pytest.mark.parametrize("major", [15, 18])
def test_a_mistyped_slot_is_refused_and_nothing_is_created(major, request, tmp_path):
    server = request.getfixturevalue(f"pg{major}")
    table = f"src_{major}"
    out = tmp_path / "app.rwcap"
    with server.connect() as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
        conn.execute(f"CREATE PUBLICATION {table}_pub FOR TABLE {table}")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"{table}_other",))
        try:
            capture(server, out, f"{table}_app", f"{table}_pub").run(idle_exit=0.2)  # creates the slot
            conn.execute(f"INSERT INTO {table} VALUES (1)")
            capture(server, out, f"{table}_app", f"{table}_pub").run(idle_exit=0.3)
            before = out.read_bytes()
            # a slot that does not exist: refused, not created
            with pytest.raises(CaptureError, match=rf"^{out} was captured from slot '{table}_app', not "
                                                   rf"'{table}_apq': resume it with --slot {table}_app, or use "
                                                   rf"another --out for a capture of slot '{table}_apq'$"):
                capture(server, out, f"{table}_apq", f"{table}_pub").run(idle_exit=0.2)
            # another slot that exists: refused too
            with pytest.raises(CaptureError, match=f"captured from slot '{table}_app', not '{table}_other'"):
                capture(server, out, f"{table}_other", f"{table}_pub").run(idle_exit=0.2)
            # other settings: refused before the slot is created too
            with pytest.raises(CaptureError, match="was captured with other settings"):
                capture(server, out, f"{table}_new", f"{table}_pub", proto_version=1).run(idle_exit=0.2)
            # nor is a publication created for it
            with pytest.raises(CaptureError, match=f"captured from slot '{table}_app', not '{table}_apq'"):
                capture(server, out, f"{table}_apq", f"{table}_pub", create_publication=True).run(idle_exit=0.2)
            with pytest.raises(CaptureError, match="was captured with other settings"):
                capture(server, out, f"{table}_apq", f"{table}_newpub", create_publication=True).run(idle_exit=0.2)
            assert conn.execute("SELECT count(*) FROM pg_publication WHERE pubname = %s",
                                (f"{table}_newpub",)).fetchone()[0] == 0
            assert out.read_bytes() == before
            assert not slots(conn) & {f"{table}_apq", f"{table}_new"}
            # what the header says
            system = conn.execute("SELECT system_identifier::text FROM pg_control_system()").fetchone()[0]
            database = conn.execute("SELECT current_database()").fetchone()[0]
            with read_capture(out) as reader:
                assert reader.header.source == {"slot_name": f"{table}_app", "system_identifier": system,
                                                "database": database}
                assert "".join(chr(r.data[0]) for r in pgoutput_records(reader)) == "BRIC"
        finally:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE slot_name LIKE %s", (f"{table}%",))


@pytest.mark.server
def test_another_server_or_database_is_refused(pg18, tmp_path):
    with pg18.connect() as conn:
        conn.execute("CREATE PUBLICATION src_db_pub")
        system = conn.execute("SELECT system_identifier::text FROM pg_control_system()").fetchone()[0]
        database = conn.execute("SELECT current_database()").fetchone()[0]
        settings = CaptureSettings(slot="src_db_slot", publication="src_db_pub")
        base = dict(proto_version=settings.protocol(pg18.version_num), server_version=pg18.version_num,
                    options=settings.options(pg18.version_num),
                    client_encoding=conn.execute("SHOW client_encoding").fetchone()[0])
        conn.execute("SELECT pg_create_logical_replication_slot('src_db_slot', 'pgoutput')")
        try:
            other_server = tmp_path / "other_server.rwcap"
            with CaptureWriter(other_server, CaptureHeader(**base, slot_name="src_db_slot", system_identifier="1",
                                                           database=database)):
                pass
            with pytest.raises(CaptureError, match=rf"^{other_server} was captured from the server with system "
                                                   rf"identifier 1, not this one \({system}\): resume it from that "
                                                   r"server \(--dsn\), or use another --out$"):
                LiveCapture(pg18.dsn, other_server, settings, create_slot=False).run(idle_exit=0.1)
            other_db = tmp_path / "other_db.rwcap"
            with CaptureWriter(other_db, CaptureHeader(**base, slot_name="src_db_slot", system_identifier=system,
                                                       database="shop")):
                pass
            with pytest.raises(CaptureError, match=rf"^{other_db} was captured from database 'shop', not "
                                                   rf"'{database}': resume it with a --dsn naming dbname=shop, "
                                                   "or use another --out$"):
                LiveCapture(pg18.dsn, other_db, settings, create_slot=False).run(idle_exit=0.1)
            # the same source: resumed (a header-only file: nothing in it yet)
            same = tmp_path / "same.rwcap"
            with CaptureWriter(same, CaptureHeader(**base, slot_name="src_db_slot", system_identifier=system,
                                                   database=database)):
                pass
            capture_ = LiveCapture(pg18.dsn, same, settings, create_slot=False)
            capture_.run(idle_exit=0.1)
            assert capture_.resumed_records == 0
        finally:
            conn.execute("SELECT pg_drop_replication_slot('src_db_slot')")
            conn.execute("DROP PUBLICATION src_db_pub")


def strip_source(path):
    """The capture file at ``path`` as a capture from before the header recorded its source."""
    with read_capture(path) as reader:
        header = reader.header
        records = [(r.lsn, r.xid, r.data) for r in pgoutput_records(reader)]
    path.unlink()
    old = CaptureHeader(proto_version=header.proto_version, server_version=header.server_version,
                        options=header.options, client_encoding=header.client_encoding)
    with CaptureWriter(path, old) as writer:
        writer.extend(records)


@pytest.mark.server
def test_a_file_whose_slot_does_not_exist_is_refused(pg18, tmp_path):
    out = tmp_path / "gone.rwcap"
    with pg18.connect() as conn:
        conn.execute("CREATE TABLE gone (id int PRIMARY KEY)")
        conn.execute("CREATE PUBLICATION gone_pub FOR TABLE gone")
        try:
            capture(pg18, out, "gone_slot", "gone_pub").run(idle_exit=0.2)
            conn.execute("INSERT INTO gone VALUES (1)")
            capture(pg18, out, "gone_slot", "gone_pub").run(idle_exit=0.3)
            # an older file (no source in its header) into a slot that does not exist: refused, not created
            strip_source(out)
            before = out.read_bytes()
            with pytest.raises(CaptureError, match=rf"^replication slot 'gone_apq' does not exist, and {out} "
                                                   r"already holds a capture \(from another slot\): a new slot "
                                                   r"would start now, and the changes between the file's end and "
                                                   r"now would be missing. Use the slot the file was captured "
                                                   r"from \(--slot\), or another --out for a new capture$"):
                capture(pg18, out, "gone_apq", "gone_pub").run(idle_exit=0.2)
            assert "gone_apq" not in slots(conn) and out.read_bytes() == before
            # and with its own slot it resumes as before
            conn.execute("INSERT INTO gone VALUES (2)")
            resumed = capture(pg18, out, "gone_slot", "gone_pub")
            resumed.run(idle_exit=0.3)
            assert resumed.resumed_records == 4
            with read_capture(out) as reader:
                assert reader.header.slot_name is None
                assert "".join(chr(r.data[0]) for r in pgoutput_records(reader) if r.data[:1] != b"R") == "BICBIC"
            # the file's own slot, dropped: its changes since are lost, so it is not re-created (a new file's
            # header names its slot)
            conn.execute("SELECT pg_drop_replication_slot('gone_slot')")
            named = tmp_path / "named.rwcap"
            capture(pg18, named, "gone_slot", "gone_pub").run(idle_exit=0.2)
            conn.execute("INSERT INTO gone VALUES (3)")
            capture(pg18, named, "gone_slot", "gone_pub").run(idle_exit=0.3)
            conn.execute("SELECT pg_drop_replication_slot('gone_slot')")
            with pytest.raises(CaptureError, match=rf"^replication slot 'gone_slot', which {named} was captured "
                                                   r"from, no longer exists: the changes since the file's end are "
                                                   r"lost with it; start a new capture file \(another --out\)$"):
                capture(pg18, named, "gone_slot", "gone_pub").run(idle_exit=0.2)
            assert "gone_slot" not in slots(conn)
        finally:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE slot_name LIKE 'gone%'")


@pytest.mark.server
def test_output_problems_are_found_before_the_slot_is_created(pg18, tmp_path):
    with pg18.connect() as conn:
        conn.execute("CREATE PUBLICATION out_pub")
        try:
            notes = tmp_path / "notes.md"
            notes.write_text("# my notes\n")
            with pytest.raises(CaptureError, match=rf"^{notes} at offset 0: not a readable capture file header: "
                                                   r".*: an existing file is resumed, so it must be a capture file "
                                                   r"\(name a new file to start a capture\)$"):
                capture(pg18, notes, "out_slot", "out_pub").run(idle_exit=0.1)
            assert notes.read_text() == "# my notes\n"
            missing = tmp_path / "nonexistent-dir" / "a.rwcap"
            with pytest.raises(CaptureError, match=rf"^cannot create {missing}: the directory {missing.parent} "
                                                   "does not exist$"):
                capture(pg18, missing, "out_slot", "out_pub").run(idle_exit=0.1)
            with pytest.raises(CaptureError, match=rf"^{tmp_path} is a directory, not a capture file"):
                capture(pg18, tmp_path, "out_slot", "out_pub").run(idle_exit=0.1)
            assert "out_slot" not in slots(conn)
        finally:
            conn.execute("DROP PUBLICATION out_pub")


def test_inputs_of_another_publication_are_not_one_stream(tmp_path):
    """A slot streams the changes of the publications a session asks for: files captured with other
    publication_names hold other tables, and one's transactions would be skipped as repeats of the other's.
    Refused by decode, the Spark jobs (open_inputs) and serve alike; the other pgoutput options go together."""
    from replwire.codec.serve.source import SourceError

    paths = {}
    for name, options in (("app", {"publication_names": '"app_pub"'}), ("binary", {"publication_names": '"app_pub"',
                                                                                   "binary": "true"}),
                          ("other", {"publication_names": '"other_pub"'}), ("unknown", {})):
        paths[name] = tmp_path / f"{name}.rwcap"
        with CaptureWriter(paths[name], CaptureHeader(proto_version=1, options=options, **SOURCE)):
            pass
    assert len(open_inputs([paths["app"], paths["unknown"], paths["binary"]])) == 3
    reason = r"the inputs are not one stream: .*app.rwcap was captured with publication_names '\"app_pub\"', " \
             r"this file with '\"other_pub\"'"
    with pytest.raises(CaptureFileError, match=reason):
        open_inputs([paths["app"], paths["unknown"], paths["other"]])
    with pytest.raises(SourceError, match=reason):
        Source.from_captures([paths["app"], paths["other"]])
