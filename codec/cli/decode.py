"""``replwire decode``: the committed changes of one stream's files, printed.

Strategy: a shell over :func:`~replwire.codec.decode_output.write_changes`.  It makes every input a file that
can be opened more than once (standard input and pipes are copied to a temporary file), opens them in stream
order (a usage error for what cannot be one stream), writes the changes to stdout and says on stderr what
the library tells it: a torn or damaged file, an interrupted snapshot, an error, the counts at the end; with
a progress line while stdout goes elsewhere and stderr is a terminal.
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import pathlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from ...schema.encodings import text_codec
from ..errors import install_hint
from ._common import count_noun, need_proto_version, replwire_version

if TYPE_CHECKING:
    from ..io.follow import Follower
    from ..io.segments import Input

__all__ = ["decode_command"]


@click.command("decode")
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
@click.option("--table", "include", multiple=True, metavar="GLOB",
              help="Print only the changes of tables matching GLOB (schema.table; repeatable; e.g. 'public.*', "
                   "'*.orders'; a GLOB without a dot is any schema's table; case-sensitive, quote a part with "
                   "double quotes to take it literally).  Logical messages are kept.")
@click.option("--exclude-table", "exclude", multiple=True, metavar="GLOB",
              help="Leave out the changes of tables matching GLOB (as --table; repeatable; wins over --table).")
@click.option("--follow", is_flag=True,
              help="The last file is a capture still being written (by a running replwire capture): after its "
                   "end, wait for more and print each transaction as soon as its commit is in the file, until "
                   "SIGINT or SIGTERM (exit 0) or --idle-exit.")
@click.option("--idle-exit", type=click.FloatRange(min=0), metavar="SECONDS",
              help="With --follow: stop after SECONDS with nothing new in the file.")
def decode_command(files: tuple[pathlib.Path, ...], proto_version: int | None, encoding: str | None,
                   output_format: str, tombstones: bool, include: tuple[str, ...] = (),
                   exclude: tuple[str, ...] = (), follow: bool = False, idle_exit: float | None = None) -> None:
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
    are typed by their column's type through psycopg 3 (replwire's values extra).  With --table or
    --exclude-table only the changes of the matching tables are printed (a TRUNCATE of several tables
    names the matching ones); a transaction left with none is not printed, nor counted.  With --follow the
    last file (in stream order) is followed as a running capture writes it, like tail -f: a record still
    being written at its end is waited for, not reported; the output is flushed whenever decode waits.
    """
    from ..decode import RecordError
    from ..decode_output import write_changes
    from ..io.capture_file import CaptureFileError, TailProblem
    from ..stream.tables import TableFilter
    from ..stream.values import TypedValuesUnavailable

    # The process ends with the command, and the interpreter's shutdown walks every object for cycles again
    # (a tenth of the CPU time of decoding a stream of 30k-100k changes): the objects are frozen at exit
    # instead (before that walk, after the output is flushed), and left to the process's end.  Once per
    # process, however often the command runs in it (tests).
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)

    try:
        tables = TableFilter(include, exclude)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--table/--exclude-table") from None
    if idle_exit is not None and not follow:
        raise click.UsageError("--idle-exit is an option of --follow")
    if follow and any(str(given) == "-" for given in files):
        raise click.UsageError("--follow reads a capture file as it grows: standard input (-) cannot be followed")
    follower = _follower(idle_exit) if follow else None  # (first: a stop from here on ends it cleanly)
    files, shown = _read_once(files)
    inputs = _decode_inputs(files, proto_version, encoding, shown, growing=follow)
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
        version = replwire_version() if output_format == "debezium" else "unknown"  # (Debezium's source.version)
        counts = write_changes(inputs, stdout, output_format, tombstones=tombstones, version=version, tail=tail,
                               warn=warn, progress=progress, tables=tables or None, follow=follower)
    except (RecordError, CaptureFileError) as error:
        click.echo(f"error: {shown(str(error))}", err=True)
        sys.exit(1)
    except TypedValuesUnavailable:
        click.echo(f"error: {_typed_values_missing('decode')}", err=True)
        sys.exit(1)
    click.echo(f"{count_noun(counts.transactions, 'transaction')}, {count_noun(counts.changes, 'change')} from "
               f"{count_noun(len(inputs), 'file')}"
               + (f" ({counts.repeated} repeated after a resume, skipped)" if counts.repeated else ""),
               err=True)
    if counts.damaged:
        sys.exit(1)


def _follower(idle_exit: float | None) -> Follower:
    """The follower of ``decode --follow``: SIGINT and SIGTERM stop it (at its next look at the file, within
    a poll, or within 1024 records of what the file held: what is committed so far is printed and flushed,
    and the command ends as at the end of its input, exit 0).

    The two signals are blocked, and looked for (``sigpending``) by the follower's ``stop``, rather than
    handled: a Python handler run while a write to standard output is blocked (a full pipe) makes
    CPython's buffered writer drop bytes (3.11: the same lines, written while a SIGINT handler ran, arrive
    a few hundred KiB short), and the output is what this command is for."""
    import signal

    from ..io.follow import Follower

    signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    stopped: list[int] = []

    def stop() -> bool:
        if not stopped:
            pending = signal.sigpending() & signals
            if pending:
                stopped.append(signal.sigwait(pending))  # (taken: nothing is left pending at the exit)
        return bool(stopped)

    return Follower(idle_exit=idle_exit, stop=stop)


def _typed_values_missing(command: str) -> str:
    """What ``command`` says when psycopg 3, which types the values it prints, is missing: the install
    command (the API's way around it, ``typed=False``, is no option of the command's)."""
    return f"replwire {command} needs psycopg 3 to type the values it prints: {install_hint('values')}"


def _read_once(files: tuple[pathlib.Path, ...]) -> tuple[tuple[pathlib.Path, ...], Callable[[str], str]]:
    """``files`` as paths that can be opened more than once (decoding looks at a file's start, then reads
    it), and what turns a message naming them back into the names given.  Standard input (``-``, unless it
    is a file) and whatever is no regular file -- a pipe, a FIFO, ``/dev/stdin`` on a pipe -- is read once,
    into a temporary file removed when the command ends."""
    import stat

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
        import shutil  # (here: tempfile and shutil are 3 ms of start-up that regular files need not pay)
        import tempfile

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
                   shown: Callable[[str], str] = str, growing: bool = False) -> list[Input]:
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
        inputs = open_inputs(files, proto_version, encoding, growing=growing)
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
