"""Typed values: psycopg's loaders by type OID, text and binary alike, with the project's rules for domains,
enums, unknown types, ±infinity and unchanged TOAST.  Binary inputs are written here from the PostgreSQL
send functions' documented layouts, not produced by the code under test."""

from __future__ import annotations

import datetime as dt
import ipaddress
import pickle
import struct
import subprocess
import sys
import uuid
from decimal import Decimal

import pytest

from replwire.codec import INFINITY, NEG_INFINITY, UNCHANGED_TOAST, RawValue, Type
from replwire.codec.stream.value_types import Interval, JsonText
from replwire.codec.stream.values import ValueLoader, text_value


@pytest.fixture(scope="module")
def loader():
    return ValueLoader()


def numeric_binary(sign: int) -> bytes:  # ndigits, weight, sign, dscale (numeric_send)
    return struct.pack(">hhHh", 0, 0, sign, 0)


@pytest.mark.parametrize("kind, data, type_id, expected", [
    ("t", b"12345678901234567890.123456789", 1700, Decimal("12345678901234567890.123456789")),
    ("t", b"-Infinity", 1700, Decimal("-Infinity")),
    ("b", numeric_binary(0xD000), 1700, Decimal("Infinity")),
    ("b", numeric_binary(0xF000), 1700, Decimal("-Infinity")),
    ("b", struct.pack(">hhHhh", 1, 0, 0, 0, 42), 1700, Decimal("42")),
    ("t", b"2147483647", 23, 2147483647),
    ("b", struct.pack(">q", -(2**63)), 20, -(2**63)),
    ("t", b"t", 16, True),
    ("b", b"\x00", 16, False),
    ("t", b"2024-02-29", 1082, dt.date(2024, 2, 29)),
    ("t", b"2024-02-29 12:34:56.789", 1114, dt.datetime(2024, 2, 29, 12, 34, 56, 789000)),
    ("t", b"2024-02-29 12:34:56.789+05:30", 1184,
     dt.datetime(2024, 2, 29, 7, 4, 56, 789000, tzinfo=dt.timezone.utc)),
    ("b", struct.pack(">q", 0), 1184, dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)),
    ("t", b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", 2950, uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")),
    ("b", uuid.UUID(int=1).bytes, 2950, uuid.UUID(int=1)),
    # json/jsonb: the server's text, unparsed (issue 25)
    ("t", '{"a": [1, {"b": null}], "ü": "日本"}'.encode(), 3802, JsonText('{"a": [1, {"b": null}], "ü": "日本"}')),
    ("b", b"\x01" + b'{"k": 1}', 3802, JsonText('{"k": 1}')),  # jsonb_send: version byte 1, then the text
    ("t", b"[]", 114, JsonText("[]")),
    ("t", b"\\x00fffe", 17, b"\x00\xff\xfe"),
    ("b", b"\x00\xff\xfe", 17, b"\x00\xff\xfe"),
    ("t", b"{{1,2},{3,NULL}}", 1007, [[1, 2], [3, None]]),
    ("t", b'{"a b","c,d","\\"q\\"",NULL,"",\xc3\xbc}', 1009, ["a b", "c,d", '"q"', None, "", "ü"]),
    ("t", b"3 days 04:05:06.7", 1186, Interval(0, 3, 14_706_700_000)),  # months, days, microseconds apart
    ("t", b"1 year -2 mons +3 days -00:00:01", 1186, Interval(10, 3, -1_000_000)),
    ("b", struct.pack(">qii", -1, 2, -3), 1186, Interval(-3, 2, -1)),  # interval_send: time, days, months
    ("b", struct.pack(">q", -123456), 790, -123456),  # cash_send: the amount in the smallest unit
    ("t", b"192.168.0.1/24", 869, ipaddress.ip_interface("192.168.0.1/24")),
    ("t", b"10.0.0.0/8", 650, ipaddress.ip_network("10.0.0.0/8")),
    ("t", "Grüße".encode(), 25, "Grüße"),
])
def test_builtin_types_load_through_psycopg(loader, kind, data, type_id, expected):
    assert loader.load(kind, data, type_id) == expected


@pytest.mark.parametrize("kind", ["t", "b"])
def test_numeric_nan_is_a_decimal(loader, kind):
    value = loader.load(kind, b"NaN" if kind == "t" else numeric_binary(0xC000), 1700)
    assert isinstance(value, Decimal) and value.is_nan()


@pytest.mark.parametrize("kind, data, type_id, expected", [
    ("t", b"infinity", 1082, INFINITY),
    ("t", b"-infinity", 1082, NEG_INFINITY),
    ("t", b"infinity", 1114, INFINITY),
    ("t", b"-infinity", 1184, NEG_INFINITY),
    ("b", struct.pack(">i", 2**31 - 1), 1082, INFINITY),
    ("b", struct.pack(">i", -(2**31)), 1082, NEG_INFINITY),
    ("b", struct.pack(">q", 2**63 - 1), 1114, INFINITY),
    ("b", struct.pack(">q", -(2**63)), 1184, NEG_INFINITY),
])
def test_infinite_dates_and_timestamps_are_sentinels_not_crashes(loader, kind, data, type_id, expected):
    value = loader.load(kind, data, type_id)
    assert value is expected
    assert str(value) == ("infinity" if expected is INFINITY else "-infinity")
    assert NEG_INFINITY < dt.date(1, 1, 1) < dt.date(9999, 12, 31) < INFINITY
    assert INFINITY > dt.datetime(2024, 1, 1) and not INFINITY < dt.datetime(2024, 1, 1)
    assert pickle.loads(pickle.dumps(value)) is value


def test_a_value_psycopg_cannot_represent_is_kept_whole(loader):
    value = loader.load("t", b"4713-01-01 BC", 1082)
    assert isinstance(value, RawValue) and str(value) == "4713-01-01 BC" and value.type_id == 1082
    assert value.data == b"4713-01-01 BC" and "BC" in value.reason


def test_domains_resolve_to_their_base_type_through_type_messages(loader):
    posint = Type(type_id=16390, namespace="", name="int4")  # what the server sends for a domain (§10.1)
    assert loader.load("t", b"42", 16390, posint) == 42
    assert loader.load("b", struct.pack(">i", -7), 16390, posint) == -7
    int_array_domain = Type(type_id=16400, namespace="", name="_int4")
    assert loader.load("t", b"{1,2}", 16400, int_array_domain) == [1, 2]
    assert loader.resolve(16390, posint) == 23 and loader.resolve(16400, int_array_domain) == 1007


def test_enums_composites_and_unknown_types_stay_text_or_bytes(loader):
    mood = Type(type_id=16386, namespace="public", name="mood")
    assert loader.load("t", "très".encode(), 16386, mood) == "très"
    assert loader.load("b", "très".encode(), 16386, mood) == "très".encode()
    # a user type in another schema named like a built-in one is not the built-in one
    assert loader.load("t", b"42", 16500, Type(type_id=16500, namespace="public", name="int4")) == "42"
    pair = Type(type_id=16391, namespace="public", name="pair")
    assert loader.load("t", b'(7,"x y")', 16391, pair) == '(7,"x y")'
    assert loader.load("t", b"abc", 99999) == "abc"  # no Type message at all
    assert loader.load("b", b"\x01\x02", 99999) == b"\x01\x02"


def test_null_and_unchanged_toast_are_distinct(loader):
    assert loader.load("n", None, 25) is None
    toast = loader.load("u", None, 25)
    assert toast is UNCHANGED_TOAST and toast is not None and toast != None and bool(toast)  # noqa: E711
    assert text_value("u", None) is UNCHANGED_TOAST and text_value("n", None) is None
    assert repr(toast) == "UNCHANGED_TOAST" and pickle.loads(pickle.dumps(toast)) is toast


def test_codec_imports_without_psycopg_and_says_what_to_install():
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from replwire.codec import Assembler, TypedValuesUnavailable, build, Begin\n"
        "asm = Assembler(proto_version=1, typed=False)\n"
        "try:\n"
        "    Assembler(proto_version=1)\n"
        "except TypedValuesUnavailable as e:\n"
        "    print('refused:', e)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "refused: typed values need psycopg 3: pip install 'psycopg[binary]>=3.1' (replwire's 'values' extra)" \
        in result.stdout


def test_the_types_resolved_without_psycopg_are_psycopg_builtins():
    """ValueLoader resolves these OIDs without importing psycopg: each is a type psycopg's registry has, by
    that OID, so it resolves as it would through the registry."""
    from psycopg.postgres import types as registry

    from replwire.codec.stream.values import _BUILTIN

    for oid in _BUILTIN:
        info = registry.get(oid)
        assert info is not None and info.oid == oid, oid


def test_the_arrays_resolved_without_psycopg_are_psycopg_builtin_arrays():
    """The arrays ValueLoader resolves without importing psycopg are the arrays of those types psycopg's
    registry has, by that OID, with that element type."""
    from psycopg.postgres import types as registry

    from replwire.codec.stream.values import _BUILTIN, _BUILTIN_ARRAYS

    for oid, element in _BUILTIN_ARRAYS.items():
        info = registry.get(oid)
        assert info is not None and info.array_oid == oid and info.oid == element, oid
    assert {registry.get(oid).array_oid for oid in _BUILTIN} == set(_BUILTIN_ARRAYS)


def test_decoding_common_types_does_not_import_psycopg():
    code = ("import sys\n"
            "from replwire.codec import Assembler, build, Begin, Commit, Insert, Relation, RelationColumn, LSN, "
            "Timestamp, TupleColumn\n"
            "asm = Assembler(proto_version=1)\n"
            "cols = [RelationColumn(flags=1, name='id', type_id=23, type_modifier=-1),"
            " RelationColumn(flags=0, name='t', type_id=25, type_modifier=-1)]\n"
            "for m in [Begin(final_lsn=LSN(1), commit_time=Timestamp(0), xid=1),"
            " Relation(relation_id=1, namespace='s', name='t', replica_identity='d', columns=cols),"
            " Insert(relation_id=1, new=[TupleColumn.text('1'), TupleColumn.text('x')]),"
            " Commit(flags=0, commit_lsn=LSN(1), end_lsn=LSN(2), commit_time=Timestamp(0))]:\n"
            "    for t in asm.feed(build(m, proto_version=1)):\n"
            "        print(t.changes[0].new)\n"
            "print('psycopg' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["{'id': 1, 't': 'x'}", "False"]
