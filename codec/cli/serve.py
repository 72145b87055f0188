"""``replwire serve``: play capture files (or generated transactions) over the replication protocol.

Strategy: a thin shell over :class:`~replwire.codec.serve.server.Server`: it reads the captures' headers and
index first (a broken file is an error before anything listens), says where it listens, what clients can
ask for and, off loopback, that clients need the password; then logs one line per connection event until
Ctrl-C.
"""

from __future__ import annotations

import pathlib
import sys
import threading

import click

from ...schema import highest_proto_version
from ..serve import Faults, InputsRefused, ServeError, Server, ServeSettings, Source, SourceError
from ..serve.source import NeedsProtoVersion
from ..serve.walsender import version_text
from ._common import count_noun, not_a_capture_file

__all__ = ["serve_command"]


def _listen(value: str) -> tuple[str, int]:
    """``--listen``'s host and port (a missing host: loopback), or a usage error saying what is wrong."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise click.BadParameter(f"expected HOST:PORT, e.g. 127.0.0.1:5433, not {value!r}", param_hint="--listen")
    if not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"port {port} is out of range (0-65535; 0: any free port)", param_hint="--listen")
    return host.strip("[]") or "127.0.0.1", int(port)


def _generated(count: int, seed: int, server_version: int | None) -> Source:
    from ..testing.workloads import generate  # needs Hypothesis (the fuzz or test extra)

    stream = generate(count, seed)
    click.echo("-- the tables of the generated transactions:")
    for statement in stream.ddl:
        click.echo(f"{statement};")
    return Source.from_messages(stream.messages, proto_version=stream.proto_version, options=stream.options,
                                server_version=server_version or 180000)


def _server_version(value: int | None) -> int | None:
    if value is None:
        return None
    return value * 10000 if value < 100 else value


@click.command("serve")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=pathlib.Path))
@click.option("--listen", default="127.0.0.1:5433", show_default=True, metavar="HOST:PORT",
              help="Where to listen (port 0: any free port). Off loopback a --password is required.")
@click.option("--server-version", type=click.IntRange(10, 999999),
              help="The server_version told to clients (18, or 180004); default: the captures' server's. A "
                   "PostgreSQL subscriber asks for the highest protocol that version speaks.")
@click.option("--password", envvar="REPLWIRE_SERVE_PASSWORD", show_envvar=True,
              help="Require this password (SCRAM-SHA-256). Prefer the environment variable.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="Accept TLS (clients' sslmode=require and up) with this PEM certificate (chain); needs --tls-key. "
                   "Clients off loopback must then use TLS.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="The PEM private key of --tls-cert.")
@click.option("--allow-plaintext", is_flag=True,
              help="With TLS, accept connections without it from addresses off loopback too.")
@click.option("--disconnect-after", type=click.IntRange(1), metavar="N",
              help="Drop the connection once, after N XLogData messages (counted over all connections).")
@click.option("--disconnect-every", type=click.IntRange(1), metavar="N",
              help="Drop every connection after each N XLogData messages it was sent.")
@click.option("--delay", type=click.FloatRange(min=0), default=0.0, show_default=True, metavar="SECONDS",
              help="Wait this long before each XLogData message.")
@click.option("--keepalive-after-unpositioned", is_flag=True,
              help="Send a keepalive asking for a reply right after every XLogData message without a position "
                   "(data_start 0: a Relation, a Type, a Begin before its Origin), as a busy walsender may.")
@click.option("--keepalive-interval", type=click.FloatRange(min=0.01), default=10.0, show_default=True,
              metavar="SECONDS", help="Send a keepalive asking for a reply this often while streaming.")
@click.option("--reply-timeout", type=click.FloatRange(min=0.1), default=60.0, show_default=True, metavar="SECONDS",
              help="Drop a client that sent nothing for this long.")
@click.option("--max-connections", type=click.IntRange(1), default=64, show_default=True,
              help="Refuse connections beyond this many.")
@click.option("--proto-version", type=click.IntRange(1, 4),
              help="The protocol version COPY-CSV FILES were read with (capture files say it themselves).")
@click.option("--encoding", default="UTF8", show_default=True,
              help="The client encoding of COPY-CSV FILES.")
@click.option("--generate", "generate_count", type=click.IntRange(1, 1_000_000), metavar="N",
              help="Serve N generated transactions instead of FILES (prints the tables' DDL first).")
@click.option("--seed", type=int, default=0, show_default=True, help="The seed of --generate.")
def serve_command(files: tuple[pathlib.Path, ...], listen: str, server_version: int | None, password: str | None,
                  tls_cert: str | None, tls_key: str | None, allow_plaintext: bool,
                  disconnect_after: int | None, disconnect_every: int | None, delay: float,
                  keepalive_after_unpositioned: bool, keepalive_interval: float, reply_timeout: float,
                  max_connections: int,
                  proto_version: int | None, encoding: str, generate_count: int | None, seed: int) -> None:
    """Serve capture FILES (several: the files of one capture's stream, in any order; or the COPY-CSV of the SQL
    interface, with --proto-version) to logical replication
    clients -- PostgreSQL subscribers, psycopg2, pg_recvlogical, any pgoutput consumer -- re-encoded to the
    protocol version and options each asks for, resuming from the position it asks to start at.

    With --generate N (and no FILES), serves N transactions generated from the declarations' strategies over
    two tables whose DDL it prints: create them on a subscriber, and it applies every one."""
    host, port = _listen(listen)
    if files and generate_count:
        raise click.UsageError("give capture FILES to serve, or --generate N, not both")
    if not files and not generate_count:
        raise click.UsageError("give capture FILES to serve, or --generate N")
    try:
        if generate_count:
            source = _generated(generate_count, seed, _server_version(server_version))
        else:
            source = Source.from_captures(files, server_version=_server_version(server_version),
                                          proto_version=proto_version, client_encoding=encoding)
        settings = ServeSettings(server_version=source.server_version, password=password,
                                 keepalive_interval=keepalive_interval, reply_timeout=reply_timeout,
                                 tls_cert=tls_cert, tls_key=tls_key, allow_plaintext=allow_plaintext)
        faults = Faults(disconnect_after=disconnect_after, disconnect_every=disconnect_every, delay=delay,
                        keepalive_after_unpositioned=keepalive_after_unpositioned)
        server = Server(source, host=host, port=port, settings=settings, faults=faults,
                        max_connections=max_connections, log=lambda line: click.echo(line, err=True))
    except NeedsProtoVersion as error:  # (as decode says it; the files are checked once, in from_captures)
        raise click.UsageError(not_a_capture_file(error.path)) from None
    except (SourceError, ServeError) as error:
        if isinstance(error, InputsRefused) and error.usage:  # (a path that is no regular file)
            raise click.UsageError(str(error)) from None
        click.echo(f"error: {error}", err=True)
        # a refused set of files is a usage error, as in decode and the Spark jobs
        sys.exit(2 if isinstance(error, (ServeError, InputsRefused)) else 1)
    scan = source.scan()
    for note in scan.notes:
        click.echo(f"note: {note}", err=True)
    address = server.address
    version = settings.server_version
    origin = (f"{count_noun(generate_count, 'generated transaction')} (seed {seed}, " if generate_count else
              f"{count_noun(len(files), 'file')} (")
    click.echo(f"serving {scan.messages} messages from {origin}{count_noun(len(scan.relations), 'table')}) "
               f"on {address.host}:{address.port}: server_version "
               f"{version_text(version)}, protocol versions 1 to {highest_proto_version(version)}")
    click.echo(f"connect with: {address.conninfo()}")
    if tls_cert is not None:
        click.echo("TLS: clients may use sslmode=require"
                   + ("" if allow_plaintext else "; off loopback they must"))
    if password is not None:
        click.echo("clients must authenticate with the password (SCRAM-SHA-256)"
                   + ("" if host in ("127.0.0.1", "::1", "localhost") else f": {host} is not loopback"))
    sys.stdout.flush()
    stop = threading.Event()
    try:
        server.start()
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
