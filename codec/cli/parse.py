"""``replwire parse``: one message given in hexadecimal, parsed and printed.

Strategy: read the bytes as programs print them (``0x``, psql's ``\\x``, spaces, colons), a usage error naming
the first character that is no hexadecimal digit; parse them with the codec the API exports
(:func:`replwire.codec.parse`, or :func:`replwire.codec.parse_envelope` for a walsender envelope frame)
and print the message's ``repr``, or the :class:`~replwire.codec.DecodeError` as a one-line error.
"""

from __future__ import annotations

import string
import sys

import click

from .. import DecodeError, parse, parse_envelope

__all__ = ["parse_command"]


@click.command("parse")
@click.argument("hex_bytes", metavar="HEX")
@click.option("--proto-version", type=click.IntRange(1, 4), default=1, show_default=True,
              help="pgoutput protocol version the bytes were sent under.")
@click.option("--in-stream", is_flag=True, help="The message is inside a Stream Start...Stop block.")
@click.option("--envelope", type=click.Choice(["server", "client"]),
              help="Parse a walsender CopyData payload sent by this side instead of a pgoutput message.")
@click.option("--encoding", default="UTF8", show_default=True,
              help="The connection's client encoding, which the Strings are in (LATIN1, SQL_ASCII, ...).")
def parse_command(hex_bytes: str, proto_version: int, in_stream: bool, envelope: str | None, encoding: str) -> None:
    """Parse one message given as HEX and print it.

    HEX may start with 0x or 0X, or with \\x as psql shows a bytea (the data column of
    pg_logical_slot_peek_binary_changes), and may hold spaces, line breaks and colons between the bytes.
    """
    data = _hex_bytes(hex_bytes)
    try:
        if envelope:
            message = parse_envelope(data, sender=envelope)
        else:
            message = parse(data, proto_version=proto_version, in_stream=in_stream, encoding=encoding)
    except (DecodeError, ValueError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    click.echo(repr(message))


def _hex_bytes(text: str) -> bytes:
    """The bytes ``text`` spells in hexadecimal, after an optional ``0x``, ``0X`` or ``\\x`` prefix, with
    whitespace and colons anywhere; anything else is a usage error naming the first character that is no
    hexadecimal digit (by its place in ``text``), or the odd count of digits."""
    prefix = len(text) - len(text.lstrip())
    if text[prefix:prefix + 2] in ("0x", "0X", "\\x"):
        prefix += 2
    for place, char in enumerate(text[prefix:], prefix + 1):
        if char not in string.hexdigits and not char.isspace() and char != ":":
            raise click.UsageError(f"HEX is not hexadecimal: {char!r} at character {place}")
    digits = "".join(text[prefix:].split()).replace(":", "")
    if len(digits) % 2:
        raise click.UsageError(f"HEX is not hexadecimal: an odd number of digits ({len(digits)}), not whole bytes")
    return bytes.fromhex(digits)
