"""Split decoding: a captured stream cut into parts that decode independently, with the same result as the
single-process :class:`~replwire.codec.Assembler`.

Strategy: a change needs three things from outside the bytes around it -- the Relation/Type messages in
force, the stream state (inside a Stream Start block or not, which transaction is open), and the fate of its
transaction (committed, aborted, a rolled-back subtransaction, prepared then committed or rolled back,
repeated after a resume).  A cheap first pass, :func:`plan`, reads the inputs once in order, runs the
:class:`~replwire.codec.Decoder` and :class:`~replwire.codec.routing.Router` on every message *except* the
row changes (for those it reads only the tag byte and notes which transaction they belong to), and cuts
the inputs into :class:`Part` s at record boundaries.  Each part carries the router's state where it begins
and the outcomes of just the transactions that have changes inside it.  :func:`decode_part` then runs the
same decoder and router from that state over the part's records and yields the changes whose transaction
was committed (once: a transaction seen again after a resume is skipped, as ``replwire decode`` does),
each with its transaction's commit facts and its stream *position* -- ``(input << 48) | byte offset`` --
which orders changes within a transaction.  Nothing here knows about Spark: :mod:`replwire.spark` maps
parts onto Spark partitions.

Inputs are consecutive segments of one stream, in order: replwire capture files and the COPY-CSV form
(``COPY (SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(...)) TO STDOUT WITH (FORMAT csv)``),
which records no protocol version, so one must be given for it.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .assembler import Assembler, Change, ChangeMaker, Transaction
from .capture_file import (
    CaptureFileError,
    TailProblem,
    is_capture_file,
    read_capture,
    read_copy_csv,
)
from .collector import fewer_collections
from .decoder import Decoder
from .messages import Relation, Type
from .routing import CHANGE, COMMIT, DROP, DROP_SUBXACT, LONE, ORIGIN, PREPARE, Router
from .scalars import LSN, Timestamp

__all__ = ["Decoded", "Input", "Outcome", "Part", "Plan", "RelationVersion", "Shapes", "committed", "decode_part",
           "open_inputs", "plan", "read_records"]

_POSITION_BITS = 48
#: Tags of the messages the first pass does not parse (their transaction is all it needs).
_ROW_TAGS = frozenset(b"IUDT")
_NO_FACTS: dict[str, Any] = {}
_NO_SUBXACTS: frozenset[int] = frozenset()
_PROGRESS_BYTES = 4 << 20  # how often the first pass reports progress


@dataclass(frozen=True)
class Input:
    """One input file: ``form`` is ``"capture"`` or ``"copy-csv"``; records start at ``first``."""

    path: str
    form: str
    proto_version: int
    size: int
    first: int
    index: int = 0

    def position(self, offset: int) -> int:
        """The stream position of the record at ``offset``."""
        return (self.index << _POSITION_BITS) | offset


def open_inputs(paths: Sequence[str | os.PathLike[str]], proto_version: int | None = None) -> list[Input]:
    """Look at each input: its form, protocol version and size.  Capture files record their protocol
    version; COPY-CSV files need ``proto_version``.  All inputs must agree."""
    out: list[Input] = []
    for index, raw in enumerate(paths):
        path = os.fspath(raw)
        if not os.path.exists(path):
            raise CaptureFileError(path, "no such file")
        if is_capture_file(path):
            with read_capture(path) as reader:
                version, first = reader.header.proto_version, reader.valid_end
            form = "capture"
        elif proto_version is None:
            raise CaptureFileError(path, "not a capture file, and no protocol version was given for the "
                                         "COPY-CSV form (proto_version / --proto-version)")
        else:
            version, first, form = proto_version, 0, "copy-csv"
        if proto_version is not None and form == "capture" and version != proto_version:
            raise CaptureFileError(path, f"captured with protocol version {version}, but {proto_version} was "
                                         f"given")
        out.append(Input(path, form, version, os.path.getsize(path), first, index))
    versions = sorted({i.proto_version for i in out})
    if len(versions) > 1:
        raise CaptureFileError(out[0].path, f"the inputs were captured with different protocol versions: "
                                            f"{versions}")
    if not out:
        raise ValueError("no inputs")
    if len(out) >= 1 << (63 - _POSITION_BITS):
        raise ValueError("too many inputs for one stream")
    return out


def read_records(source: Input, start: int | None = None, stop: int | None = None,
                 tail: Callable[[TailProblem], None] | None = None, *, raw: bool = False) -> Iterator[Any]:
    """The records (:class:`~replwire.codec.capture_file.CaptureRecord` s; ``raw=True``: ``(offset, lsn, xid, data)`` tuples) of
    ``source`` that start at offsets in ``[start, stop)`` (``start`` a record boundary).

    A torn or corrupt tail of a capture file ends the records; it is handed to ``tail`` if given.
    """
    if source.form == "capture":
        with read_capture(source.path) as reader:
            yield from reader.raw_records(start, stop) if raw else reader.records(start, stop)
            if reader.tail is not None and tail is not None and (stop is None or reader.tail.offset < stop):
                tail(reader.tail)
        return
    yield from read_copy_csv(source.path, source.first if start is None else start, stop, raw=raw)


# ---------------------------------------------------------------------------------------------------------
# the first pass


@dataclass(slots=True)
class Outcome:  # not frozen: one is made per transaction, in the serial first pass
    """A committed transaction's facts (as :class:`~replwire.codec.Transaction` has them, without the
    changes), and the subtransactions whose changes were rolled back."""

    xid: int
    commit_lsn: LSN
    end_lsn: LSN
    commit_time: Timestamp
    origin: tuple[str, LSN] | None = None
    gid: str | None = None
    prepare_lsn: LSN | None = None
    prepare_time: Timestamp | None = None
    streamed: bool = False
    dropped_subxacts: frozenset[int] = frozenset()


@dataclass(frozen=True)
class RelationVersion:
    """One shape of a table: ``version`` counts from 1 and goes up when a Relation message for the same
    ``schema.table`` differs from the previous one (columns, types, key flags, replica identity)."""

    schema: str
    table: str
    version: int
    relation: Relation
    types: tuple[Type | None, ...]
    position: int

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"


class Shapes:
    """Which shape of a table is in force at a stream position: the last of its :class:`RelationVersion` s
    that came before."""

    def __init__(self, versions: Sequence[RelationVersion]) -> None:
        self._by_table: dict[str, list[RelationVersion]] = {}
        for version in versions:
            self._by_table.setdefault(version.name, []).append(version)
        self._starts = {name: [v.position for v in vs] for name, vs in self._by_table.items()}

    def at(self, table: str, position: int) -> RelationVersion | None:
        """The shape of ``table`` (``schema.table``) in force at ``position``, ``None`` before its first."""
        starts = self._starts.get(table)
        index = bisect.bisect_right(starts, position) - 1 if starts else -1
        return self._by_table[table][index] if index >= 0 else None


@dataclass
class Part:
    """A run of records of one input, decodable on its own with :func:`decode_part`."""

    number: int
    source: Input
    start: int
    stop: int
    state: dict[str, Any]
    outcomes: Mapping[int, Outcome] = field(default_factory=dict)
    repeated_lone: frozenset[int] = frozenset()
    records: int = 0

    @property
    def size(self) -> int:
        return self.stop - self.start

    def __reduce__(self) -> tuple[Any, ...]:
        # Parts travel to the workers pickled.  Their outcomes -- tens of thousands of small objects holding
        # LSN and Timestamp ints -- go as a few lists of plain values, and become objects again only when the
        # part is decoded: pickled and unpickled one object at a time they took longer than the part took
        # to decode (measured: 5.9 s for the 8 parts of a 1M-message capture, now 0.4 s).
        outcomes = self.outcomes
        packed = outcomes if isinstance(outcomes, _PackedOutcomes) else _PackedOutcomes(_pack_outcomes(outcomes))
        return (Part, (self.number, self.source, self.start, self.stop, self.state, packed, self.repeated_lone,
                       self.records))

    def outcome_table(self) -> dict[int, Outcome]:
        """``outcomes`` as a plain dict (unpacked first if the part arrived pickled)."""
        outcomes = self.outcomes
        return outcomes.table() if isinstance(outcomes, _PackedOutcomes) else outcomes  # type: ignore[return-value]


class _PackedOutcomes(Mapping[int, Outcome]):
    """A part's outcomes as they travel: a few lists of plain values, made into Outcomes on first use."""

    def __init__(self, packed: tuple[list[Any], ...]) -> None:
        self.packed = packed
        self._table: dict[int, Outcome] | None = None

    def table(self) -> dict[int, Outcome]:
        if self._table is None:
            self._table = _unpack_outcomes(self.packed)
        return self._table

    def __getitem__(self, key: int) -> Outcome:
        return self.table()[key]

    def __iter__(self) -> Iterator[int]:
        return iter(self.table())

    def __len__(self) -> int:
        return len(self.packed[0])

    def __reduce__(self) -> tuple[Any, ...]:
        return (_PackedOutcomes, (self.packed,))


def _pack_outcomes(outcomes: dict[int, Outcome]) -> tuple[list[Any], ...]:
    values = outcomes.values()
    return (list(outcomes), [o.xid for o in values], [int(o.commit_lsn) for o in values],
            [int(o.end_lsn) for o in values], [int(o.commit_time) for o in values],
            [None if o.origin is None else (o.origin[0], int(o.origin[1])) for o in values],
            [o.gid for o in values], [None if o.prepare_lsn is None else int(o.prepare_lsn) for o in values],
            [None if o.prepare_time is None else int(o.prepare_time) for o in values],
            [o.streamed for o in values], [tuple(o.dropped_subxacts) for o in values])


def _unpack_outcomes(packed: tuple[list[Any], ...]) -> dict[int, Outcome]:
    keys, *columns = packed
    new = int.__new__  # the values were LSNs and Timestamps already: no need to check them again
    return {key: Outcome(xid, new(LSN, commit_lsn), new(LSN, end_lsn), new(Timestamp, commit_time),
                         None if origin is None else (origin[0], new(LSN, origin[1])), gid,
                         None if prepare_lsn is None else new(LSN, prepare_lsn),
                         None if prepare_time is None else new(Timestamp, prepare_time), streamed, frozenset(dropped))
            for key, (xid, commit_lsn, end_lsn, commit_time, origin, gid, prepare_lsn, prepare_time, streamed,
                      dropped) in zip(keys, zip(*columns))}


@dataclass
class Plan:
    """What :func:`plan` found: the parts, every table shape, and counts."""

    parts: list[Part]
    relations: list[RelationVersion]
    records: int = 0
    transactions: int = 0
    repeated: int = 0
    tails: list[tuple[str, TailProblem]] = field(default_factory=list)


def _shape(relation: Relation) -> tuple[Any, ...]:
    return (relation.replica_identity, tuple((c.flags, c.name, c.type_id, c.type_modifier)
                                             for c in relation.columns))


def plan(inputs: Sequence[Input], *, part_bytes: int = 32 * 2**20, min_parts: int = 1,
         progress: Callable[[int, int], None] | None = None) -> Plan:
    """The first pass: read every record once, cut the inputs into parts of about ``part_bytes`` (at least
    ``min_parts`` in all, inputs permitting), and resolve what each part needs from elsewhere.

    Raises what the decoder raises for a stream out of order (a Commit without Begin, ...).  Errors in row
    changes themselves (an Insert for an unknown relation, bad bytes) surface in :func:`decode_part`.
    ``progress(bytes_read, total_bytes)`` is called every 4 MiB of input and at the end.
    """
    with fewer_collections():
        return _plan(inputs, part_bytes, min_parts, progress)


def _plan(inputs: Sequence[Input], part_bytes: int, min_parts: int,
          progress: Callable[[int, int], None] | None) -> Plan:
    total = sum(i.size - i.first for i in inputs)
    target = max(1, min(part_bytes, total // max(1, min_parts)))
    decoder = Decoder(proto_version=inputs[0].proto_version)
    router = Router(decoder)
    parts: list[Part] = []
    keys: list[set[int]] = []
    outcomes: dict[int, Outcome] = {}
    pending: dict[int, dict[str, Any]] = {}  # key -> origin / prepare / streamed, for transactions not done
    dropped: dict[int, set[int]] = {}
    repeated_lone: list[set[int]] = []
    shapes: dict[tuple[str, str], tuple[Any, ...]] = {}
    versions: list[RelationVersion] = []
    result = Plan(parts, versions)
    last_end = -1
    done = 0  # bytes of the inputs before this one

    def new_part(source: Input, start: int) -> None:
        parts.append(Part(len(parts), source, start, start, router.state()))
        keys.append(set())
        repeated_lone.append(set())

    for source in inputs:
        if source.index:
            key = router.resume()
            if key is not None:
                pending.pop(key, None)
                dropped.pop(key, None)
        new_part(source, source.first)
        part, part_keys, cut = parts[-1], keys[-1], source.first + target
        # The hot path is a row change: only its transaction is noted.  Which one that is changes only with
        # the messages that are decoded, so it is worked out (and noted) once per run of row changes
        # (noted = False until then), and the decoder's message count catches up (skipped) before it
        # decodes again or its state is taken.  Records are counted in a local until the part ends.
        noted = False
        skipped = records = 0
        row_tags, streams = _ROW_TAGS, router.streams
        report_at = source.first + _PROGRESS_BYTES if progress is not None else float("inf")
        for offset, lsn, _, data in read_records(source, tail=lambda t, s=source: result.tails.append((s.path, t)),
                                                 raw=True):
            if offset >= cut and records:
                part.stop, part.records = offset, records
                decoder.index += skipped
                skipped = records = 0
                new_part(source, offset)
                part, part_keys, cut, noted = parts[-1], keys[-1], offset + target, False
            records += 1
            if offset >= report_at:
                progress(done + offset - source.first, total)  # type: ignore[misc]
                report_at = offset + _PROGRESS_BYTES
            if data and data[0] in row_tags:
                skipped += 1
                if not noted:
                    noted = True
                    row_key = streams.get(decoder.stream_xid) if decoder.in_stream else router.current  # type: ignore[arg-type]
                    if row_key is not None:
                        part_keys.add(row_key)
                continue
            decoder.index += skipped
            skipped = 0
            noted = False
            in_stream = decoder.in_stream
            message = decoder.feed(data)
            if isinstance(message, Relation):
                name = (message.namespace or "pg_catalog", message.name)
                shape = _shape(message)
                if shapes.get(name) != shape:
                    shapes[name] = shape
                    number = sum(1 for v in versions if (v.schema, v.table) == name) + 1
                    versions.append(RelationVersion(name[0], name[1], number, message,
                                                    tuple(decoder.types.get(c.type_id) for c in message.columns),
                                                    source.position(offset)))
                continue
            route = router.route(message, source.position(offset), in_stream)
            if route is None:
                continue
            kind = route.kind
            if kind is CHANGE:
                part_keys.add(route.key)  # type: ignore[arg-type]
            elif kind is LONE:
                end = lsn or None
                if end is not None and end <= last_end:
                    repeated_lone[-1].add(source.position(offset))
                    result.repeated += 1
                elif end is not None:
                    last_end = end
            elif kind is ORIGIN:
                pending.setdefault(route.key, {}).setdefault("origin", route.value)  # type: ignore[arg-type]
            elif kind is PREPARE:
                pending.setdefault(route.key, {})["prepare"] = route.value  # type: ignore[arg-type]
            elif kind is DROP_SUBXACT:
                dropped.setdefault(route.key, set()).add(route.value)  # type: ignore[arg-type]
            elif kind is COMMIT:
                commit = route.value
                facts = pending.pop(route.key, _NO_FACTS)  # type: ignore[arg-type]
                subxacts = dropped.pop(route.key, None)  # type: ignore[arg-type]
                if commit.end_lsn <= last_end:
                    result.repeated += 1
                    continue
                last_end = commit.end_lsn
                prepare = facts.get("prepare")
                # positional, in Outcome's field order: one is made per transaction
                outcomes[route.key] = Outcome(  # type: ignore[index]
                    getattr(commit, "xid", None) or facts["xid"], commit.commit_lsn, commit.end_lsn,
                    commit.commit_time, facts.get("origin"), getattr(commit, "gid", None),
                    prepare.prepare_lsn if prepare else None, prepare.prepare_time if prepare else None,
                    facts["streamed"], frozenset(subxacts) if subxacts else _NO_SUBXACTS)
                result.transactions += 1
            else:  # OPEN, DROP
                if kind is not DROP:
                    pending[route.key] = {"streamed": route.streamed, "xid": message.xid}  # type: ignore[index,attr-defined]
                    if route.value is not None:
                        pending.pop(route.value, None)
                        dropped.pop(route.value, None)
                else:
                    pending.pop(route.key, None)  # type: ignore[arg-type]
                    dropped.pop(route.key, None)  # type: ignore[arg-type]
        decoder.index += skipped
        parts[-1].stop, parts[-1].records = source.size, records
        done += source.size - source.first
    result.records = sum(p.records for p in parts)
    for part, part_keys, lone in zip(parts, keys, repeated_lone):
        part.outcomes = {k: outcomes[k] for k in part_keys if k in outcomes}
        part.repeated_lone = frozenset(lone)
    if progress is not None:
        progress(total, total)
    return result


# ---------------------------------------------------------------------------------------------------------
# the second pass


@dataclass(slots=True)
class Decoded:
    """One committed change from :func:`decode_part`: the change (see :class:`~replwire.codec.Change`; its
    ``row_schema`` is what its tuples' values are read with), its transaction's facts (``None`` for a
    non-transactional logical message), and its stream ``position``."""

    position: int
    change: Change
    outcome: Outcome | None


def decode_part(part: Part, *, typed: bool = True, rows: bool = True) -> Iterator[Decoded]:
    """The committed changes of one part, in stream order (see the module docstring).  ``typed=False``
    leaves the values as text (``str``) and bytes; ``rows=False`` makes no row dicts at all (``new``, ``old``
    and ``key`` stay ``None``), for callers that read the wire tuples of ``change.message`` with
    ``change.row_schema`` themselves."""
    with fewer_collections():
        yield from _decode_part(part, typed, rows)


def _decode_part(part: Part, typed: bool, rows: bool) -> Iterator[Decoded]:
    router = Router.from_state(part.state)
    decoder = router.decoder
    maker = ChangeMaker(typed=typed and rows, rows=rows)
    outcomes, repeated = part.outcome_table(), part.repeated_lone
    source = part.source
    base = source.position(0)
    new_lsn = int.__new__  # the records' LSNs are unsigned 64-bit already: no need to check them again
    for offset, lsn, _, data in read_records(source, part.start, part.stop, raw=True):
        in_stream = decoder.in_stream
        message = decoder.feed(data)
        position = base | offset
        route = router.route(message, position, in_stream)
        if route is None:
            continue
        if route.kind is CHANGE:
            outcome = outcomes.get(route.key)  # type: ignore[arg-type]
            if outcome is None or route.value in outcome.dropped_subxacts:
                continue
            schema = maker.schema_for(decoder, message)
            yield Decoded(position, maker.change(message, schema, new_lsn(LSN, lsn) if lsn else None, route.value),
                          outcome)
        elif route.kind is LONE and position not in repeated:
            yield Decoded(position, maker.change(message, None, new_lsn(LSN, lsn) if lsn else None, None), None)


def committed(inputs: Sequence[Input], *, typed: bool = True,
              tail: Callable[[str, TailProblem], None] | None = None) -> Iterator[Transaction | Change]:
    """The single-process way to the same result: every committed transaction (and non-transactional
    logical message) of ``inputs`` from one :class:`~replwire.codec.Assembler`, resumed between inputs, with
    what a resume sends again skipped (an item whose end is not past the last one's).  ``tail(path,
    problem)`` hears of a torn capture file tail."""
    assembler = Assembler(proto_version=inputs[0].proto_version, typed=typed)
    last_end = -1
    for source in inputs:
        if source.index:
            assembler.resume()
        for record in read_records(source, tail=(lambda t, p=source.path: tail(p, t)) if tail else None):
            for item in assembler.feed(record.data, lsn=record.lsn or None):
                end = item.end_lsn if isinstance(item, Transaction) else item.lsn
                if end is not None and end <= last_end:
                    continue
                if end is not None:
                    last_end = end
                yield item
