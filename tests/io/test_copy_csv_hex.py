"""The data column of a COPY-CSV row is a bytea in hex: the compiled reader decodes it sixteen digits at a time,
and must read exactly what ``binascii.unhexlify`` (the Python reader's) reads — digits in either case, and a
row with any other byte anywhere refused with the Python reader's error."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from replwire.codec import LSN, Begin, Commit, Insert, Relation, RelationColumn, Timestamp, TupleColumn, build
from replwire.codec.wire.fast import COMPILED

REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")

pytestmark = pytest.mark.skipif(COMPILED is None, reason="the compiled codec is not built here")

_TEXTS = ["", "a", "0123456789abcdef" * 3, "\"quoted\" \\ back\tslash\n", "é∑😀" * 5, "x" * 301]


def _rows() -> list[tuple[int, bytes]]:
    """A transaction inserting a row of each text above (data of 1 to several hundred bytes, so that the
    sixteen-digit blocks end at every offset), as (LSN, message) rows."""
    relation = Relation(relation_id=16390, namespace="public", name="t", replica_identity="d",
                        columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1),
                                 RelationColumn(flags=0, name="v", type_id=25, type_modifier=-1)])
    messages = [Begin(final_lsn=LSN(0x2000), commit_time=Timestamp(7), xid=740), relation,
                *(Insert(relation_id=16390, new=[TupleColumn.text(str(i)), TupleColumn.text(text)])
                  for i, text in enumerate(_TEXTS)),
                Commit(flags=0, commit_lsn=LSN(0x2000), end_lsn=LSN(0x2010), commit_time=Timestamp(7))]
    return [(0x1000 + i, build(m, proto_version=1)) for i, m in enumerate(messages)]


def _csv(rows: list[tuple[int, str]]) -> bytes:
    return b"".join(f"{LSN(lsn)},740,\\x{digits}\n".encode() for lsn, digits in rows)


def _decode(path, python: bool = False) -> tuple[int, str, str]:
    env = {key: value for key, value in os.environ.items() if key != "REPLWIRE_IMPL"}
    if python:
        env["REPLWIRE_IMPL"] = "python"
    result = subprocess.run([REPLWIRE, "decode", str(path), "--proto-version", "1"], capture_output=True,
                            text=True, timeout=120, env=env)
    return result.returncode, result.stdout, result.stderr


def test_digits_in_either_case_read_as_the_python_reader_reads_them(tmp_path):
    rng = random.Random(7)
    lower, mixed = tmp_path / "lower.csv", tmp_path / "mixed.csv"
    rows = [(lsn, data.hex()) for lsn, data in _rows()]
    lower.write_bytes(_csv(rows))
    mixed.write_bytes(_csv([(lsn, "".join(c.upper() if rng.random() < 0.5 else c for c in digits))
                            for lsn, digits in rows]))
    expected = _decode(lower, python=True)
    assert expected[0] == 0 and expected[1].count('"op":"insert"') == len(_TEXTS)
    assert _decode(lower) == expected
    assert _decode(mixed) == expected


# (the place of the bad byte in the longest Insert's digits: each place of a block of sixteen, and the rest)
@pytest.mark.parametrize(("place", "byte"), [(0, "g"), (1, ":"), (7, "/"), (14, "@"), (15, "`"), (16, "G"),
                                             (17, "\u00e9"), (31, " "), (32, "\x7f"), (-1, "h"), (-2, "Z")])
def test_a_row_with_a_non_digit_anywhere_is_refused_as_the_python_reader_refuses_it(tmp_path, place, byte):
    rows = [(lsn, data.hex()) for lsn, data in _rows()]
    at = len(rows) - 2  # the longest Insert
    digits = rows[at][1]
    place %= len(digits)
    rows[at] = (rows[at][0], digits[:place] + byte + digits[place + 1:])
    path = tmp_path / "bad.csv"
    path.write_bytes(_csv(rows))
    expected = _decode(path, python=True)
    assert expected[0] == 1 and "not an (lsn, xid, data) row" in expected[2]
    assert _decode(path) == expected
