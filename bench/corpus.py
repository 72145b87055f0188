"""The benchmark's corpora: a synthetic CDC mix built with replwire, and captures from real servers.

* :func:`synthetic`: about 200,000 pgoutput messages (protocol 1) of a typical change stream -- four
  tables of eight columns (an int key and seven short text values, a few NULLs), one Relation per table,
  a Begin and a Commit around every three to seven changes; the changes mostly Inserts and Updates, some
  Updates carrying the old key (``K``) or an unchanged TOASTed column (``u``), some Deletes.  Built with
  ``replwire.codec.build`` from a fixed random seed, so every run sees the same bytes.
* :func:`real`: everything the repository's own capture code (``tests/support/capture.py``) records when it
  runs its workload (``tests/support/workload.py``) on a PostgreSQL server started by
  :mod:`replwire.codec.testing.localserver`: every
  configuration (protocol versions 1-4, binary, messages, streaming, two-phase, origins) through the SQL
  interface, and the live walsender's CopyData frames.  Captured once and cached under ``bench/corpora/``
  (git-ignored); ``refresh=True`` captures again.

Strategy: a corpus is a list of :class:`Item` (bytes plus the context to parse them in), stored in a small
length-prefixed file format (:func:`write_items` / :func:`read_items`) that the 1 GB streaming check
reads too.  :meth:`Corpus.groups` cuts it by message family and context so that every codec runs the same
tight loops.
"""

from __future__ import annotations

import pathlib
import random
import struct
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from replwire import schema
from replwire.codec import (
    LSN,
    Begin,
    Commit,
    Delete,
    Insert,
    Relation,
    RelationColumn,
    StreamStart,
    StreamStop,
    Timestamp,
    TupleColumn,
    Update,
    build,
    parse,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPORA = ROOT / "bench" / "corpora"

MAGIC = b"RWBENCH1"
_HEADER = struct.Struct(">BBL")  # proto_version (0: envelope), flags (1: in stream), length

#: The family of each tag, per layer (the docs' grouping, from the declarations).
FAMILIES = {("logical", spec.tag): spec.family for spec in schema.LOGICAL_MESSAGES}
FAMILIES.update({("envelope", tag): "envelope" for side in schema.ENVELOPE.values() for tag in side})


@dataclass(frozen=True)
class Item:
    """One message and the context to parse it in (``proto_version`` ``None`` for an envelope frame)."""

    data: bytes
    proto_version: int | None
    in_stream: bool = False

    @property
    def layer(self) -> str:
        return "envelope" if self.proto_version is None else "logical"

    @property
    def family(self) -> str:
        return FAMILIES[self.layer, chr(self.data[0])]


@dataclass
class Corpus:
    name: str
    description: str
    items: list[Item]
    source: dict = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(len(i.data) for i in self.items)

    def families(self) -> list[str]:
        order = ["transaction", "schema", "dml", "logical_message", "stream", "two_phase", "envelope"]
        present = {i.family for i in self.items}
        return [f for f in order if f in present]

    def select(self, keep) -> Corpus:
        return Corpus(self.name, self.description, [i for i in self.items if keep(i)], self.source)

    def groups(self, family: str | None = None) -> list[tuple[int | None, bool, list[bytes]]]:
        """The messages (of ``family``) cut into runs of one context, in corpus order."""
        out: list[tuple[int | None, bool, list[bytes]]] = []
        for item in self.items:
            if family is not None and item.family != family:
                continue
            if out and out[-1][0] == item.proto_version and out[-1][1] == item.in_stream:
                out[-1][2].append(item.data)
            else:
                out.append((item.proto_version, item.in_stream, [item.data]))
        return out

    def summary(self) -> dict:
        return {
            "description": self.description,
            "messages": len(self.items),
            "bytes": self.size,
            "families": dict(Counter(i.family for i in self.items)),
            "tags": dict(Counter(chr(i.data[0]) for i in self.items).most_common()),
            "proto_versions": dict(Counter(str(i.proto_version or "envelope") for i in self.items)),
            **self.source,
        }


# ---------------------------------------------------------------------------------------------------------
# file format


def write_items(out: BinaryIO, items: Iterable[Item]) -> int:
    """Append ``items`` to an open file (after :data:`MAGIC`); returns the bytes written."""
    written = 0
    for item in items:
        header = _HEADER.pack(item.proto_version or 0, 1 if item.in_stream else 0, len(item.data))
        out.write(header)
        out.write(item.data)
        written += len(header) + len(item.data)
    return written


def read_items(src: BinaryIO) -> Iterator[Item]:
    """The items of a file written by :func:`write_items`, one at a time (the file is never held whole)."""
    if src.read(len(MAGIC)) != MAGIC:
        raise ValueError("not a replwire benchmark corpus file")
    read = src.read
    unpack = _HEADER.unpack
    size = _HEADER.size
    while True:
        header = read(size)
        if not header:
            return
        proto, flags, length = unpack(header)
        yield Item(read(length), proto or None, bool(flags & 1))


def save(path: pathlib.Path, items: Iterable[Item]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        out.write(MAGIC)
        write_items(out, items)


def load(path: pathlib.Path) -> list[Item]:
    with path.open("rb") as src:
        return list(read_items(src))


# ---------------------------------------------------------------------------------------------------------
# the synthetic CDC mix


_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett",
          "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango")


def _value(rnd: random.Random) -> TupleColumn:
    if rnd.random() < 0.04:
        return TupleColumn.null()
    text = rnd.choice(_WORDS) + "-" + str(rnd.randrange(100_000))
    if rnd.random() < 0.3:
        text += " " + rnd.choice(_WORDS)
    return TupleColumn.text(text)


def synthetic(messages: int = 200_000, seed: int = 20261121) -> Corpus:
    """The synthetic CDC mix (see the module docstring)."""
    rnd = random.Random(seed)
    tables = [16_400 + i for i in range(4)]
    next_id = dict.fromkeys(tables, 1)
    described: set[int] = set()
    items: list[Item] = []
    lsn, time, xid = 0x1_6000_0000, 848_561_712_500_000, 1_000

    def emit(message) -> None:
        items.append(Item(build(message, proto_version=1), 1))

    while len(items) < messages:
        xid += 1
        lsn += rnd.randrange(2_000, 20_000)
        time += rnd.randrange(1_000, 200_000)
        final = LSN(lsn)
        emit(Begin(final_lsn=final, commit_time=Timestamp(time), xid=xid))
        for _ in range(rnd.randint(3, 7)):
            table = rnd.choice(tables)
            if table not in described:
                described.add(table)
                columns = [RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1)]
                columns += [RelationColumn(flags=0, name=f"c{i}", type_id=25, type_modifier=-1) for i in range(1, 8)]
                emit(Relation(relation_id=table, namespace="public", name=f"cdc_{table}", replica_identity="d",
                              columns=columns))
            row_id = TupleColumn.text(str(rnd.randrange(1, next_id[table] + 1)))
            kind = rnd.random()
            if kind < 0.55:
                next_id[table] += 1
                emit(Insert(relation_id=table, new=[TupleColumn.text(str(next_id[table]))]
                            + [_value(rnd) for _ in range(7)]))
            elif kind < 0.9:
                new = [row_id] + [_value(rnd) for _ in range(7)]
                key = None
                shape = rnd.random()
                if shape < 0.1:  # the key changed: the old key, other columns NULL
                    key, new[0] = [row_id] + [TupleColumn.null()] * 7, TupleColumn.text(str(next_id[table] + 1))
                    next_id[table] += 1
                elif shape < 0.15:  # a TOASTed column left alone
                    new[rnd.randrange(1, 8)] = TupleColumn.unchanged_toast()
                emit(Update(relation_id=table, key=key, new=new))
            else:
                emit(Delete(relation_id=table, key=[row_id] + [TupleColumn.null()] * 7))
        emit(Commit(flags=0, commit_lsn=final, end_lsn=LSN(lsn + 48), commit_time=Timestamp(time)))
    return Corpus("synthetic", "Synthetic CDC mix built with replwire.codec.build: 4 tables x 8 columns "
                  "(int key + 7 short texts), Begin/Commit around 3-7 changes (55% Insert, 35% Update, "
                  "10% Delete)", items, {"seed": seed})


# ---------------------------------------------------------------------------------------------------------
# real servers


def capture(major: int) -> tuple[list[Item], dict]:
    """Start a PostgreSQL ``major`` server, run the repository's workload through every capture
    configuration and the live walsender, stop it; every message in capture order."""
    from replwire.codec.testing.localserver import PgServer  # noqa: PLC0415
    from tests.support.capture import capture_all  # noqa: PLC0415 - tests/ is importable from a checkout only

    server = PgServer.start(major)
    try:
        run = capture_all(server)
    finally:
        server.stop()
    items: list[Item] = []
    for c in run.captures:
        in_stream = False
        for _, _, data in c.rows:
            message = parse(data, proto_version=c.proto_version, in_stream=in_stream)
            items.append(Item(data, c.proto_version, in_stream))
            if isinstance(message, StreamStart):
                in_stream = True
            elif isinstance(message, StreamStop):
                in_stream = False
    for ws in run.walsender:
        items.extend(Item(frame, None) for frame in ws.frames)
    source = {"server_version_num": run.version_num,
              "configurations": [c.config for c in run.captures] + [w.config for w in run.walsender]}
    return items, source


def real(majors: tuple[int, ...] = (18,), refresh: bool = False) -> Corpus:
    """The real-server corpus (cached in ``bench/corpora/real-pg<major>.rwb``)."""
    items: list[Item] = []
    versions = {}
    for major in majors:
        path = CORPORA / f"real-pg{major}.rwb"
        if refresh or not path.exists():
            captured, source = capture(major)
            save(path, captured)
            (CORPORA / f"real-pg{major}.txt").write_text(repr(source) + "\n")
        items += load(path)
        versions[f"pg{major}"] = (CORPORA / f"real-pg{major}.txt").read_text().strip()
    return Corpus("real", "Captured from PostgreSQL " + ", ".join(str(m) for m in majors)
                  + " by tests/support/capture.py "
                  "(the workload of tests/support/workload.py through every protocol version and option set, "
                  "plus the live walsender frames)", items, {"servers": versions})


def pypgoutput_subset(item: Item) -> bool:
    """What pypgoutput 0.0.3 understands: protocol 1 Begin, Commit, Relation, Insert, Update, Delete and
    Truncate, with text (not binary) column values."""
    if item.proto_version != 1 or chr(item.data[0]) not in "BCRIUDT":
        return False
    message = parse(item.data, proto_version=1)
    images = [getattr(message, name, None) for name in ("key", "old", "new")]
    return not any(c.kind == "b" for image in images if image for c in image)
