"""A user's program type-checks against the installed package under ``mypy --strict``, and a wrong one does not.

The package is built as a wheel and unpacked into a directory mypy reads as site-packages (through the
interpreter's ``sys.path``), so this is what a user's type checker sees: the ``py.typed`` markers, and the
message classes' fields from their ``if TYPE_CHECKING:`` blocks.  Those blocks are written from the
declarations (``python -m replwire.codec.wire.gen``); the last test fails when they are stale.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import zipfile

import pytest

from replwire.codec import messages
from replwire.codec.wire.gen import annotations

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: Reads attributes, does LSN and Timestamp arithmetic, parses and builds, and runs a Decoder and an
#: Assembler; the narrowing of a parse result is ``isinstance`` or ``match``.
GOOD = '''
from datetime import timedelta

from replwire.codec import (
    LSN, Assembler, Begin, Change, Commit, Decoder, Faults, Insert, Relation, RelationColumn, ServerAddress,
    Timestamp, Transaction, TupleColumn, Update, WireMessage, XLogData, build, build_envelope, parse,
    parse_envelope, serving,
)


def describe(message: WireMessage) -> str:
    if isinstance(message, Begin):
        return f"begin {message.xid} at {message.final_lsn}, {message.commit_time.to_datetime():%Y}"
    if isinstance(message, Insert):
        first = message.new[0]
        return f"insert {first.kind} {first.data.hex() if first.data is not None else '-'}"
    match message:
        case Relation(columns=columns):
            return ",".join(column.name for column in columns if column.is_key)
        case Commit(end_lsn=end_lsn):
            return f"commit up to {end_lsn}"
    return type(message).__name__


begin = Begin(final_lsn=LSN("0/169E5A8"), commit_time=Timestamp("2022-08-15T11:06:05.6258+00:00"), xid=787)
next_lsn: LSN = LSN(begin.final_lsn + 0x28)
lag: int = next_lsn - begin.final_lsn
later: Timestamp = Timestamp(begin.commit_time.to_datetime() + timedelta(seconds=1))
assert lag == 0x28 and later - begin.commit_time == 1_000_000

relation = Relation(relation_id=16384, namespace="public", name="t", replica_identity="d",
                    columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1)])
insert = Insert(relation_id=16384, new=[TupleColumn.text("1")])
update = Update(relation_id=16384, new=[TupleColumn.text("2")])
old: list[TupleColumn] | None = update.old
data: bytes | None = insert.new[0].data
name: str = relation.columns[0].name
commit = Commit(commit_lsn=LSN(begin.final_lsn), end_lsn=next_lsn, commit_time=begin.commit_time)

stream: list[bytes] = [build(m, proto_version=1) for m in (begin, relation, insert, commit)]
for raw in stream:
    print(describe(parse(raw, proto_version=1)))

frame = build_envelope(XLogData(data_start=begin.final_lsn, wal_end=next_lsn, send_time=later, data=stream[0]))
envelope = parse_envelope(frame)
if isinstance(envelope, XLogData):
    payload: bytes = envelope.data

decoder = Decoder(proto_version=1)
decoded: list[WireMessage] = [decoder.feed(raw) for raw in stream]
assembler = Assembler(proto_version=1, typed=False)
for raw in stream:
    for item in assembler.feed(raw):
        if isinstance(item, Transaction):
            confirm: LSN = item.end_lsn
            changes: list[Change] = list(item.changes)
            print(confirm, [(change.op, change.new) for change in changes])

with serving([begin, relation, insert, commit], proto_version=1, faults=Faults(delay=0.01)) as address:
    served: ServerAddress = address
    conninfo: str = address.conninfo(dbname="app", password=None)
    port: int = served.port
'''

#: Each line is an error the user's type checker must report.
BAD = '''
from replwire.codec import LSN, Begin, Relation, Timestamp, parse

begin = Begin(final_lsn=LSN(1), commit_time=Timestamp(0), xid=1)
print(begin.final_lsnn)
print(parse(b"", proto_version=1).final_lsn)
column_name: int = Relation(relation_id=1, namespace="", name="", replica_identity="d", columns=[]).columns[0].name
Begin(final_lsn=LSN(1), commit_time=Timestamp(0))
'''

BAD_ERRORS = [
    ('"Begin" has no attribute "final_lsnn"', "attr-defined"),
    ('"WireMessage" has no attribute "final_lsn"', "attr-defined"),
    ('Incompatible types in assignment (expression has type "str", variable has type "int")', "assignment"),
    ('Missing named argument "xid" for "Begin"', "call-arg"),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The built wheel, unpacked: the package as a user installs it."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(out), str(ROOT)], check=True, cwd=out)
    (wheel,) = out.glob("replwire-*.whl")
    target = tmp_path_factory.mktemp("site")
    zipfile.ZipFile(wheel).extractall(target)
    return target


def mypy_strict(site: pathlib.Path, program: str, tmp_path: pathlib.Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "program.py").write_text(textwrap.dedent(program))
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-color-output", "--show-error-codes",
         "--cache-dir", str(site.parent / "mypy-cache"), "program.py"],
        capture_output=True, text=True, cwd=tmp_path, env=env)


def test_a_user_program_type_checks_strictly(site: pathlib.Path, tmp_path: pathlib.Path) -> None:
    result = mypy_strict(site, GOOD, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success")
    ran = subprocess.run([sys.executable, "program.py"], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(site)})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[:2] == ["begin 787 at 0/169E5A8, 2022", "id"]


def test_a_wrong_user_program_is_rejected(site: pathlib.Path, tmp_path: pathlib.Path) -> None:
    result = mypy_strict(site, BAD, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    errors = [line for line in result.stdout.splitlines() if ": error: " in line]
    assert len(errors) == len(BAD_ERRORS), result.stdout
    for line, (text, code) in zip(errors, BAD_ERRORS):
        assert text in line and line.endswith(f"[{code}]"), line


def test_the_type_checking_blocks_match_the_declarations() -> None:
    path = pathlib.Path(messages.__file__)
    assert annotations.render(path.read_text(encoding="utf-8")) == path.read_text(encoding="utf-8"), (
        f"the TYPE_CHECKING blocks of {path.name} are stale: run {annotations.COMMAND}")


def test_a_stale_block_is_found_and_rewritten() -> None:
    source = pathlib.Path(messages.__file__).read_text(encoding="utf-8")
    stale = source.replace("        final_lsn: LSN\n", "        final_lsn: int\n", 1)
    assert stale != source
    assert annotations.render(stale) == source
    assert annotations.render(source.replace("        final_lsn: LSN\n", "", 1)) == source
