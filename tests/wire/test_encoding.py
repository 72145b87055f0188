"""Strings in the connection's client encoding: the ``encoding`` parse/build context, on every path.

The hand-checked vectors spell the bytes out from the encodings' own tables (ISO 8859-1 puts ``é`` at
0xE9, Windows-1252 puts ``€`` at 0x80, Shift JIS writes ``表`` as 0x95 0x5C, whose second byte is ASCII's
backslash), and the properties are the fuzz harness's invariants in each encoding, so the fast codec is
checked against the reference path throughout.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replwire.codec import DecodeError, EncodeError, Message, Origin, Relation, RelationColumn, Type, parse
from replwire.codec.testing import fuzz, strategies
from replwire.codec.testing.strategies import Context
from replwire.codec.wire import fast, interpreter, reference
from replwire.schema.encodings import text_codec

CODECS = (reference, fast)
ENCODINGS = ("LATIN1", "SQL_ASCII", "WIN1252", "SJIS", "EUC_JP")


def relation(name: bytes, column: bytes = b"id") -> bytes:
    """A protocol-1 Relation message (OID 16384 in public) named ``name``, with one int4 column."""
    return (b"R" + (16384).to_bytes(4, "big") + b"public\0" + name + b"\0d" + (1).to_bytes(2, "big")
            + b"\x01" + column + b"\0" + (23).to_bytes(4, "big") + (-1).to_bytes(4, "big", signed=True))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.__name__.rsplit(".", 1)[-1])
@pytest.mark.parametrize(("encoding", "wire", "text"), [
    ("LATIN1", b"caf\xe9", "café"),
    ("latin-1", b"caf\xe9", "café"),
    ("WIN1252", b"\x80uro", "€uro"),
    ("SJIS", b"\x95\x5c", "表"),
    ("UTF8", b"caf\xc3\xa9", "café"),
    ("SQL_ASCII", b"caf\xe9", "caf\udce9"),
    ("SQL_ASCII", b"caf\xc3\xa9", "caf\udcc3\udca9"),
])
def test_relation_name_in_client_encoding(codec, encoding, wire, text):
    data = relation(wire, column=wire)
    message = codec.parse(data, proto_version=1, encoding=encoding)
    assert isinstance(message, Relation)
    assert (message.namespace, message.name, message.columns[0].name) == ("public", text, text)
    assert codec.build(message, proto_version=1, encoding=encoding) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.__name__.rsplit(".", 1)[-1])
def test_latin1_name_is_not_utf8_issue_17(codec):
    with pytest.raises(DecodeError) as failure:
        codec.parse(relation(b"caf\xe9"), proto_version=1)
    assert str(failure.value) == ("Relation.name at offset 12 (tag 'R', proto 1): invalid UTF-8 at byte 3 of the "
                                  "string")
    with pytest.raises(DecodeError) as failure:
        codec.parse(relation(b"\x95"), proto_version=1, encoding="SJIS")  # a lead byte without its trail byte
    assert str(failure.value) == "Relation.name at offset 12 (tag 'R', proto 1): invalid SJIS at byte 0 of the string"


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.__name__.rsplit(".", 1)[-1])
@pytest.mark.parametrize(("encoding", "name", "reason"), [
    ("LATIN1", "€", "Relation.name: not encodable as LATIN1 at character 0"),
    ("SQL_ASCII", "é", "Relation.name: not encodable as SQL_ASCII at character 0"),
    ("SQL_ASCII", "a\ud800", "Relation.name: not encodable as SQL_ASCII at character 1"),
])
def test_build_refuses_text_the_encoding_cannot_carry(codec, encoding, name, reason):
    message = Relation(relation_id=1, namespace="", name=name, replica_identity="d",
                       columns=[RelationColumn(flags=0, name="a", type_id=23, type_modifier=-1)])
    with pytest.raises(EncodeError) as failure:
        codec.build(message, proto_version=1, encoding=encoding)
    assert str(failure.value) == reason


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.__name__.rsplit(".", 1)[-1])
@pytest.mark.parametrize("encoding", ["utf-16", "ascii", "EUC_TW", "no such thing", None, b"UTF8"])
def test_encoding_must_be_a_client_encoding(codec, encoding):
    with pytest.raises(ValueError, match="encoding must"):
        codec.parse(relation(b"t"), proto_version=1, encoding=encoding)
    with pytest.raises(ValueError, match="encoding must"):
        codec.build(Origin(origin_lsn=1, name="o"), proto_version=1, encoding=encoding)


def test_postgresql_and_python_names_name_one_codec():
    assert {text_codec(n) for n in ("LATIN1", "latin1", "latin-1", "ISO-8859-1")} == {"iso8859-1"}
    assert {text_codec(n) for n in ("UTF8", "utf-8", "UTF-8")} == {"utf-8"}
    assert text_codec("WIN1252") == text_codec("cp1252") == "cp1252"
    assert text_codec("KOI8R") == "koi8-r"
    assert text_codec("SQL_ASCII") == text_codec("sql_ascii") == "sql_ascii"


_NO_NUL = st.binary(max_size=40).map(lambda b: b.replace(b"\0", b"\x01"))


@given(_NO_NUL, _NO_NUL, _NO_NUL)
def test_sql_ascii_round_trips_every_byte_string(name, prefix, gid):
    """A SQL_ASCII database sends its bytes unconverted: any NUL-free bytes must come back exactly."""
    datas = [relation(name, column=prefix),
             b"O" + (7).to_bytes(8, "big") + name + b"\0",
             b"M\x01" + (9).to_bytes(8, "big") + prefix + b"\0" + (1).to_bytes(4, "big") + b"\xff",
             b"Y" + (16385).to_bytes(4, "big") + prefix + b"\0" + name + b"\0",
             b"K\x00" + b"".join(n.to_bytes(8, "big") for n in (1, 2, 3)) + (5).to_bytes(4, "big") + gid + b"\0"]
    for data in datas:
        assert fuzz.check(Context("logical", 3, encoding="SQL_ASCII"), data) is not None  # fast == reference too
    assert interpreter.build(parse(datas[0], proto_version=1, encoding="SQL_ASCII"), 1, False, "sql_ascii") == datas[0]


@given(st.sampled_from(ENCODINGS).flatmap(lambda e: strategies.cases(layer="logical", encoding=e)))
def test_parse_build_round_trip_in_each_encoding(case):
    assert case.context.encoding in ENCODINGS
    fuzz.check_case(case)


SEEDS = [(Context("logical", 1, encoding=e), relation(w)) for e, w in
         (("LATIN1", b"caf\xe9"), ("SJIS", b"\x95\x5c\x95\x5c"), ("SQL_ASCII", b"\xff\xfe"), ("EUC_JP", b"\xa4\xa2"))]
SEEDS += [(Context("logical", 2, True, encoding=e), b"M" + (7).to_bytes(4, "big") + bytes(9) + w + b"\0" + bytes(4))
          for e, w in (("WIN1252", b"\x80\x81"), ("SJIS", b"\x82\xa0"))]


@given(strategies.mutants(SEEDS))
def test_decoder_invariant_in_each_encoding(mutant):
    fuzz.check(*mutant)  # a message that rebuilds to the same bytes, or the same DecodeError from every codec


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.__name__.rsplit(".", 1)[-1])
@pytest.mark.parametrize(("message", "data"), [
    (Origin(origin_lsn=1, name="naïve"), b"O" + (1).to_bytes(8, "big") + b"na\xefve\0"),
    (Type(type_id=16400, namespace="schéma", name="tÿpe"), b"Y" + (16400).to_bytes(4, "big") + b"sch\xe9ma\0t\xffpe\0"),
    (Message(flags=1, lsn=5, prefix="préfixe", content=b"\xe9"),
     b"M\x01" + (5).to_bytes(8, "big") + b"pr\xe9fixe\0" + (1).to_bytes(4, "big") + b"\xe9"),
])
def test_every_kind_of_string_follows_the_context(codec, message, data):
    """Namespaces, type names, prefixes and origins alike (LATIN1: one byte per character, ISO 8859-1)."""
    assert codec.build(message, proto_version=1, encoding="LATIN1") == data
    assert codec.parse(data, proto_version=1, encoding="LATIN1") == message
