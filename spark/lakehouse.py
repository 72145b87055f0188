"""Lakehouse tables -- Delta (:mod:`replwire.spark.delta`) or Iceberg (:mod:`replwire.spark.iceberg`) -- brought
up to date with a stream's changes by ``replwire spark apply --format delta|iceberg``, once or as a capture
grows (:func:`follow`): the run around the sinks, and its mark of what it applied (:class:`_Through`).

Each table's changes past the position it holds (:mod:`replwire.spark.increment`) are written in one commit
that records the new position: exactly once, whatever killed a run before.  The change rows come from the
changes job (:func:`replwire.spark.dataset.write`), into ``OUT/_changes``, removed once every table is done.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .dataset import (
    ApplySummary,
    column_fills,
    dir_name,
    read_changes,
    rows_schema,
    shapes_by_table,
    truncations,
    write,
)

if TYPE_CHECKING:
    from replwire.codec.stream.tables import TableFilter

__all__ = ["apply_inputs", "follow"]


def follow(spark: Any, paths: Sequence[str], out: str, *, format: str, interval: float = 1.0,
           stopping: Callable[[], bool] = lambda: False, each: Callable[[ApplySummary], None] | None = None,
           proto_version: int | None = None, encoding: str | None = None, part_bytes: int | None = None,
           catalog: str | None = None, namespace: str | None = None, tables: TableFilter | None = None) -> int:
    """Keep the Delta or Iceberg tables of :func:`replwire.spark.jobs.apply` (``format``) up to date with
    capture files that are still growing (a running ``replwire capture`` writes them): each round applies what
    the files hold past the tables' positions (:func:`apply_inputs`, which leaves out the parts an earlier
    round applied), then waits until they have grown, looking every ``interval`` seconds.  ``each(summary)``
    hears every round that read something new; ``stopping()`` is asked between rounds and while waiting, and
    ends the loop.

    Exactly once as ``apply`` is: the tables record the position they hold in the commit that writes it,
    so a loop killed at any moment and started again applies each change once.  A record still being
    written at a file's end is left for the next round; damage inside a file ends the loop with an error.
    The inputs of a capture with rotation grow by each segment it goes on in (:func:`with_next_segments`).
    Returns the number of rounds that applied something."""
    from replwire.codec.split import open_inputs

    if format not in ("delta", "iceberg"):
        raise ValueError(f"only Delta and Iceberg tables can follow a capture, not {format!r}")
    looked: dict[str, int] = {}  # each capture file: the end of the records looked at so far
    rounds = 0
    paths = list(paths)
    while not stopping():
        inputs = open_inputs(paths, proto_version, encoding, need_text=True)
        more = with_next_segments(inputs[-1].path)
        if more:
            paths += more
            inputs = open_inputs(paths, proto_version, encoding, need_text=True)
        if _news(inputs, looked):
            result = apply_inputs(spark, inputs, out, format=format, part_bytes=part_bytes, overwrite=False,
                                  progress=None, catalog=catalog, namespace=namespace, tables=tables)
            if result.changes.damaged:
                raise ValueError("; ".join(result.changes.damaged))
            rounds += any(done.how != "none" for done in result.applied.values())
            if each is not None:
                each(result)
            continue
        waited = 0.0
        while waited < interval and not stopping():
            time.sleep(min(0.1, interval))
            waited += 0.1
    return rounds


def with_next_segments(path: str) -> list[str]:
    """The segments a capture with rotation went on in after the capture file ``path``, one after another, that
    exist now (none for a file that is no segment: see :func:`~replwire.codec.io.follow.next_segment`)."""
    from replwire.codec.io.capture_file import read_capture
    from replwire.codec.io.follow import next_segment

    found: list[str] = []
    while True:
        with read_capture(path) as reader:
            after = next_segment(path, reader.header.segment)
        if after is None or not os.path.exists(after):
            return found
        found.append(after)
        path = after


def _news(inputs: list[Any], looked: dict[str, int]) -> bool:
    """Whether ``inputs`` hold records past ``looked`` (updated: each capture file's end of whole records)
    other than a running capture's confirmations of the slot's position, which it appends while the server's
    WAL moves with nothing for it; always for the first look, and for COPY-CSV inputs that grew."""
    from replwire.codec.io.capture_file import read_capture
    from replwire.codec.stream.snapshot_records import CONFIRMED

    others = frozenset(range(256)) - {CONFIRMED}  # (records passed over are only counted: a quick look)
    new = not looked
    for source in inputs:
        start = looked.get(source.path, source.first)
        if source.size <= start:
            continue
        if source.form != "capture":
            looked[source.path] = source.size
            new = True
            continue
        reading = read_capture(source.path).records(start, source.size, raw=True, skip=others, closing=True)
        for record in reading:
            new = new or record[4] > 0
        new = new or reading.skipped > 0
        # (a record that began within the size the round reads but ends past it: looked at again next time)
        looked[source.path] = reading.end if reading.end <= source.size else start
    return new


def apply_inputs(spark: Any, inputs: list[Any], out: str, *, format: str, part_bytes: int | None,
                 overwrite: bool, progress: Callable[[int, int], None] | None, catalog: str | None,
                 namespace: str | None, tables: TableFilter | None = None) -> ApplySummary:
    """:func:`replwire.spark.jobs.apply` of ``inputs`` (opened) into lakehouse tables, Delta
    (:mod:`replwire.spark.delta`: ``out/<schema>.<table>/``) or Iceberg (:mod:`replwire.spark.iceberg`: the
    table ``<table>`` in the namespace ``<schema>``, or ``namespace`` when one is given, of ``catalog``, by
    default ``out/catalog.db`` with ``out`` as its warehouse): each table's changes past the position it
    holds, in one commit that records the new one.  The change rows are written to ``out/_changes`` first,
    and removed once every table is done; when one of the tables they change holds another stream's
    changes, or was not written by apply, it is refused before any table is written.  ``overwrite`` removes
    ``out`` first.

    The parts of the inputs that an earlier run applied whole are not decoded again (:class:`_Through`)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from .increment import stream_id

    app_id = stream_id(inputs[0].header)
    target, apply_table = _sink(format, out, catalog, namespace, overwrite, app_id)
    through = _Through.read(out, app_id)
    targets: dict[str, Any] = {}

    def table_target(last: dict[str, Any]) -> Any:
        found = targets.get(last["table"])
        if found is None:
            found = targets[last["table"]] = target(last)
        return found

    covered: list[tuple[int, int]] = []  # the plan's lowest and highest commit LSN

    def applied(plan: Any, shapes: list[Any]) -> int | None:
        ranges = [found for part in plan.parts for found in [part.commits()] if found is not None]
        if ranges:
            covered.append((min(r[0] for r in ranges), max(r[1] for r in ranges)))
        if through is None or not covered or covered[0][0] < through.start:
            return None
        for v in shapes:  # each table of the run, as the run that wrote the mark left it (none it left out)
            if v.name not in through.positions or through.positions[v.name] != \
                    table_target({"table": v.name, "schema": v.schema, "name": v.table}).position:
                return None
        return through.end

    changes_dir = os.path.join(out, "_changes")
    summary = write(spark, inputs, changes_dir, part_bytes=part_bytes, overwrite=True, progress=progress,
                       tables=tables, applied=applied)
    by_table = shapes_by_table(changes_dir)
    try:
        chosen = {table: table_target(entries[-1]) for table, entries in by_table.items()}
        refused = [why for found in chosen.values() for why in [found.foreign()] if why]
        if refused:
            raise ValueError("; ".join(refused))
    except ValueError:
        shutil.rmtree(changes_dir)
        raise
    applied_now = {}
    for table, entries in by_table.items():
        last = entries[-1]
        arrow_schema = to_arrow_schema(rows_schema(last)[0], timezone="UTC")
        keyed = bool(last["key"]) and last["replica_identity"] != "f"
        applied_now[table] = apply_table(read_changes(changes_dir, entries, arrow_schema), chosen[table],
                                         last["columns"], last["key"] if keyed else last["columns"], keyed,
                                         truncations(entries), arrow_schema,
                                         column_fills(changes_dir, entries[1:], set(entries[0]["columns"])))
    shutil.rmtree(changes_dir)
    if covered:
        start = covered[0][0] if summary.skipped == 0 or through is None else min(covered[0][0], through.start)
        _Through(app_id, start, covered[0][1],
                 {table: done.position if done.how != "none" else chosen[table].position
                  for table, done in applied_now.items()}).write(out)
    return ApplySummary(out, {table: done.rows for table, done in applied_now.items()}, summary, applied_now)


@dataclass
class _Through:
    """What a run of :func:`apply_inputs` that ended well leaves in ``OUT/_replwire_applied.json``, so that
    the next one need not decode what it applied: every change of the stream ``stream`` committed from
    ``start`` through ``end`` (commit LSNs) is in its table, which then held ``positions`` (by source table;
    ``None``: no table).  A next run trusts it only for the same stream, inputs that begin no earlier than
    ``start``, and tables that still hold those positions (none written since by other means, none restored
    to an older version); else it decodes everything, as a run without the file does."""

    stream: str
    start: int
    end: int
    positions: dict[str, int | None]

    NAME = "_replwire_applied.json"

    @classmethod
    def read(cls, out: str, stream: str) -> _Through | None:
        try:
            with open(os.path.join(out, cls.NAME), encoding="utf-8") as handle:
                found = json.load(handle)
            through = cls(found["stream"], int(found["start"]), int(found["end"]), dict(found["positions"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return through if through.stream == stream else None

    def write(self, out: str) -> None:
        path = os.path.join(out, self.NAME)
        with open(path + ".new", "w", encoding="utf-8") as handle:
            json.dump({"stream": self.stream, "start": self.start, "end": self.end, "positions": self.positions},
                      handle)
        os.replace(path + ".new", path)


def _sink(format: str, out: str, catalog: str | None, namespace: str | None, overwrite: bool,
          app_id: str) -> tuple[Callable[[dict[str, Any]], Any], Callable[..., Any]]:
    """A lakehouse format's target of a table (made from its last shape in the manifest; it knows the
    table's position and :meth:`foreign`) and the function that applies changes to one (``apply_table``),
    once ``out`` is there (emptied first with ``overwrite``)."""
    from . import delta, iceberg

    if format == "delta":
        delta.need_deltalake()
        if catalog is not None or namespace is not None:
            raise ValueError("a catalog and a namespace are Iceberg's: --format delta takes neither")
    else:
        iceberg.need_pyiceberg()
        if overwrite and catalog is not None:
            raise ValueError("--overwrite empties OUT, not the tables of a catalog elsewhere (--catalog): "
                             "drop them from it instead")
    if overwrite and os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)
    if format == "delta":
        return (lambda last: delta.DeltaTarget(os.path.join(out, dir_name(last["table"])), app_id),
                delta.apply_table)
    tables = iceberg.catalog(out, catalog)
    taken: dict[tuple[str, str], str] = {}  # the Iceberg tables of the run -> their source tables

    def target(last: dict[str, Any]) -> Any:
        name = iceberg.identifier(last["schema"], last["name"], namespace)
        if taken.setdefault(name, last["table"]) != last["table"]:  # only with a namespace given
            raise ValueError(f"{taken[name]} and {last['table']} would both be the Iceberg table "
                             f"{'.'.join(name)}: leave out --namespace (each schema is a namespace then)")
        return iceberg.IcebergTarget(tables, name, app_id, last["table"])
    return target, iceberg.apply_table
