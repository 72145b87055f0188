"""A running capture watched from outside: its metrics served as OpenMetrics/Prometheus text over HTTP, and
guards that warn before the server lets go of the slot's WAL.

Strategy: nothing is counted twice.  The stream loop already keeps its counters and positions in
:class:`~replwire.codec.io.positions.Progress` (and the commit message of the last transaction it wrote, the
backfill it runs); a collector reads them when a scrape asks (:class:`CaptureMetrics`), so the loop pays
nothing per message.  What only the server knows -- the slot's ``confirmed_flush_lsn``, ``wal_status`` and
``safe_wal_size``, and ``idle_replication_slot_timeout`` (PostgreSQL 18) -- is read by :class:`SlotPoller`, a
thread of its own with its own ordinary connection (autocommit: it never holds a transaction open), every
``interval`` seconds, never blocking the stream; a failed poll keeps the last state and tries again at the
next.  :class:`Guards` turns each state into warnings, said once when a condition starts and once when it
ends, and into the ``replwire_capture_slot_warning`` metric.  Every capture has its own
``CollectorRegistry``, so captures in one process (and tests) never share series.
"""

from __future__ import annotations

import ipaddress
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from ..errors import ReplwireError
from ..scalars import LSN, PG_EPOCH
from ..wire.fast import parse
from .connection import connect

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from .live import LiveCapture

__all__ = ["APPLICATION", "DEFAULT_WARN_SAFE_WAL", "POLL_INTERVAL", "REASONS", "WAL_STATUSES", "CaptureMetrics",
           "Guards", "SlotPoller", "SlotState", "parse_listen", "read_slot_state"]

#: ``--warn-safe-wal``'s default: warn when the server may remove the slot's WAL after 1 GiB more of WAL.
DEFAULT_WARN_SAFE_WAL = 1 << 30
#: The application_name of the poller's connection.
APPLICATION = "replwire capture: slot poller"
#: Seconds between two reads of the slot's state.
POLL_INTERVAL = 10.0
#: The values of ``pg_replication_slots.wal_status`` (PostgreSQL 13 and later).
WAL_STATUSES = ("reserved", "extended", "unreserved", "lost")
#: The warnings :class:`Guards` gives, as the ``reason`` label of ``replwire_capture_slot_warning``.
REASONS = ("safe_wal_size", "wal_status", "idle_timeout")
#: The seconds a unit of ``pg_settings`` stands for (idle_replication_slot_timeout's unit).
_UNITS = {"ms": 0.001, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
#: The slot's state and the server's idle_replication_slot_timeout in one row, on any server (the columns
#: newer servers have are read through to_jsonb; the row comes even when the slot does not exist).
_QUERY = """
SELECT to_jsonb(s) ->> 'wal_status', (to_jsonb(s) ->> 'safe_wal_size')::bigint, s.confirmed_flush_lsn::text,
       (SELECT setting || ' ' || coalesce(unit, '') FROM pg_settings WHERE name = 'idle_replication_slot_timeout')
FROM (SELECT 1) AS one LEFT JOIN pg_replication_slots AS s ON s.slot_name = %s
"""
_UNIX_PG_EPOCH = PG_EPOCH.timestamp()


def parse_listen(text: str) -> tuple[str, int]:
    """``--metrics``'s ``[HOST:]PORT`` as an address and a port: ``9187`` is ``127.0.0.1:9187`` (loopback
    unless a host is named), an IPv6 host is written in brackets (``[::1]:9187``); port 0 is any free one."""
    match = re.fullmatch(r"(?:(\[[0-9A-Fa-f:.]+\]|[^:\[\]]+):)?(\d{1,5})", text.strip())
    if match is None or int(match.group(2)) > 65535:
        raise ValueError(f"{text!r} is not [HOST:]PORT (e.g. 9187, 0.0.0.0:9187, [::1]:9187)")
    host = match.group(1) or "127.0.0.1"
    if host.startswith("["):
        host = str(ipaddress.IPv6Address(host[1:-1]))
    return host, int(match.group(2))


def _size_text(value: float) -> str:
    """Bytes as a person reads them, in binary units: ``512 B``, ``1.0 GiB``."""
    if abs(value) < 1024:
        return f"{value:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if abs(value) < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def _duration_text(seconds: float) -> str:
    """Seconds in the largest unit that says them exactly: ``2 d``, ``90 min``, ``45 s``."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


@dataclass(frozen=True)
class SlotState:
    """The slot as the server showed it at ``polled`` (Unix time): its ``wal_status`` and ``safe_wal_size``
    (``None`` when the server leaves them empty: no ``max_slot_wal_keep_size``, or a server before 13), its
    ``confirmed_flush_lsn`` (``None``: no such slot), and ``idle_timeout``: the server's
    ``idle_replication_slot_timeout`` in seconds (0: off, ``None``: a server without it)."""

    polled: float
    wal_status: str | None
    safe_wal_size: int | None
    confirmed_lsn: LSN | None
    idle_timeout: float | None


def read_slot_state(cur: Any, slot: str) -> SlotState:
    """The state of ``slot`` through the cursor ``cur`` (an ordinary connection's)."""
    cur.execute(_QUERY, (slot,))
    wal_status, safe, confirmed, timeout = cur.fetchone()
    idle: float | None = None
    if timeout is not None:
        value, _, unit = timeout.partition(" ")
        idle = float(value) * _UNITS.get(unit, 1.0)
    return SlotState(time.time(), wal_status, None if safe is None else int(safe),
                     None if confirmed is None else LSN(confirmed), idle)


class Guards:
    """Warnings about the slot's WAL, each said (to ``log``) once when its condition starts and once when it
    ends: ``safe_wal_size`` under ``warn_safe_wal`` bytes, ``wal_status`` ``unreserved`` or ``lost``, and an
    ``idle_replication_slot_timeout`` that invalidates a stopped capture's slot.  :attr:`active` holds the
    conditions that hold now, by reason (:data:`REASONS`)."""

    def __init__(self, slot: str, warn_safe_wal: int, log: Callable[[str], None]) -> None:
        self.slot, self.warn_safe_wal, self.log = slot, warn_safe_wal, log
        self.active: dict[str, str] = {}  # reason -> what the warning said (its state)

    def update(self, state: SlotState) -> None:
        name = repr(self.slot)
        found: dict[str, tuple[str, str]] = {}  # reason -> (state, warning)
        if state.safe_wal_size is not None and state.safe_wal_size < self.warn_safe_wal:
            found["safe_wal_size"] = ("low", (
                f"warning: slot {name}: safe_wal_size is {_size_text(state.safe_wal_size)}, under --warn-safe-wal "
                f"{_size_text(self.warn_safe_wal)}: after that much more WAL without this capture confirming, "
                "the server may remove WAL the slot needs (max_slot_wal_keep_size) and the slot is lost"))
        if state.wal_status in ("unreserved", "lost"):
            found["wal_status"] = (state.wal_status, (
                f"warning: slot {name}: wal_status is unreserved: the server is about to remove WAL the slot "
                "needs; unless this capture catches up first, the slot is lost at the next checkpoint"
                if state.wal_status == "unreserved" else
                f"warning: slot {name}: wal_status is lost: the server removed WAL the slot needs; it cannot "
                "be read further (capture from a new slot, with --snapshot or --backfill)"))
        if state.idle_timeout:
            found["idle_timeout"] = (str(state.idle_timeout), (
                f"warning: the server's idle_replication_slot_timeout is {_duration_text(state.idle_timeout)}: "
                f"while no capture reads slot {name} for longer than that, the server invalidates it at its next "
                "checkpoint (a stopped capture must be started again within that time)"))
        for reason, (now, warning) in found.items():
            if self.active.get(reason) != now:
                self.active[reason] = now
                self.log(warning)
        for reason in [r for r in self.active if r not in found]:
            del self.active[reason]
            self.log(f"slot {name}: {_cleared(reason, state)} (no longer warned about)")


def _cleared(reason: str, state: SlotState) -> str:
    """What ended the condition of ``reason``, as :class:`Guards` says it."""
    if reason == "wal_status":
        return f"wal_status is {state.wal_status} again"
    if reason == "idle_timeout":
        return "the server's idle_replication_slot_timeout is off now"
    if state.safe_wal_size is None:
        return "safe_wal_size is unlimited now (no max_slot_wal_keep_size)"
    return f"safe_wal_size is {_size_text(state.safe_wal_size)} now"


class SlotPoller:
    """Reads the slot's state (:func:`read_slot_state`) every ``interval`` seconds on a thread of its own
    and connection of its own (autocommit; statements limited to a few seconds), from :meth:`start` until
    :meth:`stop`; each state goes to ``on_state`` and stays in :attr:`state`.  A poll that fails (the server
    restarting, say) is tried again at the next; the connection is opened again when it was lost."""

    def __init__(self, dsn: str, slot: str, *, interval: float = POLL_INTERVAL,
                 on_state: Callable[[SlotState], None] | None = None) -> None:
        self.dsn, self.slot, self.interval, self.on_state = dsn, slot, interval, on_state
        self.state: SlotState | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="replwire-slot-poller", daemon=True)
        self._conn: Any = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop polling and close the connection (waiting at most ``timeout`` seconds for a poll under way)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _poll(self) -> None:
        import psycopg2

        try:
            while not self._stop.is_set():
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = connect(self.dsn)
                        self._conn.autocommit = True
                        with self._conn.cursor() as cur:  # (named for pg_stat_activity)
                            cur.execute("SET statement_timeout = '5s'; SET application_name = %s", (APPLICATION,))
                    with self._conn.cursor() as cur:
                        state = read_slot_state(cur, self.slot)
                except (psycopg2.Error, ReplwireError):  # (connect's CaptureError is a ReplwireError)
                    self._close()
                else:
                    self.state = state
                    if self.on_state is not None:
                        self.on_state(state)
                self._stop.wait(self.interval)
        finally:
            self._close()

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None


def _commit_time(last: tuple[int, bytes] | None) -> float | None:
    """The Unix time of the commit (or prepare, or rollback) message ``last`` (protocol version, bytes)."""
    if last is None:
        return None
    try:
        message = parse(last[1], proto_version=last[0], in_stream=False)
    except ReplwireError:
        return None
    for name in ("commit_time", "prepare_time", "rollback_time"):
        value = getattr(message, name, None)
        if value is not None:
            return _UNIX_PG_EPOCH + int(value) / 1e6
    return None


class CaptureMetrics(Collector):
    """The metrics and guards of one :class:`~replwire.codec.io.live.LiveCapture` (see the module's docstring):
    :meth:`start` before running it, :meth:`stop` after (also a context manager).  ``listen``: the address and
    port to serve ``/metrics`` on (``None``: no HTTP server, the guards only; port 0: any free one, then
    :attr:`address` tells it); ``warn_safe_wal``: the :class:`Guards`' threshold in bytes; ``poll_interval``:
    seconds between two reads of the slot's state; ``log``: the guards' warnings."""

    def __init__(self, capture: LiveCapture, listen: tuple[str, int] | None = None, *,
                 warn_safe_wal: int = DEFAULT_WARN_SAFE_WAL, poll_interval: float = POLL_INTERVAL,
                 log: Callable[[str], None] | None = None) -> None:
        self.capture, self.listen = capture, listen
        self.slot = capture.settings.slot
        self.log = log or (lambda line: None)
        self.guards = Guards(self.slot, warn_safe_wal, self.log)
        self.poller = SlotPoller(capture.dsn, self.slot, interval=poll_interval, on_state=self.guards.update)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self.started = time.time()
        self._counted: dict[str, int] = {}  # the counters' values as last served: they never go down
        self._lock = threading.Lock()
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int] | None:
        """Where ``/metrics`` is served (``None``: nowhere)."""
        if self._server is None:
            return None
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        """With ``listen``, start serving (an ``OSError`` when the port is taken) and say where; then start
        polling the slot."""
        from prometheus_client import start_http_server

        if self.listen is not None:
            self._server, self._thread = start_http_server(self.listen[1], self.listen[0], registry=self.registry)
            host, port = self.address or self.listen
            self.log(f"metrics at http://{f'[{host}]' if ':' in host else host}:{port}/metrics")
        self.poller.start()

    def stop(self) -> None:
        self.poller.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5.0)

    def __enter__(self) -> CaptureMetrics:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def collect(self) -> Iterator[Metric]:
        """The metrics as they stand (the registry calls this on every scrape)."""
        capture, progress, slot = self.capture, self.capture.progress, [self.slot]

        def gauge(name: str, text: str, value: float | None, unit: str = "") -> Iterator[Metric]:
            family = GaugeMetricFamily(f"replwire_capture_{name}", text, labels=["slot"], unit=unit)
            if value is not None:
                family.add_metric(slot, value)
            yield family

        yield from gauge("received_lsn", "The highest WAL position received from the server.",
                         progress.current_lsn)
        yield from gauge("flushed_lsn", "The highest position fsynced to the capture file and acknowledged as "
                         "flushed to the server.", progress.flushed_lsn)
        yield from gauge("server_wal_lsn", "The server's WAL end, as the stream last reported it.",
                         progress.server_lsn)
        yield from gauge("lag_bytes", "Bytes of WAL from the flushed position to the server's WAL end.",
                         progress.lag_bytes, "bytes")
        committed = _commit_time(capture.last_completed)
        yield from gauge("lag_seconds", "Seconds since the commit of the last transaction written to the file.",
                         None if committed is None else max(0.0, time.time() - committed), "seconds")
        yield from gauge("start_time_seconds", "When the capture started (Unix time).", self.started, "seconds")
        with self._lock:
            for name, text, value in (
                    ("messages", "Messages written to the capture file.", progress.messages),
                    ("transactions", "Transactions (and prepares, rollbacks and non-transactional messages) "
                                     "written to the capture file.", progress.transactions),
                    ("bytes", "Bytes of pgoutput messages written to the capture file.", progress.bytes),
                    ("reconnects", "Connections lost and made again.", capture.reconnects)):
                self._counted[name] = value = max(value, self._counted.get(name, 0))  # (records cut and sent again)
                counter = CounterMetricFamily(f"replwire_capture_{name}", text, labels=["slot"])
                counter.add_metric(slot, value)
                yield counter
        state = self.poller.state
        yield from gauge("confirmed_lsn", "The slot's confirmed_flush_lsn, as last polled.",
                         state.confirmed_lsn if state is not None else None)
        status = GaugeMetricFamily("replwire_capture_slot_wal_status", "The slot's wal_status (1: the one it has), "
                                   "as last polled.", labels=["slot", "status"])
        if state is not None and state.wal_status is not None:
            for name in WAL_STATUSES:
                status.add_metric([self.slot, name], float(state.wal_status == name))
        yield status
        yield from gauge("slot_safe_wal_size_bytes", "Bytes of WAL the server may write before the slot is at risk "
                         "of being lost (absent without max_slot_wal_keep_size).",
                         state.safe_wal_size if state is not None else None, "bytes")
        yield from gauge("slot_poll_time_seconds", "When the slot's state was last read (Unix time).",
                         state.polled if state is not None else None, "seconds")
        warning = GaugeMetricFamily("replwire_capture_slot_warning", "Whether a guard warns now (1), by reason.",
                                    labels=["slot", "reason"])
        active = dict(self.guards.active)
        for reason in REASONS:
            warning.add_metric([self.slot, reason], float(reason in active))
        yield warning
        backfill = capture.running_backfill
        rows = GaugeMetricFamily("replwire_capture_backfill_rows", "Rows a table's backfill run has copied.",
                                 labels=["slot", "table"])
        chunks = GaugeMetricFamily("replwire_capture_backfill_chunks", "Chunks a table's backfill run has copied.",
                                   labels=["slot", "table"])
        estimate = GaugeMetricFamily("replwire_capture_backfill_estimate_rows",
                                     "The table's rows as the planner last counted them when its run began.",
                                     labels=["slot", "table"])
        done = GaugeMetricFamily("replwire_capture_backfill_done", "Whether a table's backfill run ended (1).",
                                 labels=["slot", "table"])
        for run in list(backfill.runs) if backfill is not None else ():
            rows.add_metric([self.slot, run.name], run.rows)
            chunks.add_metric([self.slot, run.name], run.chunk)
            if run.estimate is not None:
                estimate.add_metric([self.slot, run.name], run.estimate)
            done.add_metric([self.slot, run.name], float(run.ended is not None))
        yield from (rows, chunks, estimate, done)
