"""Capture real pgoutput (and test_decoding) output from a test server: SQL interface, and live walsender.

:func:`capture_all` sets up the schema (:func:`tests.workload.setup_schema`), creates one logical slot per
capture configuration (plus one ``test_decoding`` slot) **before** running the workload, runs
:func:`tests.workload.run_workload` once, then reads every slot with
``pg_logical_slot_get_binary_changes(slot, NULL, NULL, VARIADIC options)`` and drops the slots.
Which workload statement produces which message kind is documented in :mod:`tests.workload`'s docstring.

Configurations (:func:`capture_configs`) follow pgoutput's option parsing (``parse_output_parameters`` in
PostgreSQL's ``src/backend/replication/pgoutput/pgoutput.c``): every option value is a string; options are sent
only to servers that know them (an unknown option is an error): ``binary``/``messages``/``streaming`` (PG14+, and
streaming needs proto ≥ 2), ``two_phase`` (PG15+, proto ≥ 3; the slot is created with the ``two_phase`` argument
of ``pg_create_logical_replication_slot``), ``streaming 'parallel'`` (PG16+, proto 4), ``origin`` (PG16+).

What the SQL interface can and cannot show (observed on 15.18 and 18.6):

* PG18 skips the changes of transactions that are already aborted when decoding runs after the fact
  (``ReorderBufferCheckAndTruncateAbortedTXN``), so the large rolled-back transaction produces no Stream Abort
  there; ``A`` still appears on PG18 for the rolled-back *subtransaction* of the ``savepoint`` step
  (subxid ≠ xid). PG15 shows both forms.
* A transaction under a replication origin is dropped by ``origin 'none'``.

Live walsender capture: for the richest configuration (:func:`walsender_configs`) a slot is also streamed over
the replication protocol (:mod:`tests.walsender`) *while* the workload runs; the workload then calls a ``sync``
hook at its rollback points (flush WAL via a commit on the unpublished ``sync_marker`` table, wait until the
walsender's ``sent_lsn`` passes it), so the large transactions are streamed before they abort. That capture shows
the top-level Stream Abort and the streamed-prepare-then-rollback pattern on PG18 as well, with the ``w``/``k``
envelope frames kept. (The ``sync_marker`` inserts show in the test_decoding output; pgoutput skips them.)

The test_decoding slot is read with ``include-xids``, ``include-timestamp`` and ``skip-empty-xacts`` (and is a
two-phase slot, so prepared transactions show as ``PREPARE TRANSACTION``), through the *binary* variant of the
function: message contents are raw bytes that need not be valid UTF-8. :func:`parse_test_decoding` turns its
lines into :class:`TDRecord` objects.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from . import walsender, workload

__all__ = [
    "CaptureConfig", "Capture", "CaptureRun", "WalsenderCapture", "TDColumn", "TDRecord", "TDParseError",
    "UNCHANGED_TOAST", "TEST_DECODING_OPTIONS", "capture_configs", "walsender_configs", "capture_all", "commit_ends",
    "parse_test_decoding", "parse_test_decoding_line", "max_proto_version",
]

#: Options the test_decoding slot is read with.
TEST_DECODING_OPTIONS = {"include-xids": "1", "include-timestamp": "1", "skip-empty-xacts": "1"}


def max_proto_version(version_num: int) -> int:
    """Highest pgoutput protocol version a server supports (``LOGICALREP_PROTO_MAX_VERSION_NUM`` in PostgreSQL's
    ``src/include/replication/logicalproto.h`` for each major)."""
    if version_num >= 160000:
        return 4
    if version_num >= 150000:
        return 3
    if version_num >= 140000:
        return 2
    return 1


# --------------------------------------------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaptureConfig:
    """One way of reading the workload: a protocol version plus pgoutput options (string values).

    ``options`` holds only the optional settings; :meth:`full_options` adds ``proto_version`` and
    ``publication_names``. ``two_phase`` configurations need a slot created with ``two_phase``.
    """

    name: str
    proto_version: int
    options: tuple[tuple[str, str], ...] = ()
    publications: tuple[str, ...] = workload.DEFAULT_PUBLICATIONS

    @property
    def two_phase(self) -> bool:
        return dict(self.options).get("two_phase", "false") in ("true", "on")

    @property
    def slot_name(self) -> str:
        return "rw_" + re.sub(r"[^a-z0-9_]", "_", self.name.lower())

    def full_options(self) -> dict[str, str]:
        opts = {
            "proto_version": str(self.proto_version),
            "publication_names": ",".join('"' + p.replace('"', '""') + '"' for p in self.publications),
        }
        opts.update(dict(self.options))
        return opts


def _cfg(name: str, proto: int, publications: tuple[str, ...] = workload.DEFAULT_PUBLICATIONS,
         **options: str) -> CaptureConfig:
    return CaptureConfig(name, proto, tuple(options.items()), publications)


def capture_configs(version_num: int) -> list[CaptureConfig]:
    """The capture configurations for a server of ``version_num`` (PG15+ assumed for two_phase configs).

    A plain configuration for every protocol version the server supports, then option sets so that every option
    (and every value of ``streaming`` and ``origin``) the server knows appears at least once.
    """
    maxp = max_proto_version(version_num)
    configs = [_cfg(f"v{p}", p) for p in range(1, maxp + 1)]
    if version_num >= 140000:
        configs += [
            _cfg("v1-binary", 1, binary="true"),
            _cfg("v1-messages", 1, messages="true"),
            _cfg("v1-root", 1, workload.ROOT_PUBLICATIONS, messages="true"),
            _cfg("v2-stream", 2, streaming="on", messages="true"),
            _cfg("v2-stream-binary", 2, streaming="on", binary="true"),
        ]
    if version_num >= 150000:
        configs += [
            _cfg("v3-two-phase", 3, two_phase="true", messages="true"),
            _cfg("v3-stream-two-phase", 3, streaming="on", two_phase="true", messages="true"),
            _cfg("v3-all", 3, streaming="on", two_phase="true", binary="true", messages="true"),
            _cfg(f"v{maxp}-root-stream-two-phase", maxp, workload.ROOT_PUBLICATIONS, streaming="on",
                 two_phase="true", messages="true"),
        ]
    if version_num >= 160000:
        configs += [
            _cfg("v1-origin-none", 1, origin="none", messages="true"),
            _cfg("v1-origin-any", 1, origin="any", messages="true"),
            _cfg("v4-stream-on", 4, streaming="on", messages="true"),
            _cfg("v4-parallel", 4, streaming="parallel", messages="true"),
            _cfg("v4-parallel-two-phase", 4, streaming="parallel", two_phase="true", messages="true"),
            _cfg("v4-all", 4, streaming="parallel", two_phase="true", binary="true", messages="true", origin="any"),
            _cfg("v4-all-origin-none", 4, streaming="parallel", two_phase="true", binary="true", messages="true",
                 origin="none"),
        ]
    return configs


# --------------------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Capture:
    """The rows one slot produced: ``rows`` = ``[(lsn text, xid, pgoutput message bytes), ...]`` in order."""

    config: str
    major: int
    version_num: int
    proto_version: int
    options: dict[str, str]
    slot: str
    two_phase_slot: bool
    rows: list[tuple[str, int, bytes]] = field(default_factory=list)

    @property
    def tags(self) -> set[str]:
        """The distinct first bytes (message tags) of the rows, as 1-char strings."""
        return {chr(data[0]) for _, _, data in self.rows if data}


@dataclass
class WalsenderCapture:
    """Raw CopyData payloads (``w`` XLogData / ``k`` keepalive, envelope included) from a walsender that
    streamed the workload *while it ran* (``START_REPLICATION`` before the first statement)."""

    config: str
    major: int
    version_num: int
    proto_version: int
    options: dict[str, str]
    slot: str
    frames: list[bytes] = field(default_factory=list)

    def messages(self) -> list[bytes]:
        """The pgoutput messages: the data part of every ``w`` frame."""
        return [f[25:] for f in self.frames if f[:1] == b"w"]

    @property
    def tags(self) -> set[str]:
        return {chr(m[0]) for m in self.messages() if m}


@dataclass
class CaptureRun:
    """Everything :func:`capture_all` produced on one server."""

    major: int
    version_num: int
    captures: list[Capture]
    #: test_decoding rows ``(lsn, xid, text)``; the text is decoded as UTF-8 with ``surrogateescape`` so
    #: ``text.encode("utf-8", "surrogateescape")`` gives back the exact bytes.
    test_decoding: list[tuple[str, int, str]]
    facts: dict[str, Any]
    schema: dict[str, Any]
    timings: dict[str, float]
    #: live walsender captures (see :func:`walsender_configs`)
    walsender: list[WalsenderCapture] = field(default_factory=list)

    def by_config(self) -> dict[str, Capture]:
        return {c.config: c for c in self.captures}

    def tags(self) -> set[str]:
        """Union of the message tags over all configurations."""
        out: set[str] = set()
        for c in self.captures:
            out |= c.tags
        return out


# --------------------------------------------------------------------------------------------------------------
# Capturing
# --------------------------------------------------------------------------------------------------------------

TEST_DECODING_SLOT = "rw_test_decoding"
#: Bound on waiting for a live walsender (to catch up in :func:`capture_all`'s sync points and at the end).
WALSENDER_TIMEOUT = 30.0


def walsender_configs(version_num: int) -> list[CaptureConfig]:
    """Configurations also captured live over the walsender: the richest one the server supports
    (highest protocol, streaming — ``parallel`` where it exists —, two_phase, binary, messages)."""
    if version_num >= 160000:
        return [_cfg("ws-v4-all", 4, streaming="parallel", two_phase="true", binary="true", messages="true")]
    if version_num >= 150000:
        return [_cfg("ws-v3-all", 3, streaming="on", two_phase="true", binary="true", messages="true")]
    return []


def _read_slot(server: Any, slot: str, options: dict[str, str]) -> list[tuple[str, int, bytes]]:
    flat: list[str] = []
    for k, v in options.items():
        flat += [k, v]
    with server.connect() as conn:
        cur = conn.execute(
            "SELECT lsn::text, xid::text::int8, data"
            " FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, VARIADIC %s::text[])",
            (slot, flat),
        )
        return [(lsn, int(xid), bytes(data)) for lsn, xid, data in cur]


class _LiveWalsender:
    """A thread streaming one slot over :class:`tests.walsender.WalSender` while the workload runs."""

    def __init__(self, server: Any, cfg: CaptureConfig) -> None:
        self.server = server
        self.cfg = cfg
        self.frames: list[bytes] = []
        self.target: int | None = None
        self.error: BaseException | None = None
        self.backend_pid: int | None = None
        self._started = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"walsender-{cfg.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self._started.wait(WALSENDER_TIMEOUT):
            raise TimeoutError(f"walsender for {self.cfg.name} did not start")
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            with walsender.WalSender.connect(self.server) as ws:
                self.backend_pid = ws.backend_pid
                ws.start_replication(self.cfg.slot_name, self.cfg.full_options())
                self._started.set()
                deadline = time.monotonic() + 10 * WALSENDER_TIMEOUT
                caught_up = 0  # highest keepalive walEnd so far (the last one may come before finish())
                while time.monotonic() < deadline and not self._stop.is_set():
                    if self.target is not None and caught_up >= self.target:
                        return
                    frame = ws.read_frame(0.05)
                    if frame is None:
                        continue
                    self.frames.append(frame)
                    if frame[:1] == b"k":
                        caught_up = max(caught_up, walsender.keepalive_fields(frame).wal_end)
                raise TimeoutError(f"walsender for {self.cfg.name} stopped before catching up")
        except BaseException as e:  # reported by finish()
            self.error = e
        finally:
            self._started.set()

    def finish(self, target_lsn: str) -> None:
        """Wait until the stream has caught up to ``target_lsn`` (bounded), then close it."""
        self.target = walsender.lsn_to_int(target_lsn)
        self._thread.join(WALSENDER_TIMEOUT)
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(5)
            raise TimeoutError(f"walsender for {self.cfg.name} not caught up to {target_lsn}")
        if self.error is not None:
            raise self.error

    def abandon(self) -> None:
        self._stop.set()
        self._thread.join(5)


def _make_sync(server: Any, live: list[_LiveWalsender]) -> Callable[[], None]:
    """A sync function for :func:`tests.workload.run_workload`: flush WAL (a commit touching the unpublished
    ``sync_marker`` table), then wait until every live walsender has sent past that point."""

    def sync() -> None:
        pids = [w.backend_pid for w in live]
        with server.connect() as conn:
            conn.execute("INSERT INTO sync_marker DEFAULT VALUES")
            target = conn.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0]  # type: ignore[index]
            deadline = time.monotonic() + WALSENDER_TIMEOUT
            while True:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_replication WHERE pid = ANY(%s) AND sent_lsn >= %s",
                    (pids, target)).fetchone()
                if row is not None and row[0] == len(pids):
                    return
                for w in live:
                    if w.error is not None:
                        raise w.error
                if time.monotonic() > deadline:
                    raise TimeoutError(f"walsenders did not reach {target} within {WALSENDER_TIMEOUT}s")
                time.sleep(0.01)

    return sync


def capture_all(server: Any, configs: Iterable[CaptureConfig] | None = None, *, workers: int = 3,
                live: Iterable[CaptureConfig] | None = None, keep_slots: bool = False) -> CaptureRun:
    """Run the workload once on ``server`` and capture it through every configuration.

    ``server`` is a :class:`tests.pgserver.PgServer` (anything with ``connect()``, ``major``, ``version_num``,
    ``socket_dir``, ``port``, ``superuser``, ``dbname``) whose database has not been set up yet.

    ``configs`` default to :func:`capture_configs`, read through the SQL interface after the workload by
    ``workers`` concurrent connections. ``live`` (default :func:`walsender_configs`) are streamed over the
    walsender protocol *during* the workload, which then synchronises with them at its rollback points so the
    full streaming pattern (Stream Abort of a top-level transaction, streamed prepare then rollback) appears on
    PG18 too. All slots are dropped at the end unless ``keep_slots``.
    """
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    configs = list(capture_configs(server.version_num) if configs is None else configs)
    live_cfgs = list(walsender_configs(server.version_num) if live is None else live)
    slots: list[str] = []
    streams: list[_LiveWalsender] = []
    with server.connect() as conn:
        schema = workload.setup_schema(conn)
        timings["setup_schema"] = time.monotonic() - t0
        t1 = time.monotonic()
        try:
            for cfg in configs + live_cfgs:
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)",
                             (cfg.slot_name, cfg.two_phase))
                slots.append(cfg.slot_name)
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding', false, true)",
                         (TEST_DECODING_SLOT,))
            slots.append(TEST_DECODING_SLOT)
            timings["create_slots"] = time.monotonic() - t1

            t2 = time.monotonic()
            for cfg in live_cfgs:
                w = _LiveWalsender(server, cfg)
                streams.append(w)
                w.start()
            facts = workload.run_workload(server, sync=_make_sync(server, streams) if streams else None)
            for w in streams:
                w.finish(facts["end_lsn"])
            timings["workload"] = time.monotonic() - t2

            t3 = time.monotonic()
            jobs = [(cfg.slot_name, cfg.full_options()) for cfg in configs]
            jobs.append((TEST_DECODING_SLOT, dict(TEST_DECODING_OPTIONS)))
            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                results = list(pool.map(lambda job: _read_slot(server, *job), jobs))
            timings["read_slots"] = time.monotonic() - t3
        finally:
            for w in streams:
                w.abandon()
            if not keep_slots:
                _drop_slots(conn, slots)
    captures = [
        Capture(cfg.name, server.major, server.version_num, cfg.proto_version, cfg.full_options(), cfg.slot_name,
                cfg.two_phase, rows)
        for cfg, rows in zip(configs, results)
    ]
    live_captures = [
        WalsenderCapture(w.cfg.name, server.major, server.version_num, w.cfg.proto_version, w.cfg.full_options(),
                         w.cfg.slot_name, w.frames)
        for w in streams
    ]
    td_rows = [(lsn, xid, data.decode("utf-8", "surrogateescape")) for lsn, xid, data in results[-1]]
    timings["total"] = time.monotonic() - t0
    return CaptureRun(server.major, server.version_num, captures, td_rows, facts, schema, timings, live_captures)


def _drop_slots(conn: Any, slots: list[str]) -> None:
    """Drop the slots; a slot still held by a closing walsender is retried for a few seconds."""
    deadline = time.monotonic() + 10
    for slot in slots:
        while True:
            try:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                break
            except Exception:  # noqa: BLE001 - "replication slot ... is active": the walsender is exiting
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


# --------------------------------------------------------------------------------------------------------------
# test_decoding output parser
# --------------------------------------------------------------------------------------------------------------


class _UnchangedToast:
    """Marker for test_decoding's ``unchanged-toast-datum`` (a TOASTed value not in the WAL); never NULL."""

    _instance: _UnchangedToast | None = None

    def __new__(cls) -> _UnchangedToast:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __reduce__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST = _UnchangedToast()


@dataclass(frozen=True)
class TDColumn:
    """One column as test_decoding printed it.

    ``value`` is the type's text output (what pgoutput sends in a ``t`` column), ``None`` for SQL NULL, or
    :data:`UNCHANGED_TOAST`. test_decoding's own decorations are undone: quotes and doubled quotes removed,
    ``true``/``false`` turned back into ``t``/``f``, ``B'0101'`` into ``0101``.
    """

    name: str
    type: str
    value: str | None | _UnchangedToast


@dataclass
class TDRecord:
    """One parsed test_decoding row.

    ``kind`` is one of ``BEGIN``, ``COMMIT``, ``PREPARE``, ``COMMIT PREPARED``, ``ROLLBACK PREPARED``,
    ``INSERT``, ``UPDATE``, ``DELETE``, ``TRUNCATE``, ``MESSAGE``, or (``stream-changes`` output) ``STREAM
    START``, ``STREAM STOP``, ``STREAM ABORT``, ``STREAM COMMIT``, ``STREAM PREPARE``, ``STREAM CHANGE``,
    ``STREAM TRUNCATE``, ``STREAM MESSAGE``.

    For changes: ``table`` (``schema.name`` as printed, quoting kept), ``old`` (old key of an UPDATE or the
    tuple of a DELETE; test_decoding omits NULL columns there), ``new`` (INSERT/UPDATE), ``no_tuple_data``.
    TRUNCATE: ``tables``, ``flags`` (subset of ``{"restart_seqs", "cascade"}``). MESSAGE: ``transactional``,
    ``prefix``, ``content`` (bytes). Two-phase: ``gid``. ``xid`` and ``timestamp`` (text) when printed.
    ``lsn``/``row_xid`` come from the SQL row.
    """

    kind: str
    text: str
    lsn: str | None = None
    row_xid: int | None = None
    xid: int | None = None
    timestamp: str | None = None
    table: str | None = None
    old: list[TDColumn] | None = None
    new: list[TDColumn] | None = None
    no_tuple_data: bool = False
    tables: list[str] | None = None
    flags: set[str] | None = None
    transactional: bool | None = None
    prefix: str | None = None
    content: bytes | None = None
    gid: str | None = None


class TDParseError(ValueError):
    """A test_decoding line did not have the expected shape."""


_AT = r"(?: \(at (?P<ts>.+)\))?"
_SIMPLE = [
    ("BEGIN", re.compile(r"^BEGIN(?: (?P<xid>\d+))?$")),
    ("COMMIT", re.compile(r"^COMMIT(?: (?P<xid>\d+))?" + _AT + "$")),
    ("STREAM START", re.compile(r"^opening a streamed block for transaction(?: TXN (?P<xid>\d+))?$")),
    ("STREAM STOP", re.compile(r"^closing a streamed block for transaction(?: TXN (?P<xid>\d+))?$")),
    ("STREAM ABORT", re.compile(r"^aborting streamed \(sub\)transaction(?: TXN (?P<xid>\d+))?$")),
    ("STREAM COMMIT", re.compile(r"^committing streamed transaction(?: TXN (?P<xid>\d+))?" + _AT + "$")),
    ("STREAM CHANGE", re.compile(r"^streaming change for(?: TXN (?P<xid>\d+)| transaction)$")),
    ("STREAM TRUNCATE", re.compile(r"^streaming truncate for(?: TXN (?P<xid>\d+)| transaction)$")),
]
_TWO_PHASE = re.compile(
    r"^(?P<kind>PREPARE TRANSACTION|COMMIT PREPARED|ROLLBACK PREPARED) (?P<gid>'(?:[^']|'')*')"
    r"(?:, txid (?P<xid>\d+))?" + _AT + "$", re.S)
_STREAM_PREPARE = re.compile(
    r"^preparing streamed transaction(?: TXN (?P<xid>\d+))?(?: (?P<gid>'(?:[^']|'')*'))?" + _AT + "$", re.S)
_MESSAGE_HEAD = re.compile(r"^(?P<stream>streaming )?message: transactional: (?P<tx>\d) prefix: ")
_SZ = re.compile(rb", sz: (\d+)( content:)?")


def parse_test_decoding(rows: Iterable[tuple[str, int, str]]) -> list[TDRecord]:
    """Parse test_decoding SQL rows ``(lsn, xid, text)`` into :class:`TDRecord` objects."""
    out = []
    for lsn, xid, text in rows:
        rec = parse_test_decoding_line(text)
        rec.lsn, rec.row_xid = lsn, xid
        out.append(rec)
    return out


def parse_test_decoding_line(text: str) -> TDRecord:
    """Parse one line of test_decoding output (see :class:`TDRecord`); raises :class:`TDParseError`."""
    for kind, rx in _SIMPLE:
        m = rx.match(text)
        if m:
            gd = m.groupdict()
            return TDRecord(kind, text, xid=_int(gd.get("xid")), timestamp=gd.get("ts"))
    m = _TWO_PHASE.match(text)
    if m:
        kind = "PREPARE" if m["kind"] == "PREPARE TRANSACTION" else m["kind"]
        return TDRecord(kind, text, xid=_int(m["xid"]), timestamp=m["ts"], gid=_unquote(m["gid"]))
    m = _STREAM_PREPARE.match(text)
    if m:
        return TDRecord("STREAM PREPARE", text, xid=_int(m["xid"]), timestamp=m["ts"],
                        gid=_unquote(m["gid"]) if m["gid"] else None)
    m = _MESSAGE_HEAD.match(text)
    if m:
        return _parse_message(text, m)
    if text.startswith("table "):
        return _parse_change(text)
    raise TDParseError(f"unrecognised test_decoding line: {text[:200]!r}")


def _int(s: str | None) -> int | None:
    return int(s) if s is not None else None


def _unquote(lit: str) -> str:
    assert lit[0] == "'" and lit[-1] == "'"
    return lit[1:-1].replace("''", "'")


def _parse_message(text: str, head: re.Match[str]) -> TDRecord:
    raw = text.encode("utf-8", "surrogateescape")
    start = len(head.group(0).encode("utf-8", "surrogateescape"))
    streaming = head["stream"] is not None
    # The content (raw bytes, sz of them) ends the line; the prefix may contain anything, so pick the
    # ", sz: N content:" occurrence whose N matches the remaining length.
    for m in _SZ.finditer(raw, start):
        size = int(m.group(1))
        if streaming and m.group(2) is None and m.end() == len(raw):
            content = None
        elif not streaming and m.group(2) is not None and m.end() + size == len(raw):
            content = raw[m.end():]
        else:
            continue
        prefix = raw[start:m.start()].decode("utf-8", "surrogateescape")
        return TDRecord("STREAM MESSAGE" if streaming else "MESSAGE", text, transactional=head["tx"] == "1",
                        prefix=prefix, content=content)
    raise TDParseError(f"malformed message line: {text[:200]!r}")


class _Cursor:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def eof(self) -> bool:
        return self.i >= len(self.s)

    def expect(self, lit: str) -> None:
        if not self.s.startswith(lit, self.i):
            raise TDParseError(f"expected {lit!r} at {self.i} in {self.s[:200]!r}")
        self.i += len(lit)

    def accept(self, lit: str) -> bool:
        if self.s.startswith(lit, self.i):
            self.i += len(lit)
            return True
        return False

    def ident(self) -> str:
        """An identifier as quote_identifier printed it (quotes kept)."""
        s, i = self.s, self.i
        if i < len(s) and s[i] == '"':
            j = i + 1
            while True:
                j = s.find('"', j)
                if j < 0:
                    raise TDParseError(f"unterminated quoted identifier in {s[:200]!r}")
                if s.startswith('""', j):
                    j += 2
                    continue
                break
            self.i = j + 1
            return s[i:j + 1]
        j = i
        while j < len(s) and s[j] not in ' .,:[':
            j += 1
        if j == i:
            raise TDParseError(f"expected identifier at {i} in {s[:200]!r}")
        self.i = j
        return s[i:j]

    def qualified(self) -> str:
        name = self.ident()
        while self.accept("."):
            name += "." + self.ident()
        return name


def _parse_change(text: str) -> TDRecord:
    cur = _Cursor(text)
    cur.expect("table ")
    tables = [cur.qualified()]
    while cur.accept(", "):
        tables.append(cur.qualified())
    cur.expect(": ")
    for op in ("INSERT", "UPDATE", "DELETE", "TRUNCATE"):
        if cur.accept(op + ":"):
            break
    else:
        raise TDParseError(f"unknown change in {text[:200]!r}")
    if op == "TRUNCATE":
        rest = text[cur.i:].split()
        flags = set() if rest == ["(no-flags)"] else set(rest)
        if not flags <= {"restart_seqs", "cascade"}:
            raise TDParseError(f"unknown TRUNCATE flags in {text[:200]!r}")
        return TDRecord("TRUNCATE", text, tables=tables, table=tables[0] if len(tables) == 1 else None,
                        flags=flags)
    rec = TDRecord(op, text, table=tables[0])
    if cur.accept(" (no-tuple-data)"):
        rec.no_tuple_data = True
    elif op == "INSERT":
        rec.new = _columns(cur, stop=None)
    elif op == "DELETE":
        rec.old = _columns(cur, stop=None)
    elif cur.accept(" old-key:"):
        rec.old = _columns(cur, stop=" new-tuple:")
        cur.expect(" new-tuple:")
        rec.new = _columns(cur, stop=None)
    else:
        rec.new = _columns(cur, stop=None)
    if not cur.eof():
        raise TDParseError(f"trailing text at {cur.i} in {text[:200]!r}")
    return rec


def _columns(cur: _Cursor, stop: str | None) -> list[TDColumn]:
    cols = []
    s = cur.s
    while not cur.eof() and not (stop and s.startswith(stop, cur.i)):
        cur.expect(" ")
        name = cur.ident()
        cur.expect("[")
        end = s.find("]:", cur.i)
        if end < 0:
            raise TDParseError(f"unterminated type at {cur.i} in {s[:200]!r}")
        typ = s[cur.i:end]
        cur.i = end + 2
        cols.append(TDColumn(name, typ, _value(cur)))
    return cols


def _value(cur: _Cursor) -> str | None | _UnchangedToast:
    s, i = cur.s, cur.i
    if s.startswith("'", i):
        j = i + 1
        parts = []
        while True:
            k = s.find("'", j)
            if k < 0:
                raise TDParseError(f"unterminated literal at {i} in {s[:200]!r}")
            parts.append(s[j:k])
            if s.startswith("''", k):
                parts.append("'")
                j = k + 2
                continue
            cur.i = k + 1
            return "".join(parts)
    if s.startswith("B'", i):  # bit / varbit
        k = s.index("'", i + 2)
        cur.i = k + 1
        return s[i + 2:k]
    j = s.find(" ", i)
    j = len(s) if j < 0 else j
    word = s[i:j]
    cur.i = j
    if word == "null":
        return None
    if word == "unchanged-toast-datum":
        return UNCHANGED_TOAST
    if word == "true":
        return "t"
    if word == "false":
        return "f"
    return word


def pgoutput_records(reader: Any, *, raw: bool = False) -> list[Any]:
    """The records of a capture file's ``reader`` that hold pgoutput messages: not the capture's own record
    kinds (the snapshot section's, and SlotConfirmed, where the slot stood)."""
    from replwire.codec.stream import snapshot_records

    return [r for r in reader.records(raw=raw) if (data := r[3] if raw else r.data)[:1] == b""
            or data[0] not in snapshot_records.KINDS]


def commit_ends(path: Any) -> list[int]:
    """The end positions of the commits a capture file holds."""
    from replwire.codec import Commit, Decoder
    from replwire.codec.io.capture_file import read_capture

    ends = []
    with read_capture(path) as reader:
        decoder = Decoder(proto_version=reader.header.proto_version)
        for _, _, _, data in pgoutput_records(reader, raw=True):
            message = decoder.feed(data)
            if isinstance(message, Commit):
                ends.append(int(message.end_lsn))
    return ends
