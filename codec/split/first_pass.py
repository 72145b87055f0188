"""The first pass of split decoding: one cheap read of the inputs that cuts them into independently
decodable :class:`Part` s and resolves what each part needs from elsewhere.

Strategy: a change needs three things from outside the bytes around it -- the Relation/Type messages in
force, the stream state (inside a Stream Start block or not, which transaction is open), and the fate of its
transaction (committed, aborted, a rolled-back subtransaction, prepared then committed or rolled back,
repeated after a resume).  :func:`plan` reads the inputs once in order, runs the
:class:`~replwire.codec.Decoder` and :class:`~replwire.codec.stream.routing.Router` on every message *except*
the row changes (for those it reads only the tag byte and notes which transaction they belong to), and cuts
the inputs into parts at record boundaries.  Its reading is split from its decoding: runs of about 4 MiB of
records are each reduced to the records to decode and counts of the row changes between them (plain
Begin ... Commit transactions, the commonest case, arrive already parsed, consecutive ones as one block of
columns of numbers), and the merge decodes only those.  The compiled codec reads a run in C when it is
built (``skim_run``, see ``codec/wire/gen/c_skim.c``), with the same result; the Python reading does what
it declines (a torn or corrupt tail, a bad row).  Each part carries the router's state where it begins and
the :class:`~replwire.codec.stream.outcome.Outcome` s of just the transactions that have changes inside it,
packed into a few arrays (made into objects when the part is decoded); :mod:`replwire.codec.split.decode`
decodes it.
"""

from __future__ import annotations

import bisect
import os
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import Any

from ..collector import fewer_collections
from ..errors import DecodeError
from ..io.capture_file import Reading, TailProblem, read_capture
from ..io.copy_csv import read_copy_csv
from ..io.positions import message_completes
from ..io.record_plan import record_frame
from ..io.segments import Input, Reach
from ..messages import Begin, BeginPrepare, Commit, Relation, StreamStart, Type
from ..scalars import LSN, Timestamp
from ..stream import snapshot
from ..stream.decoder import IDLE, Decoder
from ..stream.outcome import Outcome
from ..stream.routing import CHANGE, COMMIT, DROP, DROP_SUBXACT, LONE, ORIGIN, PREPARE, Router
from ..wire.fast import ROWS, parse

__all__ = ["Part", "Plan", "RelationVersion", "Shapes", "plan"]

#: Tags of the messages the first pass does not parse (their transaction is all it needs), and the snapshot
#: section's rows (they belong to no transaction).
_ROW_TAGS = frozenset(b"IUDT") | {snapshot.ROWS}
_ROW_TAG_BYTES = bytes(sorted(_ROW_TAGS))
_NO_FACTS: dict[str, Any] = {}
_PROGRESS_BYTES = 4 << 20  # the largest run of records the first pass reads; it reports progress after each


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
    """A run of records of one input, decodable on its own with
    :func:`~replwire.codec.split.decode.decode_part`: the router's ``state`` where it begins, the
    ``outcomes`` of the committed transactions that have changes in it (by key), the subtransactions rolled
    back inside those that had any (``dropped_subxacts``, by key), and the positions of the lone logical
    messages in it that a resume sent again (``repeated_lone``)."""

    number: int
    source: Input
    start: int
    stop: int
    state: dict[str, Any]
    outcomes: Mapping[int, Outcome] = field(default_factory=dict)
    repeated_lone: frozenset[int] = frozenset()
    records: int = 0
    dropped_subxacts: Mapping[int, frozenset[int]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return self.stop - self.start

    def __reduce__(self) -> tuple[Any, ...]:
        # Parts travel to Spark's executors pickled.  Their outcomes -- tens of thousands of small objects
        # holding LSN and Timestamp ints -- go as a few arrays of plain values and become objects again only
        # when the part is decoded: pickling them one object at a time costs more than decoding the part.
        outcomes = self.outcomes
        packed = outcomes if isinstance(outcomes, _PackedOutcomes) else _PackedOutcomes(_pack_outcomes(outcomes))
        return (Part, (self.number, self.source, self.start, self.stop, self.state, packed, self.repeated_lone,
                       self.records, self.dropped_subxacts))

    def outcome_table(self) -> Mapping[int, Outcome]:
        """``outcomes`` ready for lookups: as they are, or, for a part that arrived pickled, its packed
        outcomes, each made into an Outcome when first looked up (a part's decoding looks up few of them
        where the compiled column path takes its plain transactions, which asks only which keys are there)."""
        return self.outcomes

    def outcome_keys(self) -> dict[int, Any]:
        """A dict with the keys of ``outcomes``, for the compiled column path, which asks only which keys
        are there: the outcomes themselves if a dict, a pickled part's index of its packed outcomes (no
        Outcome made)."""
        outcomes = self.outcomes
        if isinstance(outcomes, dict):
            return outcomes
        return outcomes.index() if isinstance(outcomes, _PackedOutcomes) else dict(outcomes)


class _PackedOutcomes(Mapping[int, Outcome]):
    """A part's outcomes as they travel: a few arrays of plain values; each made into an Outcome when it is
    first looked up, and the same object every time after."""

    def __init__(self, packed: tuple[Any, ...]) -> None:
        self.packed = packed
        self._index: dict[int, int] | None = None
        self._made: dict[int, Outcome] = {}

    def index(self) -> dict[int, int]:
        """Each key's index in the arrays."""
        if self._index is None:
            keys = self.packed[0]
            self._index = dict(zip(keys, range(len(keys))))
        return self._index

    def __getitem__(self, key: int) -> Outcome:
        made = self._made.get(key)
        if made is None:
            made = self._made[key] = _unpack_outcome(self.packed, self.index()[key])
        return made

    def __contains__(self, key: object) -> bool:
        return key in self.index()

    def __iter__(self) -> Iterator[int]:
        return iter(self.packed[0])

    def __len__(self) -> int:
        return len(self.packed[0])

    def __reduce__(self) -> tuple[Any, ...]:
        return (_PackedOutcomes, (self.packed,))


_PACKED = (("Q", "xid"), ("Q", "commit_lsn"), ("Q", "end_lsn"), ("q", "commit_time"))


def _pack_outcomes(outcomes: Mapping[int, Outcome]) -> tuple[Any, ...]:
    """The keys, xids, commit LSNs, end LSNs and commit times as machine-word arrays (pickled as their
    bytes), and the rarer facts -- origin, two-phase, streamed -- only for the transactions that have them,
    by index."""
    values = outcomes.values()
    rare = {}
    for index, o in enumerate(values):
        if o.origin or o.gid is not None or o.prepare_lsn is not None or o.streamed:
            rare[index] = (None if o.origin is None else (o.origin[0], int(o.origin[1])), o.gid,
                           None if o.prepare_lsn is None else int(o.prepare_lsn),
                           None if o.prepare_time is None else int(o.prepare_time), o.streamed)
    return (_words("q", list(outcomes)), *(_words(code, list(map(attrgetter(name), values))) for code, name in _PACKED),
            rare)


def _words(code: str, values: list[int]) -> array[int]:
    out = array(code)
    out.fromlist(values)  # (many times faster than array(code, values))
    return out


def _column(code: str, words: bytes) -> array[int]:
    out = array(code)
    out.frombytes(words)
    return out


def _unpack_outcome(packed: tuple[Any, ...], index: int) -> Outcome:
    keys, xids, commit_lsns, end_lsns, commit_times, rare = packed
    new = int.__new__  # the values were LSNs and Timestamps already: no need to check them again
    o = Outcome(xids[index], new(LSN, commit_lsns[index]), new(LSN, end_lsns[index]),
                new(Timestamp, commit_times[index]), None, None, None, None, False)
    extra = rare.get(index)
    if extra is not None:
        origin, gid, prepare_lsn, prepare_time, streamed = extra
        o.origin = None if origin is None else (origin[0], new(LSN, origin[1]))
        o.gid, o.streamed = gid, streamed
        o.prepare_lsn = None if prepare_lsn is None else new(LSN, prepare_lsn)
        o.prepare_time = None if prepare_time is None else new(Timestamp, prepare_time)
    return o


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
    changes themselves (an Insert for an unknown relation, bad bytes) surface in
    :func:`~replwire.codec.split.decode.decode_part`.
    ``progress(bytes_read, total_bytes)`` is called after each run of records (an eighth of a part, at
    most 4 MiB) and at the end.
    """
    total = sum(i.size - i.first for i in inputs)
    target = max(1, min(part_bytes, total // max(1, min_parts)))
    unit = max(1, min(target // 8, _PROGRESS_BYTES))  # runs: parts are cut where runs start
    with fewer_collections():
        return _merge(inputs, _runs_here(inputs, unit), target, total, progress)


@dataclass(slots=True)
class _Run:
    """What the first pass needs of a run of consecutive records of one input.

    ``controls`` holds the records it must decode -- everything but row changes -- as ``(offset, lsn,
    data)``, except that plain transactions (a Begin, row changes, its Commit, nothing else) come already
    parsed, consecutive ones gathered into one item, a block: ``(offset, lsn, data)`` of the first Begin, the
    number of transactions, the number of records in the block (row changes between its transactions
    included), whether each end LSN is above the one before, the first and last end LSN, then their numbers
    as columns of native 8-byte words (bytes): every transaction's Begin offset, row changes inside, xid,
    commit LSN, end LSN and commit time (:data:`_COLUMNS`), and those of the transactions with row changes
    inside, as a part's outcomes are packed: key, xid, commit LSN, end LSN and commit time
    (:data:`_PACKED`).  ``rows[0]`` counts the row changes before the first item, ``rows[i + 1]`` those
    after item ``i``.  ``stop`` is where the next run starts (the input's size after its last run); ``tail``
    is a torn or corrupt record that ended the input."""

    source: Input
    start: int
    stop: int
    records: int
    controls: list[tuple[Any, ...]]
    rows: list[int]
    tail: TailProblem | None = None


#: The type codes of a block's columns of every transaction: Begin offset, row changes inside, xid, commit
#: LSN, end LSN, commit time.
_COLUMNS = "qqQQQq"
#: How far past a run's end a compiled read reads at first, for the record that starts before its end.
_AHEAD = 1 << 16


_BEGIN, _COMMIT = ord(Begin.tag), ord(Commit.tag)


class _Skimmer:
    """One input open for the first pass, read run by run: :meth:`run` gives a :class:`_Run`, read by the
    compiled codec when it is there (and the file is as big as it was when the inputs were opened), else by
    :meth:`skim` (the records of a run that are not row changes, each with the number of row changes just
    before it) and :func:`_take_run`."""

    def __init__(self, source: Input) -> None:
        self.source = source
        self.reader = read_capture(source.path) if source.form == "capture" else None
        self._lines: Reading | None = None  # COPY-CSV: the lines from ``_next`` on, one read
        self._next = -1
        self._carried: Any = None
        self._frame = record_frame() if source.form == "capture" else None
        self._file = None
        if ROWS is not None:
            self._file = open(source.path, "rb")  # noqa: SIM115 -- closed by close()
            if os.fstat(self._file.fileno()).st_size != source.size or (
                    self.reader is not None and self.reader.size != source.size):
                self._file.close()  # still being written: the Python path reads it as big as it was
                self._file = None

    def run(self, start: int, stop: int) -> _Run:
        """The run of records from ``start`` (a record boundary) while one starts below ``stop`` (and below
        the input's size as :func:`open_inputs` found it): read by the compiled codec where it takes it, else
        by :meth:`skim` and :func:`_take_run`."""
        if self._file is not None:
            run = self._compiled(start, stop)
            if run is not None:
                return run
        return _take_run(self.source, start, self.skim(start, stop))

    def _compiled(self, start: int, stop: int) -> _Run | None:
        """The run as the compiled codec reads it (``skim_run``), or ``None`` where it declines (a torn or
        corrupt record, a row that is not (lsn, xid, data)) or the file is no longer as big as it was: the
        Python path then reads it, and reports or raises what it finds."""
        assert self._file is not None  # only with the compiled codec
        source, fd = self.source, self._file.fileno()
        limit = min(stop, source.size) - start
        want = min(limit + _AHEAD, source.size - start)
        while True:
            data = os.pread(fd, want, start)
            if len(data) != want:
                return None
            status, end, records, controls, rows = ROWS.skim_run(
                data, start + want == source.size, self._frame, source.proto_version, _ROW_TAG_BYTES, start, limit,
                source.position(0))
            if status == 0:
                return _Run(source, start, start + end, records, controls, rows)
            more = min(max(end, 2 * want), source.size - start)  # a record goes on past what was read
            if status == 1 or more <= want:
                return None
            want = more

    def skim(self, start: int, stop: int) -> _Skimmed:
        """The records from ``start`` (a record boundary) while one starts below ``stop`` (and below the input's
        size as :func:`open_inputs` found it)."""
        reader, stop = self.reader, min(stop, self.source.size)
        if reader is not None:
            reading = reader.records(start, stop, raw=True, skip=_ROW_TAGS)
            controls = list(reading)
            tail = reading.tail
            stop = min(reading.end, self.source.size) if tail is None else self.source.size
            return _Skimmed(controls, reading.skipped, stop, tail)
        controls = []
        append = controls.append
        # COPY-CSV: lines carry no length, so the input is read in one go and cut where a run ends
        if start != self._next:
            if self._lines is not None:
                self._lines.close()
            self._lines = read_copy_csv(self.source.path, start, self.source.size, raw=True)
            self._carried = None
        rest = self._lines
        assert rest is not None  # opened above, or by the skim that ended at start (_next is -1 before any)
        lines = chain((self._carried,), rest) if self._carried is not None else rest
        before, after_stop, self._carried = 0, self.source.size, None
        for line in lines:
            offset, lsn, xid, data = line
            if offset >= stop:
                after_stop, self._carried = offset, line
                break
            if data and data[0] in _ROW_TAGS:
                before += 1
            else:
                append((offset, lsn, xid, data, before))
                before = 0
        self._next = after_stop
        return _Skimmed(controls, before, after_stop, None)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
        if self._file is not None:
            self._file.close()
        if self._lines is not None:
            self._lines.close()

    def __enter__(self) -> _Skimmer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass(slots=True)
class _Skimmed:
    """What :meth:`_Skimmer.skim` read: the records that are not row changes as ``(offset, lsn, xid, data,
    row changes just before)``, the row changes after the last, where the next run starts (the input's size
    after the last), and a torn or corrupt record that ended the input."""

    controls: list[tuple[int, int, int, bytes, int]]
    after: int
    stop: int
    tail: TailProblem | None

    @property
    def records(self) -> int:
        """How many records were read: the ones kept and every row change counted."""
        return len(self.controls) + self.after + sum(c[4] for c in self.controls)


def _take_run(source: Input, start: int, skimmed: _Skimmed) -> _Run:
    """The run that ``skimmed`` read from ``start``.

    Begin and Commit records are parsed here (they read the same inside a stream or out), so that a plain
    transaction reaches the merge as a few numbers; the merge decodes them after all when the stream
    state there is not what a Begin needs (and so raises what the decoder raises)."""
    controls: list[tuple[Any, ...]] = []
    rows: list[int] = []
    version, run, base = source.proto_version, 0, source.position(0)
    begin: tuple[Any, ...] | None = None  # (offset, lsn, data, xid, rows before) of a Begin not yet closed
    block: list[tuple[int, ...]] = []  # the plain transactions of the block not yet closed
    first: tuple[Any, ...] = ()  # (offset, lsn, data) of its first Begin
    messages = 0  # its records

    def close() -> None:
        if block:
            controls.append(_block(first, block, messages, base))
            block.clear()

    for offset, lsn, _, data, before in skimmed.controls:
        run += before
        tag = data[0] if data else None
        if begin is not None:
            commit = _parsed(parse, data, version) if tag == _COMMIT else None
            if isinstance(commit, Commit):
                if block:
                    messages += begin[4]
                else:
                    rows.append(begin[4])
                    first, messages = begin[:3], 0
                block.append((begin[0], run, begin[3], int(commit.commit_lsn), int(commit.end_lsn),
                              int(commit.commit_time)))
                messages += run + 2
                run, begin = 0, None
                continue
            close()
            rows.append(begin[4])  # not a plain transaction: its Begin is decoded like the rest
            controls.append(begin[:3])
            begin = None
        if tag == _BEGIN and isinstance(opened := _parsed(parse, data, version), Begin):
            begin, run = (offset, lsn, data, opened.xid, run), 0
            continue
        close()
        rows.append(run)
        run = 0
        controls.append((offset, lsn, data))
    run += skimmed.after
    if begin is not None:
        close()
        rows.append(begin[4])
        controls.append(begin[:3])
    close()
    rows.append(run)
    return _Run(source, start, skimmed.stop, skimmed.records, controls, rows, skimmed.tail)


def _block(first: tuple[Any, ...], block: list[tuple[int, ...]], messages: int, base: int) -> tuple[Any, ...]:
    """The item of a block of plain transactions (see :class:`_Run`): ``block`` holds each one's Begin
    offset, row changes inside, xid, commit LSN, end LSN and commit time."""
    ends = [t[4] for t in block]
    with_rows = [(base | t[0], *t[2:]) for t in block if t[1]]
    return (*first, len(block), messages, all(a < b for a, b in zip(ends, ends[1:])), ends[0], ends[-1],
            tuple(_words(code, [t[i] for t in block]).tobytes() for i, code in enumerate(_COLUMNS)),
            tuple(_words(code, [t[i] for t in with_rows]).tobytes()
                  for i, (code, _) in enumerate((("q", "key"), *_PACKED))))


def _parsed(parse: Callable[..., Any], data: bytes, version: int) -> Any:
    """``data`` parsed outside a stream, or ``None`` if it is not a message (the merge says why)."""
    try:
        return parse(data, proto_version=version, in_stream=False)
    except DecodeError:
        return None


def _runs_here(inputs: Sequence[Input], unit: int) -> Iterator[_Run]:
    """The runs of every input, read in this process: each input kept open, read a run of ``unit`` bytes at
    a time (up to the size open_inputs found: a file still being written is read as it was then)."""
    for source in inputs:
        with _Skimmer(source) as skimmer:
            start = source.first
            while True:
                run = skimmer.run(start, start + unit)
                yield run
                if run.tail is not None or run.stop >= source.size:
                    break
                start = run.stop


def _merge(inputs: Sequence[Input], runs: Iterator[_Run], target: int, total: int,
           progress: Callable[[int, int], None] | None) -> Plan:
    """Run the decoder and router over the control records of ``runs`` (every input's, in order), note the
    transaction of each stretch of row changes, and make the parts: a part starts with an input, or with the
    first run at or past the next multiple of ``target`` bytes from the input's first record."""
    decoder = Decoder(proto_version=inputs[0].proto_version, encoding=inputs[0].encoding)
    router = Router(decoder)
    parts: list[Part] = []
    keys: list[set[int]] = []
    outcomes: dict[int, Outcome] = {}
    rolled_back: dict[int, frozenset[int]] = {}  # key -> its subtransactions rolled back, when it has any
    pending: dict[int, dict[str, Any]] = {}  # key -> origin / prepare / streamed, for transactions not done
    dropped: dict[int, set[int]] = {}
    repeated_lone: list[set[int]] = []
    shapes: dict[tuple[str, str], tuple[Any, ...]] = {}
    versions: list[RelationVersion] = []
    result = Plan(parts, versions)
    streams = router.streams
    last_end = -1
    reach = Reach()  # (last_end and the positions other controls complete: checks each capture's start)
    done = 0  # bytes of the inputs before this one
    source: Input | None = None
    part, part_keys, cut = None, set(), 0
    plain_outcomes: list[tuple[array[int], ...]] = []  # by part: its plain transactions' outcomes, packed
    part_outcomes: tuple[array[int], ...] = ()
    skipped = 0  # messages the decoder has not counted yet (row changes, plain transactions)
    plain = 0  # plain transactions committed (not decoded one message at a time)

    def note_rows() -> None:  # the part has row changes of the transaction open now (if any)
        if decoder.in_stream:
            assert decoder.stream_xid is not None  # in a stream block: its Stream Start set the xid
            key = streams.get(decoder.stream_xid)
        else:
            key = router.current
        if key is not None:
            part_keys.add(key)

    def relation(source: Input, offset: int, message: Relation) -> None:  # a table's shape, if it is new
        name = (message.namespace or "pg_catalog", message.name)
        shape = _shape(message)
        if shapes.get(name) != shape:
            shapes[name] = shape
            number = sum(1 for v in versions if (v.schema, v.table) == name) + 1
            versions.append(RelationVersion(name[0], name[1], number, message,
                                            tuple(decoder.types.get(c.type_id) for c in message.columns),
                                            source.position(offset)))

    def control(source: Input, offset: int, lsn: int, data: bytes) -> None:  # decode and route one record
        nonlocal last_end
        if data and data[0] in snapshot.KINDS:  # the snapshot section: only its tables' shapes matter here
            if data[0] == snapshot.CONFIRMED:
                reach.confirmed(source.path, data, last_end, offset)
            elif data[0] == snapshot.TABLE:
                for item in snapshot.parse_record(data).messages:
                    schema_message = snapshot.schema_message(item.data, decoder.encoding)
                    decoder.remember(schema_message)
                    if isinstance(schema_message, Relation):
                        relation(source, offset, schema_message)
            return
        in_stream = decoder.in_stream
        message = decoder.feed(data)
        if isinstance(message, Relation):
            relation(source, offset, message)
            return
        at = message_completes(message)
        if at is not None and at > reach.position:
            reach.position = at
        route = router.route(message, source.position(offset), in_stream)
        if route is None:
            return
        kind, key = route.kind, route.key
        if kind is LONE:
            end = lsn or None
            if end is not None and end <= last_end:
                repeated_lone[-1].add(source.position(offset))
                result.repeated += 1
            elif end is not None:
                last_end = end
            return
        assert key is not None  # every route but a lone message's names its transaction (Router.route)
        if kind is CHANGE:
            part_keys.add(key)
        elif kind is ORIGIN:
            pending.setdefault(key, {}).setdefault("origin", route.value)
        elif kind is PREPARE:
            pending.setdefault(key, {})["prepare"] = route.value
        elif kind is DROP_SUBXACT:
            dropped.setdefault(key, set()).add(route.value)
        elif kind is COMMIT:
            commit = route.value
            facts = pending.pop(key, _NO_FACTS)
            subxacts = dropped.pop(key, None)
            if commit.end_lsn <= last_end:
                result.repeated += 1
                return
            last_end = commit.end_lsn
            prepare = facts.get("prepare")
            # positional, in Outcome's field order: one is made per transaction
            outcomes[key] = Outcome(
                getattr(commit, "xid", None) or facts["xid"], commit.commit_lsn, commit.end_lsn,
                commit.commit_time, facts.get("origin"), getattr(commit, "gid", None),
                prepare.prepare_lsn if prepare else None, prepare.prepare_time if prepare else None,
                facts["streamed"])
            if subxacts:
                rolled_back[key] = frozenset(subxacts)
            result.transactions += 1
        elif kind is not DROP:  # OPEN
            assert isinstance(message, (Begin, BeginPrepare, StreamStart))  # only these open a transaction
            pending[key] = {"streamed": route.streamed, "xid": message.xid}
            if route.value is not None:
                pending.pop(route.value, None)
                dropped.pop(route.value, None)
        else:
            pending.pop(key, None)
            dropped.pop(key, None)

    for run in runs:
        if source is None or run.source.index != source.index:
            if source is not None:
                done += source.size - source.first
            source = inputs[run.source.index]
            if source.index:
                key = router.resume()
                if key is not None:
                    pending.pop(key, None)
                    dropped.pop(key, None)
            part = None
        if part is None or (run.records and run.start >= cut):
            # cuts fall on a grid of target bytes from the input's start, so parts are target +- a run
            # whatever the runs' sizes: no error piles up into a last part much smaller than the rest
            cut = source.first + ((run.start - source.first) // target + 1) * target
            decoder.skip(skipped)
            skipped = 0
            part = Part(len(parts), source, run.start, run.stop, router.state())
            parts.append(part)
            part_keys = set()
            keys.append(part_keys)
            repeated_lone.append(set())
            part_outcomes = tuple(array(code) for code, _ in (("q", "key"), *_PACKED))
            plain_outcomes.append(part_outcomes)
        part.stop = source.size if run.tail is not None else run.stop
        part.records += run.records
        base = source.position(0)
        after = iter(run.rows)
        if next(after):
            skipped += run.rows[0]
            note_rows()
        for item, rows in zip(run.controls, after):
            if len(item) == 3:
                decoder.skip(skipped)
                skipped = 0
                control(source, *item)
            elif decoder.state == IDLE and router.current is None:
                # Plain transactions where one may begin: what decoding their Begins, rows and Commits would do.
                skipped += item[4]
                if item[5] and item[6] > last_end:  # none of them repeated
                    last_end = item[7]
                    plain += item[3]
                    for column, words in zip(part_outcomes, item[9]):
                        column.frombytes(words)
                else:
                    for offset, inside, xid, commit_lsn, end_lsn, commit_time in zip(
                            *(_column(code, words) for code, words in zip(_COLUMNS, item[8]))):
                        if end_lsn <= last_end:
                            result.repeated += 1
                            continue
                        last_end = end_lsn
                        plain += 1
                        if inside:
                            for column, value in zip(part_outcomes, (base | offset, xid, commit_lsn, end_lsn,
                                                                     commit_time)):
                                column.append(value)
            else:  # a Begin where none may begin: decoding it raises the decoder's error
                decoder.skip(skipped)
                skipped = 0
                control(source, *item[:3])
                raise AssertionError(f"the decoder accepted a Begin in state {decoder.state!r}")
            if rows:
                skipped += rows
                note_rows()
        if run.tail is not None:
            result.tails.append((source.path, run.tail))
        if progress is not None:
            progress(done + part.stop - source.first, total)
    decoder.skip(skipped)
    result.transactions += plain
    result.records = sum(p.records for p in parts)
    for part, part_keys, lone, packed in zip(parts, keys, repeated_lone, plain_outcomes):
        *others, rare = _pack_outcomes({k: outcomes[k] for k in part_keys if k in outcomes})
        part.outcomes = _PackedOutcomes((*(a + b for a, b in zip(others, packed)), rare))
        if rolled_back:
            part.dropped_subxacts = {k: rolled_back[k] for k in part_keys if k in rolled_back}
        part.repeated_lone = frozenset(lone)
    if progress is not None:
        progress(total, total)
    return result

