"""Values lose no information (issue 25, item 1): interval months/days/time, json/jsonb text and JSON null,
ranges, money, dates and timestamps outside Python's years, numeric scale, float NaN/±Infinity/-0 -- written
by ``replwire decode`` (JSON lines: the compiled row path and the Python codec, and the typed objects),
``--format debezium``, and kept by the typed values, in text and binary mode, on real PostgreSQL 15 and 18.

Every value is checked against the server itself (tests/support/lossless.py): its text under
``intervalstyle = iso_8601`` and timezone UTC, or the emitted text cast back by the server and compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal

import pytest
from click.testing import CliRunner

from replwire.codec import LSN, Assembler, Transaction
from replwire.codec.cli.main import main
from replwire.codec.stream import jsonl
from tests.support.lossless import COLUMNS, ROWS, Server, captured_fixture

pytestmark = pytest.mark.server


captured = captured_fixture("stream")


def _parse(line: str) -> dict:
    return json.loads(line, parse_float=Decimal)


def _check_lines(lines: list[str], said: Server, binary: bool, where: str) -> int:
    checked = 0
    inserts = [_parse(line) for line in lines if line.startswith("{")]
    inserts = [o for o in inserts if o["op"] == "insert"]
    assert len(inserts) == len(said.text), where
    for obj in inserts:
        row = obj["new"]
        assert set(row) == {"id", *COLUMNS}, where
        for column in COLUMNS:
            said.check(row["id"], column, row[column], binary, where)
            checked += 1
    return checked


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_decode_writes_every_value_as_the_server_has_it(captured, binary):
    captures, said = captured
    result = CliRunner().invoke(main, ["decode", captures[binary].path])
    assert result.exit_code == 0, result.output
    assert _check_lines(result.output.splitlines(), said, binary, "decode") >= len(ROWS) * len(COLUMNS)


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_the_python_codec_writes_the_same(captured, binary):
    captures, said = captured
    env = {**os.environ, "REPLWIRE_IMPL": "python"}
    python = subprocess.run([sys.executable, "-m", "replwire.codec.cli", "decode", captures[binary].path],
                            capture_output=True, text=True, env=env, check=True).stdout
    compiled = CliRunner().invoke(main, ["decode", captures[binary].path]).output
    assert python == "".join(line + "\n" for line in compiled.splitlines() if line.startswith("{"))
    _check_lines(python.splitlines(), said, binary, "python codec")


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_typed_objects_and_debezium_write_the_same_values(captured, binary):
    captures, said = captured
    assembler = Assembler(proto_version=1)
    typed = []
    for lsn, _, data in captures[binary].rows:
        for item in assembler.feed(data, int(LSN(lsn))):
            typed += [jsonl.ENCODE(obj) for obj in jsonl.objects(item)]
    _check_lines(typed, said, binary, "typed objects")

    result = CliRunner().invoke(main, ["decode", "--format", "debezium", captures[binary].path])
    assert result.exit_code == 0, result.output
    events = [_parse(line) for line in result.output.splitlines() if line.startswith("{")]
    afters = [e["after"] for e in events if e.get("op") == "c"]
    assert len(afters) == len(said.text)
    for row in afters:
        for column in COLUMNS:
            said.check(row["id"], column, row[column], binary, "debezium")


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_typed_values_keep_interval_parts_and_json_null(captured, binary):
    from replwire.codec.stream.value_types import Interval, JsonText

    captures, said = captured
    assembler = Assembler(proto_version=1)
    rows = {}
    for lsn, _, data in captures[binary].rows:
        for item in assembler.feed(data, int(LSN(lsn))):
            if isinstance(item, Transaction):
                for change in item.changes:
                    rows[change.new["id"]] = change.new
    parts = {r[0]: r[1:] for r in said.conn.execute(
        "SELECT id, extract(year FROM iv) * 12 + extract(month FROM iv), extract(day FROM iv), "
        "extract(hour FROM iv) * 3600000000 + extract(minute FROM iv) * 60000000 + extract(microseconds FROM iv) "
        "FROM v WHERE iv IS NOT NULL AND id < %s", (len(ROWS),))}
    for row_id, (months, days, micro) in parts.items():
        value = rows[row_id]["iv"]
        assert isinstance(value, Interval) and (value.months, value.days, value.microseconds) == (
            int(months), int(days), int(micro)), (row_id, value)
    assert rows[1]["j"] == JsonText("null") and rows[1]["jb"] == JsonText("null")  # JSON null
    assert rows[len(ROWS) - 1]["j"] is None and rows[len(ROWS) - 1]["jb"] is None  # SQL NULL
    assert rows[0]["jb"].load(parse_float=Decimal)["n"] == Decimal("1.000000000000000000001")
