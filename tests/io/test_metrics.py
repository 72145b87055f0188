"""A running capture's metrics, scraped over HTTP and parsed as Prometheus text, judged against the server's
own view of the slot (``pg_replication_slots``, ``pg_current_wal_lsn()``, the commit timestamps); and the
guards, which warn once per change of the slot's state, on stderr and in a metric."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from replwire.codec import LSN
from replwire.codec.io.backfill_state import read_state
from replwire.codec.io.connection import CaptureSettings
from replwire.codec.io.live import LiveCapture
from replwire.codec.io.metrics import APPLICATION, REASONS, WAL_STATUSES, CaptureMetrics, parse_listen
from tests.conftest import ALL_MAJORS

REPLWIRE = os.path.join(os.path.dirname(sys.executable), "replwire")


def scrape(address) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample served at ``address``, by name and labels (the ``slot`` label left out)."""
    host, port = address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "slot"))
            samples[sample.name, labels] = sample.value
    return samples


def wait_for(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def slot_row(conn, slot):
    return conn.execute("SELECT confirmed_flush_lsn::text, wal_status, safe_wal_size, pg_current_wal_lsn()::text "
                        "FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()


def published(conn, table: str, slot: str) -> None:
    conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
    conn.execute(f"CREATE PUBLICATION {table}_pub FOR TABLE {table}")
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))


class Running:
    """A LiveCapture with its metrics, on a thread, until the block ends."""

    def __init__(self, server, out, table: str, slot: str, backfill=(), **metrics) -> None:
        settings = CaptureSettings(slot=slot, publication=f"{table}_pub", messages=bool(backfill))
        self.capture = LiveCapture(server.dsn, out, settings, create_slot=False, sync_interval=0.05,
                                   backfill=backfill)
        self.metrics = CaptureMetrics(self.capture, **metrics)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.capture.run, kwargs={"stop": self.stop})

    def __enter__(self) -> Running:
        self.metrics.start()
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(60)
        self.metrics.stop()
        assert not self.thread.is_alive()


@pytest.mark.server
@pytest.mark.parametrize("major", ALL_MAJORS)
def test_the_metrics_agree_with_the_server(major, request, tmp_path):
    server = request.getfixturevalue(f"pg{major}")
    table, slot, count = f"metrics_{major}", f"metrics_slot_{major}", 40
    with server.connect() as conn:
        published(conn, table, slot)
        before = LSN(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
        with Running(server, tmp_path / "m.rwcap", table, slot, listen=("127.0.0.1", 0), poll_interval=0.2) as run:
            address = run.metrics.address
            assert address is not None and address[0] == "127.0.0.1" and address[1] > 0
            for i in range(count):
                with conn.transaction():
                    conn.execute(f"INSERT INTO {table} VALUES (%s, 'x')", (i,))
                    xid = conn.execute("SELECT pg_current_xact_id()::xid::text").fetchone()[0]
            committed = float(conn.execute("SELECT extract(epoch FROM pg_xact_commit_timestamp(%s::xid))",
                                           (xid,)).fetchone()[0])
            end = LSN(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
            wait_for(lambda: LSN(slot_row(conn, slot)[0]) >= end, "the slot to confirm the workload")
            # a poll of the slot after that, and the poller holds no transaction open
            mark = time.time()
            wait_for(lambda: scrape(address).get(("replwire_capture_slot_poll_time_seconds", ()), 0) > mark,
                     "a poll of the slot")
            states = conn.execute("SELECT state FROM pg_stat_activity WHERE application_name = %s", (APPLICATION,))
            assert [s for (s,) in states.fetchall()] in (["idle"], ["active"])  # (never "idle in transaction")
            scraped_from = time.time()
            samples = scrape(address)
            scraped_to = time.time()
            confirmed, wal_status, safe_wal_size, wal_now = slot_row(conn, slot)

        def value(name, **labels):
            return samples[f"replwire_capture_{name}", tuple(sorted(labels.items()))]

        assert value("transactions_total") >= count
        assert value("messages_total") >= 3 * count  # Begin, Insert, Commit each
        assert value("bytes_total") >= 3 * count * 21  # (a Begin is 21 bytes, a Commit 26, an Insert more)
        assert value("reconnects_total") == 0
        assert end <= value("confirmed_lsn") <= LSN(confirmed)
        assert end <= value("flushed_lsn") <= LSN(wal_now)
        assert before < value("received_lsn") <= LSN(wal_now)
        assert value("server_wal_lsn") <= LSN(wal_now)
        assert 0 <= value("lag_bytes") <= LSN(wal_now) - end
        assert value("lag_bytes") == max(0, value("server_wal_lsn") - value("flushed_lsn"))
        # the last transaction written is the workload's last: its commit time, from the server's own record
        assert scraped_from - committed - 0.01 <= value("lag_seconds") <= scraped_to - committed + 0.01
        assert wal_status in WAL_STATUSES
        assert {s: value("slot_wal_status", status=s) for s in WAL_STATUSES} == {
            s: float(s == wal_status) for s in WAL_STATUSES}
        assert safe_wal_size is None  # (no max_slot_wal_keep_size on the shared servers) ...
        assert ("replwire_capture_slot_safe_wal_size_bytes", ()) not in samples  # ... so none served
        assert {r: value("slot_warning", reason=r) for r in REASONS} == dict.fromkeys(REASONS, 0.0)
        # stopped with the capture: nothing served any more, the poller's connection closed
        with pytest.raises(urllib.error.URLError):
            scrape(address)
        assert conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                            (APPLICATION,)).fetchone()[0] == 0
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


@pytest.mark.server
def test_backfill_rows_and_the_lag_of_a_capture_with_messages(own_server, tmp_path):
    # The backfill's watermarks are non-transactional messages, which complete positions too: the lag is
    # still the last transaction's.
    table, slot = "bf_metrics", "bf_metrics_slot"
    with own_server.connect() as conn:
        published(conn, table, slot)
        conn.execute(f"INSERT INTO {table} SELECT i, 'x' FROM generate_series(1, 2500) AS i")
        conn.execute(f"ANALYZE {table}")
        counted = conn.execute("SELECT reltuples FROM pg_class WHERE relname = %s", (table,)).fetchone()[0]
        with Running(own_server, tmp_path / "b.rwcap", table, slot, backfill=[f"public.{table}"],
                     listen=("127.0.0.1", 0)) as run:
            address, name = run.metrics.address, (("table", f"public.{table}"),)
            wait_for(lambda: scrape(address).get(("replwire_capture_backfill_done", name)) == 1, "the backfill")
            with conn.transaction():
                conn.execute(f"INSERT INTO {table} VALUES (0, 'after')")
                xid = conn.execute("SELECT pg_current_xact_id()::xid::text").fetchone()[0]
            conn.execute("SELECT pg_logical_emit_message(false, 'after', 'the last message')")
            end = LSN(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
            wait_for(lambda: scrape(address)[("replwire_capture_flushed_lsn", ())] >= end, "the message")
            committed = float(conn.execute("SELECT extract(epoch FROM pg_xact_commit_timestamp(%s::xid))",
                                           (xid,)).fetchone()[0])
            scraped_from = time.time()
            samples = scrape(address)
            scraped_to = time.time()
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    assert samples[("replwire_capture_backfill_rows", name)] == 2500
    assert samples[("replwire_capture_backfill_estimate_rows", name)] == counted == 2500
    (held,) = read_state(str(tmp_path / "b.rwcap")).runs.values()  # the chunks the file holds
    assert samples[("replwire_capture_backfill_chunks", name)] == held.chunk > 1
    assert scraped_from - committed - 0.01 <= samples[("replwire_capture_lag_seconds", ())] <= (
        scraped_to - committed + 0.01)


def configure(conn, **settings) -> None:
    """ALTER SYSTEM each setting (None: RESET it), and reload."""
    for name, setting in settings.items():
        if setting is None:
            conn.execute(f"ALTER SYSTEM RESET {name}")
        else:
            conn.execute(f"ALTER SYSTEM SET {name} = '{setting}'")
    conn.execute("SELECT pg_reload_conf()")
    for name, setting in settings.items():  # (the reload is asynchronous)
        wait_for(lambda: conn.execute("SELECT current_setting(%s)", (name,)).fetchone()[0]
                 == (setting or {"max_slot_wal_keep_size": "-1", "idle_replication_slot_timeout": "0"}[name]),
                 f"{name} to be reloaded")


@pytest.mark.server
def test_each_guard_warns_once_when_its_state_changes(own_server, tmp_path):
    table, slot = "guards", "guards_slot"
    said: list[str] = []
    with own_server.connect() as conn:
        published(conn, table, slot)
        try:
            with Running(own_server, tmp_path / "g.rwcap", table, slot, listen=("127.0.0.1", 0), poll_interval=0.1,
                         warn_safe_wal=1 << 40, log=said.append) as run:
                address = run.metrics.address

                def warns(reason):
                    return scrape(address)[("replwire_capture_slot_warning", (("reason", reason),))]

                assert wait_for(lambda: run.metrics.poller.state, "a first poll").safe_wal_size is None
                assert len(said) == 1 and warns("safe_wal_size") == warns("idle_timeout") == 0
                configure(conn, max_slot_wal_keep_size="64MB", idle_replication_slot_timeout="2d")
                wait_for(lambda: warns("safe_wal_size") == warns("idle_timeout") == 1, "both warnings")
                samples = scrape(address)
                safe = conn.execute("SELECT safe_wal_size FROM pg_replication_slots WHERE slot_name = %s",
                                    (slot,)).fetchone()[0]
                served = samples[("replwire_capture_slot_safe_wal_size_bytes", ())]
                assert 0 < served <= 80 << 20 and abs(served - safe) < 16 << 20  # (the server writes WAL of its own)
                assert samples[("replwire_capture_slot_warning", (("reason", "wal_status"),))] == 0
                time.sleep(1.0)  # ten polls more, in the same state
                configure(conn, max_slot_wal_keep_size=None, idle_replication_slot_timeout=None)
                wait_for(lambda: warns("safe_wal_size") == warns("idle_timeout") == 0, "both warnings to end")
                time.sleep(0.5)
        finally:
            configure(conn, max_slot_wal_keep_size=None, idle_replication_slot_timeout=None)
    assert re.fullmatch(r"metrics at http://127\.0\.0\.1:\d+/metrics", said.pop(0))
    warnings = [line for line in said if line.startswith("warning: ")]
    assert len(warnings) == 2 and len(said) == 4, said
    low = next(line for line in warnings if "safe_wal_size" in line)
    assert re.fullmatch(r"warning: slot 'guards_slot': safe_wal_size is \d+\.\d MiB, under --warn-safe-wal 1\.0 TiB: "
                        r".* \(max_slot_wal_keep_size\) and the slot is lost", low)
    idle = next(line for line in warnings if "idle_replication_slot_timeout" in line)
    assert "idle_replication_slot_timeout is 2 d: " in idle and "'guards_slot'" in idle
    ended = said[2:]
    assert sorted(ended) == ["slot 'guards_slot': safe_wal_size is unlimited now (no max_slot_wal_keep_size) "
                             "(no longer warned about)",
                             "slot 'guards_slot': the server's idle_replication_slot_timeout is off now "
                             "(no longer warned about)"]


@pytest.mark.server
def test_capture_metrics_and_warn_safe_wal_from_the_command_line(own_server, tmp_path):
    table, slot = "cli_metrics", "cli_metrics_slot"
    with own_server.connect() as conn:
        published(conn, table, slot)
        configure(conn, max_slot_wal_keep_size="64MB")
        try:
            capture = subprocess.Popen([REPLWIRE, "capture", "--dsn", own_server.dsn, "--slot", slot,
                                        "--publication", f"{table}_pub", "--no-create-slot", "--out",
                                        str(tmp_path / "c.rwcap"), "--metrics", "0", "--warn-safe-wal", "100MB"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                first = capture.stderr.readline()
                found = re.fullmatch(r"metrics at http://127\.0\.0\.1:(\d+)/metrics\n", first)
                assert found, first
                address = ("127.0.0.1", int(found.group(1)))
                warning = capture.stderr.readline()  # (the first poll is at the start)
                assert re.fullmatch(r"warning: slot 'cli_metrics_slot': safe_wal_size is \d+\.\d MiB, under "
                                    r"--warn-safe-wal 100\.0 MiB: .*\n", warning), warning
                for i in range(5):
                    conn.execute(f"INSERT INTO {table} VALUES (%s, 'x')", (i,))
                samples = wait_for(lambda: (s := scrape(address))[("replwire_capture_transactions_total", ())] >= 5
                                   and s, "the inserts to be counted")
                assert samples[("replwire_capture_slot_warning", (("reason", "safe_wal_size"),))] == 1
                assert samples[("replwire_capture_slot_safe_wal_size_bytes", ())] < 100 << 20
            finally:
                capture.send_signal(signal.SIGTERM)
                _, rest = capture.communicate(timeout=60)
        finally:
            configure(conn, max_slot_wal_keep_size=None)
    assert capture.returncode == 0, rest
    assert "warning" not in rest and "captured " in rest  # said once only


def test_listen_addresses_and_registries_of_their_own(tmp_path):
    assert parse_listen("9187") == ("127.0.0.1", 9187)  # loopback unless a host is named
    assert parse_listen("0.0.0.0:9187") == ("0.0.0.0", 9187)
    assert parse_listen("[::1]:0") == ("::1", 0)
    assert parse_listen("localhost:80") == ("localhost", 80)
    for bad in ("", "host:", "99999", "1:2:3", "[::1]", "x" * 300 + ":1:2"):
        with pytest.raises(ValueError, match="is not"):
            parse_listen(bad)
    settings = CaptureSettings(slot="s", publication="p")
    one, two = (CaptureMetrics(LiveCapture("", tmp_path / f"{n}.rwcap", settings)) for n in "ab")
    assert one.registry is not two.registry
    assert b"replwire_capture" not in generate_latest(REGISTRY)
    served = generate_latest(one.registry).decode()
    assert 'replwire_capture_messages_total{slot="s"} 0.0' in served
    # what a scraper asking for OpenMetrics gets, read back by its parser
    families = {f.name: f for f in openmetrics_families(openmetrics_latest(two.registry).decode())}
    assert families["replwire_capture_lag_bytes"].unit == "bytes"
    assert [s.value for s in families["replwire_capture_reconnects"].samples] == [0]
    result = subprocess.run([REPLWIRE, "capture", "--dsn", "", "--slot", "s", "--publication", "p", "--out",
                             str(tmp_path / "x.rwcap"), "--metrics", "host:port"], capture_output=True, text=True)
    assert result.returncode == 2 and "'host:port' is not [HOST:]PORT" in result.stderr
    result = subprocess.run([REPLWIRE, "capture", "--dsn", "", "--slot", "s", "--publication", "p", "--out",
                             str(tmp_path / "x.rwcap"), "--warn-safe-wal", "lots"], capture_output=True, text=True)
    assert result.returncode == 2 and "'lots' is not a size" in result.stderr
    with socket.socket() as taken:  # a port in use: refused before anything is done on the server
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([REPLWIRE, "capture", "--dsn", "", "--slot", "s", "--publication", "p", "--out",
                                 str(tmp_path / "x.rwcap"), "--metrics", str(port)], capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr == f"Error: cannot serve metrics on {port}: Address already in use\n"
    assert not (tmp_path / "x.rwcap").exists()
