"""The ``replwire`` command line.

Strategy: a click group; each subcommand is a thin shell over the public API and reports bad input as a
one-line error with exit status 2 (usage) or 1 (data), never a traceback.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version

import click

from .errors import DecodeError
from .reference import parse, parse_envelope


def _version() -> str:
    try:
        return version("replwire")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), prog_name="replwire")
def main() -> None:
    """replwire: the PostgreSQL logical replication wire format (pgoutput v1-v4), parsed and built."""


@main.command("parse")
@click.argument("hex_bytes", metavar="HEX")
@click.option("--proto-version", type=click.IntRange(1, 4), default=1, show_default=True,
              help="pgoutput protocol version the bytes were sent under.")
@click.option("--in-stream", is_flag=True, help="The message is inside a Stream Start...Stop block.")
@click.option("--envelope", type=click.Choice(["server", "client"]),
              help="Parse a walsender CopyData payload sent by this side instead of a pgoutput message.")
def parse_command(hex_bytes: str, proto_version: int, in_stream: bool, envelope: str | None) -> None:
    """Parse one message given as HEX (spaces allowed) and print it."""
    try:
        data = bytes.fromhex(hex_bytes.replace(" ", "").replace(":", ""))
    except ValueError as error:
        raise click.UsageError(f"HEX is not hexadecimal: {error}") from None
    try:
        if envelope:
            message = parse_envelope(data, sender=envelope)
        else:
            message = parse(data, proto_version=proto_version, in_stream=in_stream)
    except (DecodeError, ValueError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    click.echo(repr(message))


if __name__ == "__main__":  # pragma: no cover
    main()
