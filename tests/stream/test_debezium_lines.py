"""Debezium's lines written from the wire tuples are the dict path's: ``DebeziumEvents.lines`` against
``ENCODE`` of ``DebeziumEvents.events`` on typed items, on real captures and on drawn streams.

The envelope's ``ts_ms``/``ts_us``/``ts_ns`` (and a lone message's ``source`` times) are the time the
event is made: they are masked before comparing, and checked to lie within the run."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replwire.codec import LSN, Delete, Insert, Relation, Update, parse
from replwire.codec.decode import Written, committed
from replwire.codec.split import open_inputs
from replwire.codec.stream.debezium import DebeziumEvents
from replwire.codec.stream.jsonl import ENCODE, RowJson
from replwire.codec.stream.values import ValueLoader
from replwire.codec.wire import fast
from tests.split.test_row_path import FORMS, SUFFIX, interleaved_streams, streams, write_stream

_NOW = re.compile(r'"op":"(.)","ts_ms":(\d+),"ts_us":(\d+),"ts_ns":(\d+)')
_SOURCE_TIMES = re.compile(r'"ts_ms":(\d+),"ts_us":(\d+),"ts_ns":(\d+),"snapshot"')


def masked(lines: list[str], start_us: int, end_us: int) -> list[str]:
    """``lines`` with the time-of-making fields masked, once checked to be one instant within the run."""
    out = []
    for line in lines:
        found = _NOW.search(line)
        if found is None:
            assert line == "null"
            out.append(line)
            continue
        ms, us, ns = (int(found.group(i)) for i in (2, 3, 4))
        assert start_us <= us <= end_us and ms == us // 1000 and ns == us * 1000
        line = _NOW.sub(r'"op":"\1",NOW', line)
        if '"transaction":' not in line:  # outside a transaction, the source's time is the time of making too
            line = _SOURCE_TIMES.sub('NOW,"snapshot"', line)
        out.append(line)
    return out


def run(paths, proto_version, *, wire: bool, compiled_rows: bool = True, tombstones: bool = True,
        row_path: bool = False):
    """The lines of ``paths`` (masked) and the error they end with: from the wire tuples (``wire``), else
    ``ENCODE`` of the events of typed items; with ``row_path``, the compiled row path renders the events of
    the row changes inside transactions, as ``replwire decode --format debezium`` has it."""
    start = time.time_ns() // 1000
    out: list[str] = []
    error = None
    try:
        inputs = open_inputs(paths, None if str(paths[0]).endswith(".rwc") else proto_version)
        events = DebeziumEvents("9.9.9", db="db\"é", tombstones=tombstones, encoding=inputs[0].encoding)
        if wire and not compiled_rows:  # RowJson's Python writer all through
            events._rows = RowJson(ValueLoader(inputs[0].encoding))
            events._rows._compiled = None
        for item in committed(inputs, rows=not wire, lines=events if row_path else None):
            if isinstance(item, Written):  # whole transactions' events the row path wrote
                out += item.data.decode().split("\n")[:-1]
            elif wire:
                for line in events.lines(item):
                    out += line.decode().split("\n")[:-1] if isinstance(line, bytes) else [line]
            else:
                out += map(ENCODE, events.events(item))
    except Exception as caught:  # noqa: BLE001 - compared between the two writers
        error = (type(caught), str(caught))
    return masked(out, start, time.time_ns() // 1000), error


def same(paths, proto_version, *, tombstones: bool = True) -> list[str]:
    expected, expected_error = run(paths, proto_version, wire=False, tombstones=tombstones)
    ways = [(True, True), (True, False), (False, False)] if fast.COMPILED is not None else [(False, False)]
    for compiled_rows, row_path in ways:
        lines, error = run(paths, proto_version, wire=True, compiled_rows=compiled_rows, tombstones=tombstones,
                           row_path=row_path)
        assert error == expected_error
        assert lines == expected
    return expected


@pytest.mark.server
def test_real_captures(pg_captures, tmp_path):
    events = 0
    for n, capture in enumerate(pg_captures.captures):
        path = write_stream(tmp_path / f"{n}.csv", [(int(LSN(lsn)), xid, data) for lsn, xid, data in capture.rows],
                            "copy-csv", capture.proto_version)
        lines = same([path], capture.proto_version, tombstones=n % 2 == 0)
        events += len(lines)
    assert events > 100


def server_bools(rows) -> bool:
    """Whether every bool column's text value in ``rows`` is one the server writes (``t`` or ``f``): the row
    writers (:class:`RowJson`, in C and Python) write any other text as ``false``, where the typed value of
    ``true`` is true; the server never sends one (boolout writes ``t``/``f``)."""
    bools: dict[int, list[bool]] = {}
    for _, _, data in rows:
        message = parse(data, proto_version=1)
        if isinstance(message, Relation):
            bools[message.relation_id] = [c.type_id == 16 for c in message.columns]
        elif isinstance(message, (Insert, Update, Delete)):
            for image in (getattr(message, name, None) for name in ("new", "old", "key")):
                for column, is_bool in zip(image or (), bools[message.relation_id]):
                    if is_bool and column.kind == "t" and column.data not in (b"t", b"f"):
                        return False
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                   HealthCheck.filter_too_much])
@given(rows=streams().filter(server_bools), form=st.sampled_from(FORMS), tombstones=st.booleans())
def test_drawn_streams(tmp_path_factory, rows, form, tombstones):
    same([write_stream(tmp_path_factory.mktemp("drawn") / f"stream.{SUFFIX[form]}", rows, form, 1)], 1,
         tombstones=tombstones)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(rows=interleaved_streams(), form=st.sampled_from(FORMS), tombstones=st.booleans())
def test_interleaved_streamed_and_two_phase_transactions(tmp_path_factory, rows, form, tombstones):
    """Streamed, prepared and plain transactions interleaved, subtransactions aborted, the table's shape
    changing mid-stream (:func:`~tests.split.test_row_path.interleaved_streams`): the events the compiled row
    path renders inside them are the typed dicts' events."""
    same([write_stream(tmp_path_factory.mktemp("interleaved") / f"s.{SUFFIX[form]}", rows, form, 4)], 4,
         tombstones=tombstones)
