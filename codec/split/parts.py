"""What the first pass of split decoding makes: :class:`Part` s, the table shapes, and the :class:`Plan`.

Strategy: a :class:`Part` is a run of records of one input that decodes on its own: it carries the router's
state where it begins and the :class:`~replwire.codec.stream.outcome.Outcome` s of just the transactions that
have changes inside it.  Parts travel to Spark's executors pickled, tens of thousands of outcomes each, so
the outcomes go as a few arrays of machine words (:data:`PACKED`, :class:`PackedOutcomes`; the first pass's
runs carry the same columns) and become objects only when a part's decoding looks one up.  :class:`Shapes`
answers which shape of a table (:class:`RelationVersion`) is in force at a stream position.
:mod:`~replwire.codec.split.first_pass` makes these; :mod:`~replwire.codec.split.decode` and
:mod:`~replwire.codec.split.columns` read them.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from ..io.capture_file import TailProblem
from ..io.segments import Input
from ..messages import Relation, Type
from ..scalars import LSN, Timestamp
from ..stream.outcome import Outcome

__all__ = ["PACKED", "PackedOutcomes", "Part", "Plan", "RelationVersion", "Shapes", "pack_outcomes", "pack_words",
           "unpack_words"]


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
    #: column name -> ``(kind, value)`` of its default, from the capture's ``ColumnDefaults`` records after the
    #: shape's Relation messages (:data:`~replwire.schema.capture.COLUMN_DEFAULTS`)
    defaults: dict[str, tuple[int, str]] = field(default_factory=dict, compare=False)

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
    messages in it that a resume sent again (``repeated_lone``).  ``outside`` says whether it holds rows that
    belong to no transaction (snapshot and backfill rows, lone logical messages): the outcomes then do not
    tell every position the part's rows have."""

    number: int
    source: Input
    start: int
    stop: int
    state: dict[str, Any]
    outcomes: Mapping[int, Outcome] = field(default_factory=dict)
    repeated_lone: frozenset[int] = frozenset()
    records: int = 0
    dropped_subxacts: Mapping[int, frozenset[int]] = field(default_factory=dict)
    outside: bool = False

    @property
    def size(self) -> int:
        return self.stop - self.start

    def __reduce__(self) -> tuple[Any, ...]:
        # Parts travel to Spark's executors pickled.  Their outcomes -- tens of thousands of small objects
        # holding LSN and Timestamp ints -- go as a few arrays of plain values and become objects again only
        # when the part is decoded: pickling them one object at a time costs more than decoding the part.
        outcomes = self.outcomes
        packed = outcomes if isinstance(outcomes, PackedOutcomes) else PackedOutcomes(pack_outcomes(outcomes))
        return (Part, (self.number, self.source, self.start, self.stop, self.state, packed, self.repeated_lone,
                       self.records, self.dropped_subxacts, self.outside))

    def commits(self) -> tuple[int, int] | None:
        """The lowest and highest commit LSN of the transactions with changes in the part (``None``: none)."""
        outcomes = self.outcomes
        lsns = (outcomes.packed[2] if isinstance(outcomes, PackedOutcomes)
                else [int(o.commit_lsn) for o in outcomes.values()])
        return (min(lsns), max(lsns)) if len(lsns) else None

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
        return outcomes.index() if isinstance(outcomes, PackedOutcomes) else dict(outcomes)


class PackedOutcomes(Mapping[int, Outcome]):
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
        return (PackedOutcomes, (self.packed,))


PACKED = (("Q", "xid"), ("Q", "commit_lsn"), ("Q", "end_lsn"), ("q", "commit_time"))


def pack_outcomes(outcomes: Mapping[int, Outcome]) -> tuple[Any, ...]:
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
    return (pack_words("q", list(outcomes)),
            *(pack_words(code, list(map(attrgetter(name), values))) for code, name in PACKED), rare)


def pack_words(code: str, values: list[int]) -> array[int]:
    out = array(code)
    out.fromlist(values)  # (many times faster than array(code, values))
    return out


def unpack_words(code: str, words: bytes) -> array[int]:
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
