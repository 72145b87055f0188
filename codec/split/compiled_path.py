"""The driver of a compiled path over one input: a C function that takes runs of what it can write, and the
Python reader for everything else, in turn.

Strategy: :class:`CompiledPath` reads the input's records (capture records or COPY-CSV rows) from an
offset in chunks and hands them to the compiled function (:meth:`CompiledPath.take`) wherever the path
says it may be tried (:meth:`CompiledPath.ready`: the column path between transactions, the row path
anywhere), with a plan for every relation the decoder knows, made again when its Relation or the types
change (:meth:`CompiledPath.plans`; each path says how one is made, :meth:`CompiledPath.plan`).  The
function takes what it writes and stops at anything else; the records from there go to the Python reader
(:meth:`CompiledPath.python`) until the path is ready again, and the compiled function goes on from where
the Python reader stopped, in the bytes already read.  Where the function hands back the record it stopped
at, already read, only that record goes to the Python side, without a reader.  Otherwise a try that takes
fewer than ``worth`` records counts as fruitless: after ``tries`` of them in a row, the Python reader takes
more records before the next try, so a stream of short runs between what the function declines costs
little more than the Python path alone.  The paths (:mod:`~replwire.codec.decode`'s JSON lines,
:mod:`~replwire.codec.split.columns`' column buffers) say only which function, its plans, what it gives and
how the Python side reads the rest.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

from ..io.capture_file import CaptureReader, Reading, TailProblem, read_capture
from ..io.record_plan import record_frame
from ..io.segments import Input, read_records

if TYPE_CHECKING:
    from ..messages import Relation
    from ..stream.assembler import ChangeMaker
    from ..stream.decoder import Decoder
    from ..stream.values import RowSchema

__all__ = ["CompiledPath"]

#: After ``tries`` fruitless tries in a row, the Python reader takes at least ``_PATIENCE`` records before
#: the next, twice as many after each further such try, up to the most.
_PATIENCE = 16
_MOST_PATIENCE = 1 << 16
#: The tags of the messages that change the decoder's caches, which the plans follow: Relation, Type.
_CACHED = frozenset(b"RY")


class CompiledPath(ABC):
    """The compiled function and the Python reader over the records of ``source`` in ``[start, stop)``
    (``stop=None``: to the end), in turn (see the module docstring).  ``chunk`` is how much is read at a
    time, ``most`` the most input one transaction may take (a bigger one goes to the Python reader).
    :meth:`run` gives what both give, in stream order; ``tail`` is the Python reader's torn or corrupt
    tail, once the records ran out."""

    def __init__(self, source: Input, start: int, stop: int | None, *, chunk: int, most: int, worth: int,
                 tries: int) -> None:
        self.source, self.start, self.stop = source, start, stop
        self.chunk, self.most, self.worth, self.tries = chunk, most, worth, tries
        self.frame = record_frame() if source.form == "capture" else None
        self.tail: TailProblem | None = None
        # records the Python reader takes before the compiled function is tried again: none at first, more
        # after each of a run of fruitless tries
        self._patience = self._fruitless = 0
        self._reader: CaptureReader | None = None  # a capture file's Python reader, opened once
        self._done = False  # the Python reader's reading ran out
        self._plans: dict[int, Any] = {}
        self._planned: dict[int, tuple[Any, int]] = {}  # relation id -> (Relation, types_version) of its plan
        self._fresh = False  # the plans are the decoder's caches' (only what the Python side reads changes them)

    @abstractmethod
    def ready(self) -> bool:
        """Whether the compiled function may be tried where the Python side is now."""

    @abstractmethod
    def take(self, data: memoryview, eof: bool, at: int) -> tuple[int, int, Any, Any]:
        """The compiled function over ``data`` (the input's bytes from offset ``at``; ``eof``: they reach
        the end): how many bytes and records it took (counted with the decoder's ``skip``), whether it
        declined the record there (else more input is needed, or it reached a cap) -- or that record itself,
        as the Python reader reads it, ``(lsn, data, size)``, which goes to :meth:`python` without being read
        again (as ``(offset, lsn, 0, data)``: the xid is not read) -- and what to give for the records it took
        (``None``: nothing)."""

    @abstractmethod
    def plan(self, relation_id: int, relation: Relation, schema: RowSchema) -> Any:
        """The compiled function's plan for the changes of a relation, read with ``schema``; ``None`` or
        ``UnicodeEncodeError`` where it can have none."""

    @abstractmethod
    def python(self, records: Iterator[Any]) -> Iterator[Any]:
        """What to give for ``records`` (raw records, each fed before the next is asked for)."""

    def plans(self, decoder: Decoder, maker: ChangeMaker) -> dict[int, Any]:
        """A plan for every relation ``decoder`` knows now, by relation id (made again when its Relation or
        the types changed); a relation that cannot have one (a name in no Unicode) gets none, and its
        changes go to the Python reader."""
        if self._fresh:
            return self._plans
        self._fresh = True
        for relation_id, relation in decoder.relations.items():
            made = self._planned.get(relation_id)
            if made is not None and made[0] is relation and made[1] == decoder.types_version:
                continue
            self._planned[relation_id] = (relation, decoder.types_version)
            self._plans.pop(relation_id, None)
            try:
                plan = self.plan(relation_id, relation, maker.row_schema(decoder, relation_id))
            except UnicodeEncodeError:
                continue
            if plan is not None:
                self._plans[relation_id] = plan
        return self._plans

    def run(self) -> Generator[Any, None, None]:
        source, stop = self.source, self.stop
        at = self.start  # where the records not yet taken start
        # the bytes from ``at`` on read so far: chunk[low:size] (a view of it goes to the compiled function, so
        # that a short run costs no copy of the rest), a chunk more read once less than a chunk is left (the
        # row path over 1 MiB at a time: a tenth faster than from a quarter of that); ``eof``: they reach the
        # end.  ``chunk`` is one buffer for the whole reading, the rest moved to its start and the file read
        # into it after the rest: no new buffer, and no copy but the rest's, per chunk (a new one per chunk
        # cost two copies of the rest and fresh pages, which the kernel zeroes, for every MiB of input)
        chunk, low, size, eof = bytearray(), 0, 0, stop is not None and at >= stop
        try:
            with open(source.path, "rb") as handle:

                def read() -> tuple[int, bool]:
                    """Read on after the rest: the new size of what was read (the rest now at 0), and eof."""
                    rest = size - low
                    if low:
                        with memoryview(chunk) as view:
                            view[:rest] = view[low:size]
                    want = self.chunk if stop is None else min(self.chunk, stop - at - rest)
                    if want <= 0:
                        return rest, True
                    if len(chunk) < rest + want:
                        chunk.extend(bytes(rest + want - len(chunk)))
                    handle.seek(at + rest)
                    with memoryview(chunk) as view:
                        got = handle.readinto(view[rest:rest + want])
                    return rest + got, not got or (stop is not None and at + rest + got >= stop)

                while True:
                    if self.ready():
                        if not eof and size - low < self.chunk:
                            (size, eof), low = read(), 0
                        with memoryview(chunk) as view:
                            consumed, records, declined, item = self.take(view[low:size], eof, at)
                        if item is not None:
                            yield item
                        low, at = low + consumed, at + consumed
                        if declined.__class__ is tuple:  # the record there, read: the Python side takes it
                            lsn, data, taken = declined
                            if data[0] in _CACHED:
                                self._fresh = False
                            yield from self.python(iter(((at, lsn, 0, data),)))
                            low, at = low + taken, at + taken
                            if low == size and eof:
                                return
                            continue
                        self._fruitless = 0 if records >= self.worth else self._fruitless + 1
                        self._patience = (0 if self._fruitless < self.tries
                                          else min(_PATIENCE << (self._fruitless - self.tries), _MOST_PATIENCE))
                        left = size - low
                        if not left and eof:
                            return
                        if not declined and not eof and left < self.most:
                            if consumed == 0:  # a transaction longer than what was read: read on
                                (size, eof), low = read(), 0
                            continue
                        if not declined and consumed:  # a run reached a cap
                            continue
                    # the Python reader's part: from the record at ``at`` until ready again
                    self._fresh = False
                    reading = self._python_records(at)
                    try:
                        yield from self.python(self._until_ready(reading))
                    finally:
                        reading.close()
                    if self._done:
                        self.tail = reading.tail
                        return
                    moved, at = reading.end - at, reading.end
                    if moved <= size - low:
                        low += moved
                    else:
                        low = size = 0
                        eof = False
        finally:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    def _python_records(self, at: int) -> Reading:
        """The Python reader's raw records from offset ``at``."""
        if self.source.form != "capture":
            return read_records(self.source, at, self.stop, raw=True)
        if self._reader is None:
            self._reader = read_capture(self.source.path)
        return self._reader.records(at, self.stop, raw=True)

    def _until_ready(self, reading: Reading) -> Generator[Any, None, None]:
        """The records of ``reading`` until, after at least the patience's, the path is ready again;
        ``_done`` says whether the reading ran out."""
        patience, taken = self._patience, 0
        for record in reading:
            yield record
            taken += 1
            if taken >= patience and self.ready():
                return
        self._done = True
