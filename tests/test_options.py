"""pgoutput's options: one type reads them as a server does and spells them for one, from one table."""

from __future__ import annotations

import pytest

from replwire.codec.errors import ReplwireError
from replwire.codec.options import OptionsError, PgoutputOptions, as_arguments, boolean, streaming_mode
from replwire.schema.options import OPTIONS


def refusal(options: dict[str, str], server_version: int = 160000) -> tuple[str, str]:
    with pytest.raises(OptionsError) as raised:
        PgoutputOptions.from_request(options, server_version=server_version)
    return raised.value.sqlstate, str(raised.value)


def test_the_boolean_spellings_are_pgoutput_s():
    """defGetBoolean's: true/on and false/off, in any case -- not parse_bool's yes/no, 1/0 or prefixes."""
    assert [boolean("binary", v) for v in ("true", "ON", " True ", "false", "OFF")] == [True, True, True, False,
                                                                                         False]
    for value in ("yes", "1", "t", "no", "0", "f", ""):
        with pytest.raises(OptionsError, match="^binary requires a Boolean value$"):
            boolean("binary", value)
    assert [streaming_mode(v) for v in ("on", "true", "off", "Parallel")] == ["on", "on", "off", "parallel"]


def test_a_refusal_carries_pgoutput_s_message_and_sqlstate():
    assert issubclass(OptionsError, ReplwireError) and issubclass(OptionsError, ValueError)
    assert refusal({"publication_names": "p"}) == ("22023", "proto_version option missing")
    assert refusal({"proto_version": "5", "publication_names": "p"}) == (
        "0A000", "client sent proto_version=5 but server only supports protocol 4 or lower")
    assert refusal({"proto_version": "0", "publication_names": "p"}) == (
        "0A000", "client sent proto_version=0 but server only supports protocol 1 or higher")
    assert refusal({"proto_version": "1"}) == ("22023", "publication_names parameter missing")
    assert refusal({"proto_version": "1", "publication_names": "p", "streaming": "on"}) == (
        "22023", "requested proto_version=1 does not support streaming, need 2 or higher")
    assert refusal({"proto_version": "3", "publication_names": "p", "streaming": "parallel"}) == (
        "22023", "requested proto_version=3 does not support parallel streaming, need 4 or higher")
    assert refusal({"proto_version": "2", "publication_names": "p", "two_phase": "on"}) == (
        "22023", "requested proto_version=2 does not support two-phase commit, need 3 or higher")
    assert refusal({"proto_version": "1", "publication_names": "p", "origin": "some"}) == (
        "22023", 'unrecognized origin value: "some"')
    assert refusal({"proto_version": "1", "publication_names": "p", "color": "red"}) == (
        "22023", "unrecognized pgoutput option: color")


def test_a_server_refuses_an_option_its_pgoutput_does_not_know():
    for spec in OPTIONS:
        if spec.since_server > 100000:
            value = spec.values[-1] if spec.values else "false"
            assert refusal({"proto_version": "1", "publication_names": "p", spec.name: value},
                           spec.since_server - 1) == ("22023", f"unrecognized pgoutput option: {spec.name}")


@pytest.mark.parametrize("server_version", [100000, 140000, 150000, 160000, 180000])
def test_what_a_client_sends_is_what_the_server_reads(server_version):
    asked = PgoutputOptions(publications=("a", 'b"c'), streaming="on" if server_version >= 140000 else "off",
                            binary=server_version >= 140000, two_phase=server_version >= 150000)
    sent = asked.for_server(server_version)
    assert list(sent)[:2] == ["proto_version", "publication_names"]
    assert sent.get("streaming") == (None if server_version < 140000 else "on" if server_version >= 160000
                                     else "true")  # (a Boolean only, before PostgreSQL 16)
    read = PgoutputOptions.from_request(sent, server_version=server_version)
    assert (read.streaming, read.binary, read.two_phase) == (asked.streaming, asked.binary, asked.two_phase)
    assert as_arguments(sent)[:2] == ["proto_version", sent["proto_version"]]


def test_a_client_never_asks_what_the_server_refuses():
    with pytest.raises(OptionsError, match="does not support parallel streaming"):
        PgoutputOptions(proto_version=3, streaming="parallel").for_server(180000)
    with pytest.raises(OptionsError, match="^unrecognized pgoutput option: messages$"):
        PgoutputOptions(messages=True).for_server(130000)
    assert PgoutputOptions().protocol(150000) == 3
