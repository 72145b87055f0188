"""Spark's columns lose no value either (issue 25, item 1): the change rows' JSON images (``new``) and the
typed table columns of the lossless workload (tests/support/lossless.py), captured from real PostgreSQL 15
and 18 servers in text and binary mode, read through a real Spark session, every value checked against the
server itself (its text under ``intervalstyle = iso_8601`` and timezone UTC, or a server-side cast back)."""

from __future__ import annotations

import json
import math
from decimal import Decimal

import pytest

from tests.support.lossless import COLUMNS, Server, captured_fixture

pytestmark = pytest.mark.server
pytest.importorskip("pyspark")


captured = captured_fixture("spark")


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_change_rows_json_keeps_every_value(spark, captured, binary):
    captures, said = captured
    rows = spark.read.format("replwire").load(captures[binary].path).collect()
    news = [json.loads(r.new, parse_float=Decimal) for r in rows if r.op == "insert"]
    assert len(news) == len(said.text)
    for new in news:
        for column in COLUMNS:
            said.check(new["id"], column, new[column], binary, "spark new")


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_typed_columns_keep_every_value(spark, captured, binary):
    captures, said = captured
    table = spark.read.format("replwire").option("table", "public.v").load(captures[binary].path)
    types = dict(table.dtypes)
    assert types["iv"] == types["j"] == types["jb"] == types["r4"] == types["rts"] == "string"
    assert types["n2"] == "decimal(12,4)" and types["f4"] == "float" and types["f8"] == "double"
    rows = table.collect()
    assert len(rows) == len(said.text)
    checked = 0
    for row in rows:
        row_id, odd = row["id"], row["_unrepresentable"] or {}
        for column in COLUMNS:
            value, text = row[column], said.text[row_id][column]
            what = (binary, row_id, column, value, text, odd.get(column))
            if text is None:
                assert value is None and column not in odd, what
                continue
            if column in odd:  # no Spark value: the server's text, exactly
                assert value is None and odd[column] == text, what
                assert column in Server.DATES or column == "n2", what
            elif column in ("f4", "f8"):
                assert isinstance(value, float), what
                said.check(row_id, column, repr(value) if math.isfinite(value) else str(value), binary, "spark",
                           exact=column == "f8")
                if text == "-0":
                    assert math.copysign(1, value) < 0, what
            elif column == "n2":
                assert isinstance(value, Decimal) and format(value, "f") == text, what
            elif column in Server.DATES:
                assert said.same(COLUMNS[column], column, row_id, value.isoformat()), what
            elif column == "m" and binary:
                said.check(row_id, column, int(value), binary, "spark")
            elif column in ("ivs", "jbs"):
                assert list(value) == said.arrays[row_id][column], what
            else:  # interval (ISO 8601), json, jsonb, ranges, numeric, text-mode money: the server's text
                assert value == text, what
            checked += 1
    assert checked > 60
