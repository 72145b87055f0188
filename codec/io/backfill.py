"""A backfill: published tables copied into the capture file in chunks by key, while the capture streams.

Strategy: a thread of the capture (the *chunker*) reads each table on an ordinary connection, a chunk at a
time, each chunk between two watermarks of its own -- non-transactional logical messages of prefix
``replwire.backfill`` (:data:`~replwire.schema.capture.BACKFILL_PREFIX`), which pgoutput sends at their WAL
position: after every transaction whose commit comes before them, before every one whose commit comes after.
Per chunk it emits the low watermark L, reads ``COPY (SELECT ... WHERE key > cursor ORDER BY key LIMIT n)``
in a short ``REPEATABLE READ`` transaction whose snapshot S it records, commits, hands the rows and S to the
capture's stream side, and emits the high watermark H.  The stream side follows every message in a
:class:`~replwire.codec.stream.backfill_window.Window`; when H arrives it asks the window for the chunk's
rows as they are at H (the changes between L and H that S does not see, applied) and writes them right
after H's record (``BackfillChunk``, ``BackfillRows``, and ``BackfillEnd`` after a run's last chunk: see
:mod:`replwire.schema.capture`).  Readers apply each row as its key's row at H.

Why so: no transaction of the backfill lasts longer than one chunk (``budget`` seconds of reading, the
chunk's size adapted to it), so VACUUM is never held back longer than that; the watermarks are positions in
the stream itself, ordered with the changes, and need no table of their own; each chunk's records follow
its H and complete H's position, so what the slot confirmed keeps its chunks, and a capture started again
continues each table from the last chunk in the file (:mod:`~replwire.codec.io.backfill_state`).  A run
begins with a start watermark B and a transactional marker whose commit the stream side waits for; with
them the window's two guards redo a chunk whose snapshot misses a commit that came before L (a
transaction's commit is in the WAL before other sessions see it).

Tables must have a primary key or a replica identity index (a chunk row is told from a change of the same
row by its key) and not ``REPLICA IDENTITY FULL`` (whose rows the readers identify by every column).  The
watermarks need ``pg_logical_emit_message`` (executable by every user unless revoked) and pgoutput's
``messages`` option, so ``--backfill`` turns it on; a standby cannot write them.
"""

from __future__ import annotations

import io
import json
import queue
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...schema.capture import BACKFILL_PREFIX
from ...schema.encodings import text_codec
from ..messages import TupleColumn
from ..options import quote_identifier
from ..stream import snapshot_records
from ..stream.backfill_window import Key, Window
from .backfill_state import HeldRun, Request, keys_json, read_state, refusal, request_of
from .capture_file import RecordData
from .connection import CaptureError, ConnectionLost, connect, is_lost, server_error
from .snapshot import CHUNK as RECORD_BYTES
from .tables import BINARY_TRAILER, Table, after_binary_header, check_select, published_tables

__all__ = ["Backfill", "TableRun"]

#: The seconds of reading a chunk aims at, and its first size and bounds in rows.
BUDGET = 0.2
FIRST_ROWS, LEAST_ROWS, MOST_ROWS = 1000, 100, 100_000
#: The most bytes of rows a chunk holds (its rows are held in memory until they are written).
MOST_BYTES = 8 << 20
#: How long a chunker waits for its high watermark to reach the stream side before it says so.
_WAIT_NOTE = 30.0
#: How many chunks of moved rows a run reads again at its end before it gives up on those still moving.
_MOST_REFETCHES = 3
#: How many chunks may be read before the verdict on the first of them came back: the next chunk is read
#: while a chunk's high watermark travels to the stream side, which hides that round trip (a chunk's WAL
#: flush, the walsender's send, the capture's write) behind the reading.
DEPTH = 2


@dataclass
class TableRun:
    """One table's backfill run as far as it went: its run number in the file, the next chunk's number, the
    cursor (the key texts of the last row read; ``None`` before the first chunk), the rows written and the
    seconds of reading, whether it ended (``reason``: ``"done"``, ``"truncated"``), and the table's rows as
    the planner last counted them (``estimate``, once the run began; ``None``: never counted)."""

    table: Table
    run: int
    chunk: int = 0
    cursor: list[str] | None = None
    rows: int = 0
    seconds: float = 0.0
    read: int = 0  # rows read in this process, for the throttle
    redos: int = 0
    ended: str | None = None
    refetch: dict[Key, None] = field(default_factory=dict)  # keys to read again at the end (in order)
    refetches: int = 0  # chunks of keys read again so far
    started: float = field(default_factory=time.monotonic)
    estimate: int | None = None

    @property
    def exhausted(self) -> bool:
        """Whether every key of the table was read once (what is left: the keys to read again)."""
        return self.chunk > 0 and self.cursor is None

    @property
    def name(self) -> str:
        return f"{self.table.relation.namespace or 'pg_catalog'}.{self.table.relation.name}"


@dataclass
class _Chunk:
    """A chunk read, on its way from the chunker to the stream side."""

    run: TableRun
    number: int
    rows: _Copied
    cursor: list[str] | None  # the key texts of its last row; None: the table has no rows past it
    keys: list[Key] | None  # the keys it read again (a chunk of the run's end), else None
    snapshot: str
    committed_xip: list[str]
    read_us: int
    at_us: int
    verdict: str | None = None
    reason: str | None = None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class _Copied:
    """A chunk's rows as the server sent them (``rows``: COPY's text lines in one piece, or its binary tuples
    one each, without the header and trailer), where the ``BackfillRows`` records cut them (``cuts``: their
    rows and end offsets in the rows joined, see :func:`~replwire.codec.stream.snapshot_records.row_cuts`),
    and the last row (the chunk's cursor).  The chunker, whose reading is the backfill's pace, only notes the
    cuts; the stream side joins the tuples (:meth:`data`) and slices the records."""

    rows: bytes | list[bytes]
    count: int
    cuts: list[tuple[int, int]]
    last: bytes

    def __len__(self) -> int:
        return self.count

    @property
    def size(self) -> int:
        """The rows' bytes."""
        return self.cuts[-1][1] if self.cuts else 0

    def data(self) -> bytes:
        """The rows in one piece."""
        return self.rows if isinstance(self.rows, bytes) else b"".join(self.rows)


class _Rows(Sequence[Sequence[TupleColumn]]):
    """A chunk's COPY rows as the wire columns the window compares, parsed only if it looks at them."""

    def __init__(self, rows: _Copied, width: int, binary: bool) -> None:
        self._raw, self._width, self._binary = rows, width, binary
        self._parsed: list[list[TupleColumn]] | None = None

    def _all(self) -> list[list[TupleColumn]]:
        if self._parsed is None:
            read = snapshot_records.binary_rows if self._binary else snapshot_records.text_rows
            self._parsed = list(read(self._raw.data(), self._width, "BackfillRows"))
        return self._parsed

    def __len__(self) -> int:
        return len(self._raw)

    def __getitem__(self, index: Any) -> Any:
        return self._all()[index]

    def __iter__(self) -> Iterator[list[TupleColumn]]:
        return iter(self._all())


_ESCAPES = {ord("\\"): "\\\\", ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r", ord("\b"): "\\b",
            ord("\f"): "\\f", ord("\v"): "\\v"}


def copy_row(columns: Sequence[TupleColumn], binary: bool) -> bytes:
    """One row in COPY's form (text, or a binary tuple) from its wire columns: what the server would have sent
    for it."""
    if binary:
        parts = [len(columns).to_bytes(2, "big", signed=True)]
        for c in columns:
            if c.kind == "n" or c.data is None:
                parts.append(b"\xff\xff\xff\xff")
            else:
                parts.append(len(c.data).to_bytes(4, "big") + c.data)
        return b"".join(parts)
    fields = []
    for c in columns:
        if c.kind == "n" or c.data is None:
            fields.append(b"\\N")
        else:
            fields.append(c.data.decode("latin-1").translate(_ESCAPES).encode("latin-1"))
    return b"\t".join(fields) + b"\n"


class Backfill:
    """The backfills of one capture: :meth:`start` the chunker, hand every message the capture receives to
    :meth:`feed` (which returns the records to write right after it), :meth:`check` now and then for the
    chunker's failure, :meth:`stop` at the end.  One instance serves one connection of the capture: after a
    reconnection a new one continues from the file (:func:`~replwire.codec.io.backfill_state.read_state`).

    ``tables``: ``schema.table`` names, or ``["all"]`` for every table of ``publication``; ``binary``: the
    capture's binary mode (the rows are read in the same form as its values); ``proto_version``: the
    stream's; ``encoding``: its client encoding; ``path``: the capture file (what it already holds of each
    run); ``two_phase``: whether the stream has two-phase messages; ``budget``: the seconds of reading a
    chunk aims at; ``slot``: the capture's slot, whose requests (``replwire backfill``: transactional
    logical messages in the stream, and in the file) it takes (``None``: none); ``log``: progress and
    notes."""

    def __init__(self, dsn: str, publication: str, tables: Sequence[str], *, binary: bool, proto_version: int,
                 server_version: int, encoding: str, path: str, two_phase: bool = False, budget: float = BUDGET,
                 rate: float | None = None, slot: str | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.dsn, self.publication, self.names, self.binary = dsn, publication, list(tables), binary
        self.two_phase, self.slot, self.proto_version = two_phase, slot, proto_version
        self._requests: queue.Queue[Request] = queue.Queue()  # what is asked for, in order
        self._active = False  # a run is going (or about to: the chunker has work)
        self._next_run = 0
        self.codec = text_codec(encoding)  # (what a text key's bytes are in)
        self.server_version, self.path, self.budget, self.rate, self.log = server_version, path, budget, rate, log
        self.session = uuid.uuid4().hex[:12]
        self.window = Window(self.session, proto_version, encoding=encoding)
        self.encoding = encoding
        self.runs: list[TableRun] = []
        self.failure: BaseException | None = None
        self._lock = threading.Lock()  # the window: fed by the stream side, tracked by the chunker
        self._flight: dict[tuple[int, int], _Chunk] = {}  # the chunks whose high watermark is on its way
        self._dropping: set[int] = set()  # runs with a chunk to read again: the chunks read after it are dropped
        self._marked = threading.Event()  # the run's start marker reached the stream side
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: Any = None
        self._held: dict[int, HeldRun] = {}

    # -- set-up, on the capture's thread ------------------------------------------------------------------

    def prepare(self) -> None:
        """Find the tables and what the file holds of their runs and of requests; refuse what cannot be
        backfilled."""
        state = read_state(self.path)
        held = state.runs
        self._next_run = max((h.run for h in held.values()), default=-1) + 1
        if self.slot is not None:
            for asked in state.pending(self.slot):
                self._requests.put(asked)
        chosen = self._tables(self.names) if self.names else []
        for table in chosen:
            before = held.get(table.relation.relation_id)
            if before is not None and before.ended:
                continue  # (done in this file: ``replwire backfill`` asks for a new run)
            if before is not None:
                self.runs.append(_continued(table, before))
            else:
                self.runs.append(TableRun(table, self._next_run))
                self._next_run += 1
        # (a run the file holds unfinished goes on when its table is asked for again, by name or request)
        self._held = held

    def _tables(self, names: Sequence[str]) -> list[Table]:
        """The published tables ``names`` says (every one for ``[]`` or ``["all"]``), checked."""
        import psycopg2

        conn = connect(self.dsn)
        try:
            cur = conn.cursor()
            cur.execute("SELECT pg_is_in_recovery()")
            if cur.fetchone()[0]:
                raise CaptureError("a backfill writes its watermarks into the WAL (pg_logical_emit_message), "
                                   "which a standby cannot: backfill on the primary")
            published = published_tables(cur, self.publication, self.server_version)
            by_name = {f"{t.relation.namespace or 'pg_catalog'}.{t.relation.name}": t for t in published}
            if not names or list(names) == ["all"]:
                chosen = published
            else:
                missing = [n for n in names if n not in by_name]
                if missing:
                    raise CaptureError(f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not in "
                                       f"publication {self.publication!r}: a backfill copies published tables "
                                       "(name them schema.table)")
                chosen = [by_name[n] for n in dict.fromkeys(names)]
            for table in chosen:
                _check_key(table)
            check_select(cur, chosen, "the backfill")
        except psycopg2.Error as error:
            raise CaptureError(f"cannot prepare the backfill: {server_error(error)}") from None
        finally:
            conn.close()
        return chosen

    def start(self) -> None:
        """Start the chunker (after :meth:`prepare`, once the capture streams)."""
        if self.runs or self.slot is not None:
            self._active = bool(self.runs) or not self._requests.empty()
            self._thread = threading.Thread(target=self._chunker, name="replwire-backfill", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        for waiting in list(self._flight.values()):
            waiting.done.set()
        self._marked.set()
        conn = self._conn
        if conn is not None:
            try:
                conn.cancel()
            except Exception:  # noqa: BLE001 (a connection already gone: nothing to cancel)
                pass
        if self._thread is not None:
            self._thread.join(timeout=10)

    def check(self) -> None:
        """Raise the chunker's failure, if it failed (a lost connection: :class:`ConnectionLost`)."""
        if self.failure is not None:
            raise self.failure

    @property
    def busy(self) -> bool:
        """Whether a run is still going, or one was asked for."""
        alive = self._thread is not None and self._thread.is_alive()
        return alive and (self._active or not self._requests.empty())

    # -- the stream side ----------------------------------------------------------------------------------

    def feed(self, lsn: int, data: bytes) -> list[RecordData]:
        """Follow one message of the stream; the records to write right after it (a chunk, at its H)."""
        if self.slot is not None and data[:1] == b"M":
            asked = request_of(data, self.proto_version, self.encoding)
            if asked is not None and asked.slot == self.slot:
                self._requests.put(asked)
        with self._lock:
            mark = self.window.feed(lsn, data)
        if mark is None:
            return []
        if mark.kind == "xid":
            self._marked.set()
            return []
        if mark.kind != "high":
            return []
        chunk = self._flight.pop((mark.run, mark.chunk), None)
        if chunk is None:
            return []  # (not a chunk in flight: a watermark of an earlier connection of this session)
        run = chunk.run
        relation = run.table.relation
        rows = _Rows(chunk.rows, len(relation.columns), self.binary)
        with self._lock:
            verdict = self.window.close(rows, chunk.snapshot, chunk.committed_xip)
        records: list[RecordData] = []
        dropped = run.run in self._dropping
        if dropped or not verdict.accepted:
            self._dropping.add(run.run)
        if dropped:  # (read after a chunk that is read again: it is read again too)
            run.refetch.update(dict.fromkeys(verdict.refetch))
            chunk.verdict = "dropped"
        elif verdict.accepted:
            body = chunk.rows if verdict.rows is rows else [copy_row(r, self.binary) for r in verdict.rows]
            for key in chunk.keys or ():
                run.refetch.pop(key, None)
            run.refetch.update(dict.fromkeys(verdict.refetch))
            if run.refetches >= _MOST_REFETCHES and run.refetch:
                self._say(f"backfill {run.name}: {len(run.refetch)} moved rows changed again while read again "
                          f"{_MOST_REFETCHES} times; their unchanged TOASTed values may stay unknown")
                run.refetch.clear()
            last = chunk.cursor is None and not run.refetch
            records.append(snapshot_records.chunk_record(
                run.run, chunk.number, relation, list(run.table.types), binary=self.binary, rows=len(body),
                last=last, cursor=json.dumps(chunk.cursor) if chunk.cursor is not None else "",
                snapshot=chunk.snapshot, read_us=chunk.read_us, at_us=chunk.at_us,
                refetch=keys_json(list(run.refetch))))
            records.extend(_rows_records(relation.relation_id, self.binary, body))
            if last:
                records.append(snapshot_records.run_end_record(run.run, relation.relation_id, 0, chunk.number + 1,
                                                               run.rows + len(body)))
            run.rows += len(body)
        elif verdict.outcome == "truncated":
            records.append(snapshot_records.run_end_record(run.run, relation.relation_id, 1, chunk.number,
                                                           run.rows))
        if not dropped:
            chunk.verdict, chunk.reason = verdict.outcome, verdict.reason
        chunk.done.set()
        return records

    # -- the chunker --------------------------------------------------------------------------------------

    def _say(self, line: str) -> None:
        if self.log is not None:
            self.log(line)

    def _chunker(self) -> None:
        import psycopg2

        cur: Any = None

        def cursor() -> Any:  # (connected when there is work: a capture that only listens holds no connection)
            nonlocal cur
            if cur is None:
                self._conn = conn = connect(self.dsn)
                conn.autocommit = True
                cur = conn.cursor()
                cur.execute("SET application_name = %s", (f"replwire backfill {self.session}",))
            return cur

        try:
            for run in self.runs:
                if self._stopping.is_set():
                    return
                self._run(cursor(), run)
            while not self._stopping.is_set():  # then what is asked for, while the capture runs
                self._active = not self._requests.empty()
                try:
                    asked = self._requests.get(timeout=0.2)
                except queue.Empty:
                    continue
                self._active = True
                try:
                    tables = self._tables(asked.tables)
                except CaptureError as error:  # (said in the log, and in the stream: the file answers it)
                    self._say(f"backfill request for {', '.join(asked.tables) or 'every published table'} "
                              f"refused: {error}")
                    cursor().execute("SELECT pg_logical_emit_message(false, %s, %s)",
                                     (BACKFILL_PREFIX, refusal(self.session, asked.id, str(error))))
                    continue
                for table in tables:
                    if self._stopping.is_set():
                        return
                    before = self._held.get(table.relation.relation_id)
                    if before is not None and not before.ended:  # (the file's unfinished run of it goes on)
                        self._held.pop(table.relation.relation_id)
                        this = _continued(table, before)
                    else:
                        this = TableRun(table, self._next_run)
                        self._next_run += 1
                    self._say(f"backfill {this.name}: asked for, starting")
                    self._run(cursor(), this)
        except psycopg2.Error as error:
            if self._stopping.is_set():
                return
            lost = is_lost(error, self._conn) if self._conn is not None else True
            kind = ConnectionLost if lost else CaptureError
            self.failure = kind(f"the backfill failed: {server_error(error)}")
        except CaptureError as error:
            self.failure = error
        finally:
            if self._conn is not None:
                self._conn.close()

    def _emit(self, cur: Any, transactional: bool, content: dict[str, Any], flush: bool = False) -> None:
        text = json.dumps({"v": 1, "s": self.session, **content}, separators=(",", ":"))
        if flush and self.server_version >= 170000:
            cur.execute("SELECT pg_logical_emit_message(false, %s, %s, true)", (BACKFILL_PREFIX, text))
            return
        cur.execute("SELECT pg_logical_emit_message(%s, %s, %s)", (transactional, BACKFILL_PREFIX, text))
        if flush:  # (a transaction with an xid flushes the WAL at its commit, the watermark with it)
            cur.execute("SELECT pg_current_xact_id()")

    def _run(self, cur: Any, run: TableRun) -> None:
        relation = run.table.relation
        with self._lock:
            self.window.track(relation)
        self._marked.clear()
        self._emit(cur, False, {"k": "start", "r": run.run, "t": relation.relation_id})
        self._emit(cur, True, {"k": "xid", "r": run.run})
        self._wait(self._marked, "the start of the backfill of " + run.name)
        # Transactions open before the run began must end first: the window did not see all of their changes.
        # Streamed and prepared ones it saw begin are known to it; with two-phase messages on, one prepared
        # before this connection's stream began is known to the server only.
        cur.execute("SELECT array_agg(gid) FROM pg_prepared_xacts WHERE database = current_database()")
        prepared = (cur.fetchone()[0] or []) if self.two_phase else []
        noted = False
        while not self._stopping.is_set():
            with self._lock:
                under_way = self.window.under_way(relation.relation_id)
            if prepared:
                cur.execute("SELECT array_agg(gid) FROM pg_prepared_xacts WHERE gid = ANY(%s)", (prepared,))
                prepared = cur.fetchone()[0] or []
            if not under_way and not prepared:
                break
            if not noted:
                noted = True
                self._say(f"backfill {run.name}: waiting for transactions open before it began to end "
                          f"({len(prepared)} prepared)" if prepared else
                          f"backfill {run.name}: waiting for transactions open before it began to end")
            time.sleep(0.05)
        keys = [c for c in relation.columns if c.flags & 1]
        cur.execute("SELECT " + ", ".join("format_type(%s, %s)" for _ in keys),
                    [v for c in keys for v in (c.type_id, c.type_modifier)])
        key_types = list(cur.fetchone())
        size = FIRST_ROWS
        run.estimate = self._estimate(cur, run.table)
        shown = time.monotonic()
        flight: list[_Chunk] = []  # read, their high watermarks on the way (oldest first; at most DEPTH)
        after, number = run.cursor, run.chunk  # where the next read begins, and its number
        settled = False  # a chunk of this run was accepted here (the first one's guard needs it read alone)
        while not self._stopping.is_set():
            # Read ahead while the oldest chunk's verdict travels -- once a chunk was accepted (the first
            # chunk after the run's start watermark is guarded by its own snapshot, see the window), and never
            # past the table's end or into the keys read again at the end (which depend on the verdicts).
            ahead = settled and after is not None and (not flight or flight[-1].cursor is not None)
            if not flight or (ahead and len(flight) < DEPTH):
                self._throttle(run)
                chunk = self._read(cur, run, after, number, keys, key_types, size)
                self._flight[(run.run, chunk.number)] = chunk
                self._emit(cur, False, {"k": "high", "r": run.run, "c": chunk.number}, flush=True)
                flight.append(chunk)
                run.read += len(chunk.rows)
                size = self._next_size(chunk, size)
                if chunk.keys is None:
                    after, number = chunk.cursor, number + 1
                continue
            chunk = flight.pop(0)
            self._wait(chunk.done, f"chunk {chunk.number} of {run.name} to reach the stream")
            if self._stopping.is_set():
                return
            if chunk.verdict != "accepted":  # the chunks read after it are dropped: read on from it again
                for later in flight:
                    self._wait(later.done, f"chunk {later.number} of {run.name} to reach the stream")
                run.read -= sum(len(c.rows) for c in [chunk, *flight])
                flight.clear()
                self._dropping.discard(run.run)
                after, number = run.cursor, run.chunk
            if chunk.verdict == "redo":
                run.redos += 1
                if chunk.reason == "relation":  # the table changed shape: read it as it is now
                    self._reshape(cur, run)
                    keys = [c for c in run.table.relation.columns if c.flags & 1]
                time.sleep(0.01)
                continue
            if chunk.verdict == "truncated":
                run.ended = "truncated"
                self._say(f"backfill {run.name}: truncated meanwhile, after {run.rows:,} rows: its rows from "
                          "then on are all in the stream")
                break
            if self._stopping.is_set():
                return
            settled = True
            run.chunk += 1
            run.seconds += chunk.read_us / 1e6
            now = time.monotonic()
            if chunk.keys is not None:
                run.refetches += 1
            if chunk.cursor is None and not run.refetch:
                run.ended = "done"
                self._say(f"backfill {run.name}: done, {run.rows:,} rows in {run.chunk:,} chunks "
                          f"({run.rows / max(now - run.started, 1e-6):,.0f} rows/s"
                          f"{f', {run.redos} read again' if run.redos else ''})")
                break
            run.cursor = chunk.cursor
            if chunk.cursor is None or chunk.keys is not None:
                after, number = None, run.chunk  # (the keys to read again: one chunk at a time)
            if run.exhausted and run.refetch and chunk.keys is None:
                self._say(f"backfill {run.name}: reading {len(run.refetch):,} moved rows again")
            if now - shown >= 5.0:
                shown = now
                self._say(self._progress(run, now))
        with self._lock:
            self.window.untrack(relation.relation_id)

    def _next_size(self, chunk: _Chunk, size: int) -> int:
        """The next chunk's size: as many rows as the budget reads at this one's pace, in bounds."""
        read = len(chunk.rows)
        pace = max(chunk.read_us / 1e6, 1e-4) / max(read, 1)
        by_time = int(self.budget / pace)
        held = chunk.rows.size
        by_bytes = int(MOST_BYTES / max(held / max(read, 1), 1))
        by_rate = int(self.rate) if self.rate else MOST_ROWS  # (a throttled run: a chunk a second at most)
        return max(LEAST_ROWS, min(MOST_ROWS, by_bytes, by_rate, size * 2, max(size // 2, by_time)))

    def _throttle(self, run: TableRun) -> None:
        """Wait until reading on keeps the run at ``rate`` rows per second."""
        if self.rate:
            early = run.read / self.rate - (time.monotonic() - run.started)
            if early > 0:
                self._stopping.wait(early)

    @staticmethod
    def _estimate(cur: Any, table: Table) -> int | None:
        """The table's rows as the planner last counted them (``pg_class.reltuples``; ``None``: never)."""
        oid = table.relation.relation_id
        if table.partitioned:
            cur.execute("SELECT sum(c.reltuples) FILTER (WHERE c.reltuples >= 0) FROM pg_partition_tree(%s) t "
                        "JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf", (oid,))
        else:
            cur.execute("SELECT reltuples FROM pg_class WHERE oid = %s AND reltuples >= 0", (oid,))
        found = cur.fetchone()
        return int(found[0]) if found is not None and found[0] is not None and found[0] > 0 else None

    @staticmethod
    def _progress(run: TableRun, now: float) -> str:
        """A run's progress line: rows (of the planner's estimate), chunks, rate, and time left."""
        rate, estimate = run.rows / max(now - run.started, 1e-6), run.estimate
        if estimate is None or run.exhausted:  # (the keys read again at the end: no estimate of them)
            return f"backfill {run.name}: {run.rows:,} rows, {run.chunk:,} chunks ({rate:,.0f} rows/s)"
        left = f", {_duration((estimate - run.rows) / rate)} left" if rate > 0 and estimate > run.rows else ""
        return (f"backfill {run.name}: {run.rows:,} of ~{estimate:,} rows ({min(run.rows / estimate, 1):.0%}), "
                f"{run.chunk:,} chunks ({rate:,.0f} rows/s{left})")

    def _reshape(self, cur: Any, run: TableRun) -> None:
        oid = run.table.relation.relation_id
        found = [t for t in published_tables(cur, self.publication, self.server_version)
                 if t.relation.relation_id == oid]
        if not found:
            raise CaptureError(f"{run.name} left publication {self.publication!r} during its backfill")
        _check_key(found[0])
        run.table = found[0]
        with self._lock:
            self.window.track(found[0].relation)

    def _read(self, cur: Any, run: TableRun, after: list[str] | None, number: int, keys: list[Any],
              key_types: list[str], size: int) -> _Chunk:
        """Chunk ``number``: L, the rows after the cursor ``after`` (or the keys to read again, once the run
        read every key) in a short repeatable-read transaction, and its own cursor."""
        table = run.table
        self._emit(cur, False, {"k": "low", "r": run.run, "c": number})
        order = ", ".join(quote_identifier(c.name) for c in keys)
        conditions = [f"({table.row_filter})"] if table.row_filter else []
        arguments: list[str] = []
        if after is not None:
            conditions.append(f"({order}) > ({', '.join(f'CAST(%s AS {t})' for t in key_types)})")
            arguments = list(after)
        keys_read: list[Key] | None = None
        if after is None and run.exhausted:  # the keys to read again, each as its columns' texts
            keys_read, texts = [], []
            for key in list(run.refetch)[:MOST_ROWS]:
                try:
                    texts.append([_key_text(c.type_id, v, self.binary, self.codec) for c, v in zip(keys, key)])
                    keys_read.append(key)
                except ValueError as error:
                    run.refetch.pop(key, None)
                    self._say(f"backfill {run.name}: a moved row cannot be read again ({error}); its unchanged "
                              "TOASTed values may stay unknown")
            conditions = conditions[:1] if table.row_filter else []
            one = f"({', '.join(f'CAST(%s AS {t})' for t in key_types)})"
            conditions.append(f"({order}) IN ({', '.join(one for _ in texts)})" if texts else "false")
            arguments = [t for key in texts for t in key]
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        columns = ", ".join(quote_identifier(c.name) for c in table.relation.columns)
        source = f"{'' if table.partitioned else 'ONLY '}{table.name}{where}"
        started = time.monotonic()
        at_us = int((time.time() - 946684800) * 1e6)
        cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        try:
            cur.execute("SELECT pg_current_snapshot()::text, ARRAY(SELECT x::text FROM "
                        "pg_snapshot_xip(pg_current_snapshot()) x WHERE pg_xact_status(x) = 'committed')")
            snapshot, committed = cur.fetchone()
            collected = _Collected(self.binary, table.name)
            limit = f" LIMIT {int(size)}" if keys_read is None else ""
            query = cur.mogrify(f"SELECT {columns} FROM {source} ORDER BY {order}{limit}", arguments).decode()
            cur.copy_expert(f"COPY ({query}) TO STDOUT" + (" (FORMAT binary)" if self.binary else ""), collected)
            rows = collected.rows(cur.rowcount)
            cursor = None
            if keys_read is None and len(rows) == size:
                cursor = self._last_key(rows.last, table, keys)
                if cursor is None:  # (a binary key of a type read here only by the server: asked, same snapshot)
                    named = ", ".join(f"{quote_identifier(c.name)}::text AS replwire_key_{i}"  # (ORDER BY takes an
                                      for i, c in enumerate(keys))                          # output name first)
                    cur.execute(f"SELECT {named} FROM {source} ORDER BY {order} LIMIT 1 OFFSET {int(size) - 1}",
                                arguments)
                    cursor = list(cur.fetchone())
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK") if not cur.connection.closed else None
            raise
        read_us = int((time.monotonic() - started) * 1e6)
        return _Chunk(run, number, rows, cursor, keys_read, snapshot, list(committed), read_us, at_us)

    def _last_key(self, row: bytes, table: Table, keys: list[Any]) -> list[str] | None:
        """The key texts of a chunk's last row, from the row itself (``None``: a binary key of a type this
        does not read)."""
        columns = table.relation.columns
        read = snapshot_records.binary_rows if self.binary else snapshot_records.text_rows
        (values,) = read(row, len(columns), "BackfillRows")
        try:
            return [_key_text(c.type_id, values[columns.index(c)].data, self.binary, self.codec) for c in keys]
        except ValueError:
            return None

    def _wait(self, event: threading.Event, what: str) -> None:
        noted = time.monotonic()
        while not event.wait(1.0):
            if self._stopping.is_set():
                return
            if time.monotonic() - noted > _WAIT_NOTE:
                noted = time.monotonic()
                self._say(f"backfill: still waiting for {what} (is the capture behind the server?)")


#: The binary key types whose values a moved row is read again by, and a chunk's cursor is taken from, each
#: as the server's text, which ``CAST(text AS type)`` reads back as the same value: integers (struct formats),
#: texts, uuid; date, timestamp and timestamptz (the day or microsecond count, written as the server's output
#: functions do: :mod:`~replwire.codec.stream.server_text`; timestamptz in UTC with its offset, infinities,
#: BC); and the types :class:`~replwire.codec.stream.values.ValueLoader` loads (its layout checks and psycopg's
#: binary loaders): bool, bytea, float4, float8 (every digit: the shortest text that reads back the same),
#: numeric (NaN and infinities too), time, timetz, interval, jsonb.
_INTEGERS = {20: ">q", 21: ">h", 23: ">i", 26: ">I"}
_TEXTS = frozenset((25, 1042, 1043, 19))
_UUID = 2950
_DATES = {1082: False, 1114: False, 1184: True}  # date, timestamp, timestamptz: whether the text has an offset
_LOADED = frozenset((16, 17, 700, 701, 1700, 1083, 1266, 1186, 3802))
_LOADERS: dict[str, Any] = {}  # a ValueLoader per client encoding (made on first need: it needs psycopg 3)


def _key_text(type_id: int, raw: bytes | None, binary: bool, codec: str) -> str:
    """A key column's server text from the bytes the stream carries (``ValueError``: a binary value of a type
    this does not read, one that does not fit its type's layout, or one of :data:`_LOADED` without psycopg)."""
    if raw is None:
        raise ValueError("a NULL key column")
    if not binary or type_id in _TEXTS:
        return raw.decode(codec)
    if type_id in _INTEGERS:
        return str(struct.unpack(_INTEGERS[type_id], raw)[0])
    if type_id == _UUID:
        return str(uuid.UUID(bytes=raw))
    if type_id in _DATES:
        from ..stream.binary_layout import BINARY_WIDTHS
        from ..stream.server_text import date_server_text, timestamp_server_text

        if len(raw) != BINARY_WIDTHS[type_id]:
            raise ValueError(f"a binary key of type OID {type_id} of {len(raw)} bytes")
        count = int.from_bytes(raw, "big", signed=True)
        return date_server_text(count) if type_id == 1082 else timestamp_server_text(count, _DATES[type_id])
    if type_id not in _LOADED:
        raise ValueError(f"a binary key of type OID {type_id}")
    import datetime as dt
    import decimal

    from ..stream.server_text import bound_text
    from ..stream.value_types import RawValue

    loader = _LOADERS.get(codec)
    if loader is None:
        from ..stream.values import ValueLoader

        try:
            loader = _LOADERS[codec] = ValueLoader(codec)
        except ImportError:  # (TypedValuesUnavailable)
            raise ValueError(f"a binary key of type OID {type_id} (read with psycopg 3, not installed)") from None
    value = loader.load("b", raw, type_id)
    if isinstance(value, RawValue):
        raise ValueError(f"a binary key of type OID {type_id} not read: {value.reason}")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):  # (repr: the shortest digits that read back as the same float)
        if value != value:
            return "NaN"
        return {float("inf"): "Infinity", float("-inf"): "-Infinity"}.get(value) or repr(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, (decimal.Decimal, dt.time)):
        return value.isoformat() if isinstance(value, dt.time) else bound_text(value)
    return str(value)  # interval: its ISO 8601 text; jsonb: its text


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}" if seconds >= 60 else f"{seconds} s"


def _continued(table: Table, held: HeldRun) -> TableRun:
    """The run of ``table`` the file holds unfinished, to go on from."""
    return TableRun(table, held.run, held.chunk, held.cursor, held.rows, refetch=dict.fromkeys(held.refetch))


def _check_key(table: Table) -> None:
    relation = table.relation
    name = f"{relation.namespace or 'pg_catalog'}.{relation.name}"
    if relation.replica_identity == "f":
        raise CaptureError(f"{name} has REPLICA IDENTITY FULL: its rows are identified by all their values, so a "
                           "backfill row cannot replace one (give it a primary key and REPLICA IDENTITY DEFAULT)")
    if not any(c.flags & 1 for c in relation.columns):
        raise CaptureError(f"{name} has no primary key or replica identity index: a backfill tells a chunk's row "
                           "from a change of the same row by its key (ALTER TABLE ... ADD PRIMARY KEY, or REPLICA "
                           "IDENTITY USING INDEX); an insert-only table can be copied with capture --snapshot")


class _Collected:
    """What ``COPY ... TO STDOUT`` writes into for a chunk, and its rows: the text form's lines, or the binary
    form's data messages (one tuple each) with its header and trailer taken off."""

    def __init__(self, binary: bool, name: str) -> None:
        self.binary, self.name = binary, name
        self.parts: list[bytes] = []
        self.text = io.BytesIO()
        # (a data message per row: no Python frame for each)
        self.write: Callable[[bytes], object] = self.parts.append if binary else self.text.write

    def rows(self, count: int) -> _Copied:
        """The rows and their cuts into records; the server said it sent ``count`` (text lines are checked)."""
        if not self.binary:  # (its lines, however the server cut its messages: COPY's text escapes CR and LF)
            text = self.text.getvalue()
            if b"\r" in text or not text.endswith(b"\n") and text:
                raise CaptureError(f"COPY of {self.name} sent text that is not whole lines")
            cuts = snapshot_records.text_cuts(text, RECORD_BYTES)
            counted = sum(lines for lines, _ in cuts)
            if counted != count:
                raise CaptureError(f"COPY of {self.name} sent {counted} lines for {count} rows")
            return _Copied(text, count, cuts, text[text.rfind(b"\n", 0, len(text) - 1) + 1:])
        parts = self.parts  # (in place: a copy of a list of 30,000 rows is the chunker's time)
        if parts:
            first = after_binary_header(parts[0], self.name)
            if first:
                parts[0] = first
            else:
                del parts[0]
            if parts and parts[-1] == BINARY_TRAILER:
                parts.pop()
        return _Copied(parts, len(parts), snapshot_records.row_cuts(parts, RECORD_BYTES), parts[-1] if parts else b"")


def _rows_records(relation_id: int, binary: bool, rows: _Copied | list[bytes]) -> Iterator[RecordData]:
    """``BackfillRows`` records of about :data:`RECORD_BYTES` each (each ends with the row that reaches it): a
    chunk's rows as they were read (sliced out of them joined), or the rows the window changed (one each)."""
    data, cuts = (b"".join(rows), snapshot_records.row_cuts(rows, RECORD_BYTES)) if isinstance(rows, list) else \
        (rows.data(), rows.cuts)
    view, start = memoryview(data), 0
    for count, stop in cuts:
        yield snapshot_records.chunk_rows_record(relation_id, binary, count, view[start:stop])
        start = stop
