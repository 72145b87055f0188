"""The first pass of split decoding: one cheap read of the inputs that cuts them into independently
decodable :class:`~replwire.codec.split.parts.Part` s and resolves what each part needs from elsewhere.

Strategy: a change needs three things from outside the bytes around it -- the Relation/Type messages in
force, the stream state (inside a Stream Start block or not, which transaction is open), and the fate of its
transaction (committed, aborted, a rolled-back subtransaction, prepared then committed or rolled back,
repeated after a resume).  :func:`plan` reads the inputs once in order, runs the
:class:`~replwire.codec.Decoder` and :class:`~replwire.codec.stream.routing.Router` on every message *except*
the row changes (for those it reads only the tag byte and notes which transaction they belong to), and cuts
the inputs into parts at record boundaries.  Its reading is split from its decoding: runs of about 4 MiB of
records are each reduced to the records to decode and counts of the row changes between them (plain
Begin ... Commit transactions, the commonest case, arrive already parsed, consecutive ones as one block of
columns of numbers) by :mod:`~replwire.codec.split.skim`, in C where the compiled codec is built, and the
merge here decodes only those.  Each part (:mod:`~replwire.codec.split.parts`) carries the router's state
where it begins and the :class:`~replwire.codec.stream.outcome.Outcome` s of just the transactions that have
changes inside it, packed into a few arrays (made into objects when the part is decoded);
:mod:`replwire.codec.split.decode` decodes it.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ..gc_tuning import fewer_collections
from ..io.positions import message_completes
from ..io.segments import Input, Reach
from ..messages import Begin, BeginPrepare, Relation, StreamStart, Type
from ..stream import snapshot_records
from ..stream.decoder import IDLE, Decoder
from ..stream.outcome import Outcome
from ..stream.routing import CHANGE, COMMIT, DROP, DROP_SUBXACT, LONE, ORIGIN, PREPARE, Router
from .parts import PACKED, PackedOutcomes, Part, Plan, RelationVersion, pack_outcomes, unpack_words
from .skim import COLUMNS, Run, runs_here

__all__ = ["plan"]

_NO_FACTS: dict[str, Any] = {}
_PROGRESS_BYTES = 4 << 20  # the largest run of records the first pass reads; it reports progress after each


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
        return _merge(inputs, runs_here(inputs, unit), target, total, progress)


def _merge(inputs: Sequence[Input], runs: Iterator[Run], target: int, total: int,
           progress: Callable[[int, int], None] | None) -> Plan:
    """Run the decoder and router over the control records of ``runs`` (every input's, in order), note the
    transaction of each stretch of row changes, and make the parts: a part starts with an input, or with the
    first run at or past the next multiple of ``target`` bytes from the input's first record."""
    decoder = Decoder(proto_version=inputs[0].proto_version, encoding=inputs[0].encoding)
    chunks = Decoder(proto_version=inputs[0].proto_version, encoding=inputs[0].encoding)  # backfill chunks' shapes
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
    current: dict[tuple[str, str], RelationVersion] = {}  # each table's shape now
    announced: dict[int, RelationVersion] = {}  # relation id -> the shape its last Relation message announced
    result = Plan(parts, versions)
    streams = router.streams
    last_end = -1
    chunks_repeated = False  # the last lone message was sent again by a resume (and the chunk after it, if any)
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
        else:  # snapshot rows
            assert part is not None  # (rows are noted in a part)
            part.outside = True

    def relation(source: Input, offset: int, message: Relation, types: Mapping[int, Type] | None = None
                 ) -> None:  # a table's shape, if it is new
        name = (message.namespace or "pg_catalog", message.name)
        shape = _shape(message)
        if shapes.get(name) != shape:
            shapes[name] = shape
            number = sum(1 for v in versions if (v.schema, v.table) == name) + 1
            known = decoder.types if types is None else types
            versions.append(RelationVersion(name[0], name[1], number, message,
                                            tuple(known.get(c.type_id) for c in message.columns),
                                            source.position(offset)))
            current[name] = versions[-1]
        if types is None:  # (the stream's: the ColumnDefaults record after it is of this shape)
            announced[message.relation_id] = current[name]

    def control(source: Input, offset: int, lsn: int, data: bytes) -> None:  # decode and route one record
        nonlocal last_end, chunks_repeated
        if data and data[0] in snapshot_records.KINDS:  # snapshot and backfill records: their tables' shapes
            code = data[0]
            if code in snapshot_records.BACKFILL_KINDS:
                assert part is not None  # (records are read in a part)
                part.outside = True
            if code == snapshot_records.CONFIRMED:
                reach.confirmed(source.path, data, last_end, offset)
            elif code == snapshot_records.TABLE:
                for item in snapshot_records.parse_record(data).messages:
                    schema_message = snapshot_records.schema_message(item.data, decoder.encoding)
                    decoder.remember(schema_message)
                    if isinstance(schema_message, Relation):
                        relation(source, offset, schema_message)
            elif code == snapshot_records.DEFAULTS:  # the defaults of the shape the Relation before it announced
                fields = snapshot_records.parse_record(data)
                shape = announced.get(fields.relation_id)
                if shape is not None:  # (a value once stored stays the rows' value: a rewrite since stores none)
                    shape.defaults.update((c.name, (c.kind, c.value)) for c in fields.columns
                                          if c.kind == 1 or c.name not in shape.defaults)
            elif code in snapshot_records.BACKFILL_KINDS:
                if chunks_repeated:  # its watermark was sent again by a resume: so is it
                    repeated_lone[-1].add(source.position(offset))
                elif code == snapshot_records.CHUNK:  # (its shape, in a decoder of its own: not the stream's)
                    for item in snapshot_records.parse_record(data).messages:
                        schema_message = snapshot_records.schema_message(item.data, decoder.encoding)
                        chunks.remember(schema_message)
                        if isinstance(schema_message, Relation):
                            relation(source, offset, schema_message, chunks.types)
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
            assert part is not None
            part.outside = True
            end = lsn or None
            chunks_repeated = end is not None and end <= last_end
            if chunks_repeated:
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
            state = router.state()
            if chunks.relations:  # the shapes of backfill chunks: a chunk's rows may go on in this part
                state["chunks"] = {"relations": dict(chunks.relations), "types": dict(chunks.types)}
            part = Part(len(parts), source, run.start, run.stop, state)
            parts.append(part)
            part_keys = set()
            keys.append(part_keys)
            repeated_lone.append(set())
            part_outcomes = tuple(array(code) for code, _ in (("q", "key"), *PACKED))
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
                            *(unpack_words(code, words) for code, words in zip(COLUMNS, item[8]))):
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
        *others, rare = pack_outcomes({k: outcomes[k] for k in part_keys if k in outcomes})
        part.outcomes = PackedOutcomes((*(a + b for a, b in zip(others, packed)), rare))
        if rolled_back:
            part.dropped_subxacts = {k: rolled_back[k] for k in part_keys if k in rolled_back}
        part.repeated_lone = frozenset(lone)
    if progress is not None:
        progress(total, total)
    return result

