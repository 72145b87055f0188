"""The stream layer in a client encoding other than UTF-8: the decoder, the assembler and typed values.

Bytes are spelled from ISO 8859-1 (``é`` is 0xE9, ``è`` 0xE8, ``ï`` 0xEF); the real-server checks are in
``test_encoding_server.py``.
"""

from __future__ import annotations

import pytest

from replwire.codec import Assembler, DecodeError, Decoder, Transaction
from replwire.codec.stream.routing import Router
from replwire.codec.stream.value_types import JsonText
from replwire.codec.stream.values import ValueLoader, text_value


def relation(name: bytes, columns: list[tuple[bytes, int]]) -> bytes:
    out = b"R" + (16384).to_bytes(4, "big") + b"public\0" + name + b"\0d" + len(columns).to_bytes(2, "big")
    for column, type_id in columns:
        out += b"\x01" + column + b"\0" + type_id.to_bytes(4, "big") + (-1).to_bytes(4, "big", signed=True)
    return out


def insert(*values: bytes) -> bytes:
    out = b"I" + (16384).to_bytes(4, "big") + b"N" + len(values).to_bytes(2, "big")
    for value in values:
        out += b"t" + len(value).to_bytes(4, "big") + value
    return out


BEGIN = b"B" + (0x1000).to_bytes(8, "big") + bytes(8) + (700).to_bytes(4, "big")
COMMIT = b"C\x00" + (0x1000).to_bytes(8, "big") + (0x1010).to_bytes(8, "big") + bytes(8)
STREAM = [BEGIN, relation(b"caf\xe9", [(b"na\xefve", 25), (b"n", 23)]), insert(b"cr\xe8me", b"7"), COMMIT]


def test_decoder_reads_names_in_its_encoding():
    decoder = Decoder(proto_version=1, encoding="LATIN1")
    assert decoder.encoding == "iso8859-1"
    decoder.feed(BEGIN)
    assert decoder.feed(STREAM[1]).name == "café"
    with pytest.raises(DecodeError, match="invalid UTF-8 at byte 3"):
        Decoder(proto_version=1).feed(STREAM[1])
    with pytest.raises(ValueError, match="encoding must"):
        Decoder(proto_version=1, encoding="utf-16")


def test_router_state_keeps_the_encoding():
    decoder = Decoder(proto_version=1, encoding="SQL_ASCII")
    resumed = Router.from_state(Router(decoder).state()).decoder
    assert resumed.encoding == "sql_ascii"


@pytest.mark.parametrize("typed", [True, False])
def test_assembler_reads_names_and_values_in_its_encoding(typed):
    assembler = Assembler(proto_version=1, encoding="LATIN1", typed=typed)
    items = [item for data in STREAM for item in assembler.feed(data)]
    (transaction,) = items
    assert isinstance(transaction, Transaction)
    with transaction:
        (change,) = list(transaction.changes)
    assert (change.table, change.new) == ("café", {"naïve": "crème", "n": 7 if typed else "7"})


@pytest.mark.parametrize(("encoding", "kind", "type_id", "data", "value"), [
    ("LATIN1", "t", 25, b"cr\xe8me", "crème"),  # text
    ("LATIN1", "b", 25, b"cr\xe8me", "crème"),  # text in binary: textsend converts it too
    ("LATIN1", "t", 1043, b"\xe9", "é"),  # varchar
    ("LATIN1", "t", 1042, b"\xe9 ", "é "),  # bpchar
    ("LATIN1", "t", 19, b"\xe9", "é"),  # name
    ("LATIN1", "t", 1009, b'{\xe9t\xe9,"a b"}', ["été", "a b"]),  # text[]
    ("LATIN1", "t", 114, b'{"cl\xe9": "\xe0"}', JsonText('{"clé": "à"}')),  # json: the server's text
    ("LATIN1", "t", 3802, b'{"cl\xe9": 1}', JsonText('{"clé": 1}')),  # jsonb
    ("LATIN1", "b", 3802, b'\x01{"cl\xe9": 1}', JsonText('{"clé": 1}')),  # binary: a version byte, then text
    ("LATIN1", "t", 3614, b"'\xe9t\xe9'", "'été'"),  # tsvector: psycopg has no loader, so its text
    ("WIN1252", "t", 25, b"\x80", "€"),
    ("SQL_ASCII", "t", 25, b"cr\xe8me", "cr\udce8me"),
    ("SQL_ASCII", "t", 1009, b"{a,b}", ["a", "b"]),
])
def test_typed_values_in_the_client_encoding(encoding, kind, type_id, data, value):
    assert ValueLoader(encoding).load(kind, data, type_id) == value


def test_values_of_unknown_types_and_untyped_values_are_text_in_the_encoding():
    assert ValueLoader("LATIN1").load("t", b"\xe9", 16500) == "é"  # an enum, say: no Type message known
    assert text_value("t", b"\xe9", "LATIN1") == "é"
    assert text_value("t", b"\xc3\xa9") == "é"

