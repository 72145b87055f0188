"""Capture files: pgoutput messages stored durably, read back, and a torn tail survived.

Strategy: the layout is :mod:`replwire.schema.capture` (a checksummed header, then checksummed records);
this module only moves bytes between those declarations and files.  The header is parsed by its construct
declaration.  Records, read by the hundred thousand, go through the plan derived once from the walker's
layout of :data:`~replwire.schema.capture.RECORD` (:mod:`~replwire.codec.io.record_plan`: one ``struct``
format for its fixed fields and the data length, then the CRC-32 after the data), over large chunks of the
file; a test checks that it agrees with construct's parse of valid and damaged records.  Reads never ask the
file for more bytes than it has, so a corrupt length cannot make the reader allocate; the first record that
is cut short or fails its checksum ends the valid part, and is reported (:class:`TailProblem`) with
everything before it kept, and with where intact records start again after it, if they do: a file damaged
inside is not a file torn at its end, and nothing may cut it there.  Records are written through the same
plan (head packed, data, CRC-32), gathered into ~1 MiB batches before they reach the file; a record's data
may come in pieces (:data:`RecordData`), and a large piece (a backfill's or snapshot's rows) is written to the
file from where it is, never copied into the batch.  A writer opened on an existing file checks the header
matches, cuts a torn tail off and appends after the last good record.
:meth:`CaptureWriter.sync` writes what is gathered, flushes and fsyncs, so a caller can acknowledge
positions only once they are on disk.

The COPY-CSV form -- what ``COPY (SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(...)) TO
STDOUT WITH (FORMAT csv)`` writes -- is read by :mod:`~replwire.codec.io.copy_csv`.  Both forms are read the
same way: a :class:`Reading`, iterated once for the records, that reports where it ended and why.
"""

from __future__ import annotations

import io
import os
import zlib
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from construct import ConstructError

from ...schema import capture as layout
from .. import walker
from ..errors import ReplwireError
from ..scalars import LSN
from ..stream.snapshot_records import confirmed_record as _confirmed_record
from .record_plan import RECORD_PLAN

__all__ = ["BATCH", "CHUNK", "HEADER_AHEAD", "RESYNC_BUDGET", "RESYNC_WINDOW", "CaptureFileError", "CaptureHeader",
           "CaptureReader", "CaptureRecord", "CaptureWriter", "RawRecord", "Reading", "RecordData", "TailProblem",
           "cut_file", "encode_header", "encode_record", "is_capture_file", "read_capture", "record_size"]

class CaptureFileError(ReplwireError, ValueError):
    """A file that is not a readable capture file, or one that cannot be appended to as asked.
    ``damaged_inside`` is true when the file is damaged inside (intact records follow a damaged one), which
    nothing may cut off."""

    def __init__(self, path: str, reason: str, offset: int | None = None, *, damaged_inside: bool = False) -> None:
        self.path, self.reason, self.offset = path, reason, offset
        self.damaged_inside = damaged_inside
        where = f" at offset {offset}" if offset is not None else ""
        super().__init__(f"{path}{where}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:  # whole after crossing a process boundary, notes and all
        return (CaptureFileError, (self.path, self.reason, self.offset), self.__dict__)


@dataclass(frozen=True)
class CaptureHeader:
    """What a capture file says about its records: the ``proto_version`` and pgoutput ``options`` they were
    captured with, and the connection's ``client_encoding`` (PostgreSQL's name, as the server reported it),
    which their Strings and text values are in.

    ``slot_name``, ``system_identifier`` (the server's, in decimal) and ``database`` say where the records
    came from, so that a capture is resumed only from its own slot; ``None`` when the file does not say (one
    captured before they were recorded, or written by other means).  Like ``client_encoding`` they are
    stored among the header's options, but they are not pgoutput options: ``options`` never holds them.

    ``segment`` and ``segment_start`` are set in a segment of a capture with rotation: its number, and the
    stream position it starts at (:data:`~replwire.schema.capture.SEGMENT`); ``None`` in any other file."""

    proto_version: int
    server_version: int = 0
    options: dict[str, str] = field(default_factory=dict)
    format_version: int = layout.FORMAT_VERSION
    client_encoding: str = layout.DEFAULT_CLIENT_ENCODING
    slot_name: str | None = None
    system_identifier: str | None = None
    database: str | None = None
    segment: int | None = None
    segment_start: LSN | None = None

    @property
    def settings(self) -> tuple[int, dict[str, str], str]:
        """What records appended to a file must have been captured with, as the header says it."""
        return self.proto_version, self.options, self.client_encoding

    @property
    def source(self) -> dict[str, str | None]:
        """Where the records came from, by the header option's name: the slot, the server's system identifier
        and the database (``None`` for what the file does not say)."""
        return {layout.SLOT_NAME: self.slot_name, layout.SYSTEM_IDENTIFIER: self.system_identifier,
                layout.DATABASE: self.database}


#: A record as :meth:`CaptureReader.records` gives it with ``raw=True``: ``(offset, lsn, xid, data)``.
RawRecord = tuple[int, int, int, bytes]


@dataclass(frozen=True)
class CaptureRecord:
    """One stored message: its LSN, the xid column, the pgoutput bytes, and where the record starts."""

    lsn: LSN
    xid: int
    data: bytes
    offset: int | None = None


if (*RECORD_PLAN.names, RECORD_PLAN.data) != tuple(f.name for f in fields(CaptureRecord))[:-1]:  # all but offset
    raise walker.UnknownConstruct(f"the record fields {RECORD_PLAN.names + (RECORD_PLAN.data,)} are not "
                                  "CaptureRecord's")


@dataclass(frozen=True)
class TailProblem:
    """Why reading stopped before the end of the file: the valid part ends at ``offset``.  ``intact_from`` is
    where intact records start again after the damaged one (:meth:`CaptureReader.intact_after`): the file is
    then damaged inside, not cut short at its end."""

    offset: int
    reason: str
    size: int
    intact_from: int | None = None

    def __str__(self) -> str:
        if self.intact_from is not None:
            return (f"the record at offset {self.offset} is damaged ({self.reason}) and intact records follow "
                    f"it from offset {self.intact_from}: the file is damaged inside, not cut short at its end; "
                    f"the {self.size - self.offset} bytes from offset {self.offset} were not read")
        return (f"{self.size - self.offset} bytes after offset {self.offset} were not read: {self.reason} "
                f"(a torn or corrupt tail; everything before it is intact)")


def _reason(error: ConstructError) -> str:
    reason = getattr(error, "reason", None) or (str(error.args[0]) if error.args else type(error).__name__)
    return "record cut short" if "stream read less than specified amount" in reason else reason


#: How much of the file is read at a time (a record larger than this is read whole, up to the file's size).
CHUNK = 1 << 20
#: How much of the file's start the header is first parsed from.
HEADER_AHEAD = 1 << 16
_CUT_SHORT = "record cut short"
#: How far past a damaged record :meth:`CaptureReader.intact_after` looks for an intact one, and how many
#: bytes it may read and checksum in all while it looks.
RESYNC_WINDOW = 4 << 20
RESYNC_BUDGET = 256 << 20


def _no_records() -> Generator[Any, None, None]:
    """No records: what a :class:`Reading` holds until its reader attaches the generator that reads them
    (a generator, so that :meth:`Reading.close` can close it)."""
    yield from ()


class Reading(Iterator[Any]):
    """One pass over records, iterated once, and what it found.

    While it is iterated, ``end`` is the offset just after the last record it yielded (where it started,
    before the first); once it is done, ``end`` is just after the last good record it read, ``tail`` the
    :class:`TailProblem` of a torn or corrupt record that ended it (``None`` when it read every record in
    its range), and, for a reading that skips records (:meth:`CaptureReader.records` ``skip``), ``skipped``
    is how many it passed over after the last one it yielded.
    """

    __slots__ = ("_owned", "_records", "end", "skipped", "tail")

    def __init__(self, begin: int, owned: CaptureReader | None = None) -> None:
        self.end = begin
        self.tail: TailProblem | None = None
        self.skipped = 0
        self._records: Generator[Any, None, None] = _no_records()  # the reader then attaches its scan
        self._owned = owned

    def __iter__(self) -> Iterator[Any]:
        return self._records  # (a for loop then runs the generator itself, with no call per record here)

    def __next__(self) -> Any:
        return next(self._records)

    def close(self) -> None:
        """Stop reading early (closing the file if the reading owns it)."""
        self._records.close()
        if self._owned is not None:
            self._owned.close()


class CaptureReader:
    """A capture file open for reading: ``header`` is read on opening, ``header_end`` is the offset of the
    first record, ``size`` the file's size then (:meth:`refresh` takes it again).  :meth:`records` reads
    them.  Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._file = open(self.path, "rb")  # noqa: SIM115 -- closed by close()
        self.size = os.fstat(self._file.fileno()).st_size
        # The header is parsed from its first bytes only (construct's String reads ahead to the end of what it
        # is given, which for a whole file is the whole file); a longer header is read again with more.
        ahead = HEADER_AHEAD
        while True:
            stream = io.BytesIO(self._file.read(min(ahead, self.size)))
            self._file.seek(0)
            try:
                raw = layout.HEADER.parse_stream(stream)["header"]
                break
            except ConstructError as error:
                reason = _reason(error)
                if ahead < self.size and (reason == _CUT_SHORT or reason.startswith("no NUL terminator")):
                    ahead *= 4  # the header goes on past what was read
                    continue
                self.close()
                raise CaptureFileError(self.path, f"not a readable capture file header: {_reason(error)}",
                                       0) from None
        if raw.format_version not in layout.FORMAT_VERSIONS:
            self.close()
            raise CaptureFileError(self.path, f"format version {raw.format_version} is not supported "
                                              f"(this replwire reads {', '.join(map(str, layout.FORMAT_VERSIONS))})",
                                   8)
        options = {o.name: o.value for o in raw.options}
        encoding = options.pop(layout.CLIENT_ENCODING, layout.DEFAULT_CLIENT_ENCODING)
        slot_name, system_identifier, database = (options.pop(name, None) for name in
                                                  (layout.SLOT_NAME, layout.SYSTEM_IDENTIFIER, layout.DATABASE))
        segment, segment_start = options.pop(layout.SEGMENT, None), options.pop(layout.SEGMENT_START, None)
        try:
            number = None if segment is None else int(segment)
            start = None if segment_start is None else LSN(segment_start)
        except ValueError:
            self.close()
            raise CaptureFileError(self.path, f"not a readable capture file header: segment {segment!r} starting "
                                              f"at {segment_start!r}", 0) from None
        self.header = CaptureHeader(proto_version=raw.proto_version, server_version=raw.server_version,
                                    options=options, format_version=raw.format_version, client_encoding=encoding,
                                    slot_name=slot_name, system_identifier=system_identifier, database=database,
                                    segment=number, segment_start=start)
        self.header_end = stream.tell()
        #: The file is still being written (:mod:`~replwire.codec.io.follow`): a record cut short by its end
        #: is one being written, not searched past for intact records (see :meth:`_tail`).
        self.growing = False

    def records(self, start: int | None = None, stop: int | None = None, *, raw: bool = False,
                skip: frozenset[int] | None = None, closing: bool = False) -> Reading:
        """A :class:`Reading` of the records whose offset is at least ``start`` and below ``stop``:
        :class:`CaptureRecord` s, or with ``raw=True`` plain :data:`RawRecord` tuples ``(offset, lsn, xid,
        data)`` (``lsn`` an ``int``), for readers that go through millions of records and need few of them
        as objects.

        ``start`` (default: the first record, ``header_end``) must be a record boundary: an offset a record
        reported, or a reading's ``end``; anything else reads as a corrupt record.  ``stop`` defaults to the
        end of the file; a record that starts below ``stop`` is yielded whole even if it ends after it, so
        ranges split at record boundaries cover every record once.  The first torn or corrupt record ends
        the reading (its ``tail``).  Readings of one reader may be iterated in turn: each reads at its own
        positions.

        ``skip`` (with ``raw=True``): the records whose payload starts with one of its bytes are read and
        checked like the rest, but only counted; each record yielded carries, as a fifth item, how many were
        passed over just before it, and the reading's ``skipped`` counts those after the last.  For readers
        that need only a few kinds of message out of millions (the first pass of split decoding skips the
        row changes): a record passed over costs a fraction of one yielded.

        ``closing=True``: the reader is closed when the reading ends (for a reading that is all the
        caller needs of the file).
        """
        if skip is not None and not raw:
            raise ValueError("skip gives raw records: pass raw=True")
        if start is None:
            start = self.header_end
        elif not self.header_end <= start <= self.size:
            raise ValueError(f"{self.path}: start {start} is outside the records ({self.header_end} to {self.size})")
        reading = Reading(start, self if closing else None)
        reading._records = self._scan(reading, start, self.size if stop is None else min(stop, self.size), raw,
                                      skip, closing)
        return reading

    def _scan(self, reading: Reading, begin: int, end: int, raw: bool, skip: frozenset[int] | None,
              closing: bool) -> Generator[Any, None, None]:
        """The records from ``begin`` (a record boundary) while one starts below ``end`` (see :meth:`records`);
        what ends the scan goes into ``reading``.

        ``buf`` holds the file's bytes from offset ``base`` on; ``i`` is where the next record starts in it.
        Every read is positioned and capped by the file's size, so interleaved readings do not disturb each
        other and a corrupt length cannot make a read allocate more than the file holds.  ``reading.end`` is
        set before each yield and at the end: only then can anyone look at it."""
        size, file = self.size, self._file
        unpack_head, head_size = RECORD_PLAN.head.unpack_from, RECORD_PLAN.head.size
        unpack_crc, crc_size = RECORD_PLAN.crc.unpack_from, RECORD_PLAN.crc.size
        crc32, new_lsn, record = zlib.crc32, int.__new__, CaptureRecord
        buf, base, i = b"", begin, 0
        view = memoryview(buf)
        skipped = 0
        try:
            while base + i < end:
                if len(buf) - i < head_size:
                    file.seek(base + len(buf))
                    ahead = min(CHUNK, end - base - len(buf))  # (no further than the range asks)
                    buf = buf[i:] + file.read(min(max(ahead, head_size), size - base - len(buf)))
                    base, i = base + i, 0
                    view = memoryview(buf)
                    if len(buf) < head_size:
                        reading.tail = self._tail(base, _CUT_SHORT)
                        break
                lsn, xid, length = unpack_head(buf, i)  # the order checked against CaptureRecord's fields above
                total = head_size + length + crc_size
                if base + i + total > size:  # also catches a corrupt length before anything is allocated
                    reading.tail = self._tail(base + i, _CUT_SHORT)
                    break
                if len(buf) - i < total:
                    file.seek(base + len(buf))
                    ahead = min(CHUNK, end - base - len(buf))
                    buf = buf[i:] + file.read(min(max(ahead, total - len(buf) + i), size - base - len(buf)))
                    base, i = base + i, 0
                    view = memoryview(buf)
                    if len(buf) < total:  # the file is shorter now than when it was opened (cut meanwhile)
                        reading.tail = self._tail(base, _CUT_SHORT)
                        break
                data_end = i + head_size + length
                (stored,) = unpack_crc(buf, data_end)
                computed = crc32(view[i:data_end])
                if stored != computed:
                    reading.tail = self._tail(base + i, f"checksum mismatch: stored {stored:08x}, computed "
                                                        f"{computed:08x}")
                    break
                offset, i = base + i, data_end + crc_size
                if skip is not None:
                    if length and buf[data_end - length] in skip:
                        skipped += 1
                        continue
                    reading.end = base + i
                    yield offset, lsn, xid, buf[data_end - length:data_end], skipped
                    skipped = 0
                    continue
                reading.end = base + i
                if raw:
                    yield offset, lsn, xid, buf[data_end - length:data_end]
                else:
                    yield record(new_lsn(LSN, lsn), xid, buf[data_end - length:data_end], offset)
            reading.end, reading.skipped = base + i, skipped
        finally:
            if closing:
                self.close()

    def _tail(self, offset: int, reason: str) -> TailProblem:
        """The :class:`TailProblem` of the damaged or cut-short record at ``offset``.  In a growing file
        (:attr:`growing`) a record cut short by the end of the file is one being written: no search for
        intact records after it."""
        if self.growing and reason == _CUT_SHORT:
            return TailProblem(offset, reason, self.size)
        return TailProblem(offset, reason, self.size, self.intact_after(offset))

    def refresh(self) -> int:
        """Take the file's size again (a file still being written has grown since it was opened): the
        readings made after this read up to it.  Returns it."""
        self.size = os.fstat(self._file.fileno()).st_size
        return self.size

    def intact_after(self, offset: int) -> int | None:
        """The offset of the first intact record after the damaged one at ``offset`` (a reading's ``tail``):
        one whose checksum holds and which the file's end or another such record follows; ``None`` when
        none does (the damage runs to the end of the file, as an interrupted write leaves it).

        Where the damaged record's length still points at an intact record (a changed byte in its data),
        that record is found at once; otherwise every offset up to :data:`RESYNC_WINDOW` bytes on is
        tried.  What this reads and checksums is capped (:data:`RESYNC_BUDGET` bytes), so a file built to
        make every offset look like the start of a long record ends the search early, with ``None``."""
        size, head_size, crc_size = self.size, RECORD_PLAN.head.size, RECORD_PLAN.crc.size
        budget = [RESYNC_BUDGET]

        def record_end(at: int) -> int | None:
            """Where the record at ``at`` ends, if its checksum holds."""
            if at + head_size > size:
                return None
            self._file.seek(at)
            head = self._file.read(head_size)
            if len(head) < head_size:
                return None
            total = head_size + RECORD_PLAN.head.unpack(head)[-1] + crc_size
            if at + total > size or total > budget[0]:
                return None
            budget[0] -= total
            crc, left = zlib.crc32(head), total - head_size - crc_size
            while left:
                chunk = self._file.read(min(left, CHUNK))
                if not chunk:  # the file is shorter now than when it was opened
                    return None
                crc, left = zlib.crc32(chunk, crc), left - len(chunk)
            stored = self._file.read(crc_size)
            return at + total if len(stored) == crc_size and RECORD_PLAN.crc.unpack(stored)[0] == crc else None

        def intact(at: int) -> bool:
            end = record_end(at)
            return end is not None and (end == size or record_end(end) is not None)

        # first where the damaged record's length points, then every offset after it in the window
        unpack_from = RECORD_PLAN.head.unpack_from
        self._file.seek(offset)
        window = self._file.read(min(1 + RESYNC_WINDOW + head_size, size - offset))
        pointed = offset + head_size + unpack_from(window, 0)[-1] + crc_size if len(window) >= head_size else size
        if pointed < size and intact(pointed):
            return pointed
        for i in range(1, len(window) - head_size + 1):
            if offset + i + head_size + unpack_from(window, i)[-1] + crc_size > size or offset + i == pointed:
                continue  # (most offsets: a length no record in the rest of the file can have)
            if budget[0] <= 0:
                return None
            if intact(offset + i):
                return offset + i
        return None

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> CaptureReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def cut_file(path: str | os.PathLike[str], size: int) -> None:
    """Cut the file ``path`` to ``size`` bytes, durably (flushed and fsynced before this returns)."""
    with open(path, "r+b") as handle:
        handle.truncate(size)
        handle.flush()
        os.fsync(handle.fileno())


def read_capture(path: str | os.PathLike[str]) -> CaptureReader:
    """Open a capture file for reading (see :class:`CaptureReader`)."""
    return CaptureReader(path)


def encode_header(header: CaptureHeader) -> bytes:
    """The header's bytes: the entries that are not pgoutput options (client encoding, where the records came
    from) go after the pgoutput options, each only when it says something."""
    for name in layout.NOT_PGOUTPUT:
        if name in header.options:
            raise ValueError(f"{name} is not a pgoutput option: give it as the header's {name}")
    options = [{"name": k, "value": v} for k, v in header.options.items()]
    if header.client_encoding != layout.DEFAULT_CLIENT_ENCODING:  # UTF8 files stay as they always were
        options.append({"name": layout.CLIENT_ENCODING, "value": header.client_encoding})
    options += [{"name": k, "value": v} for k, v in header.source.items() if v is not None]
    if header.segment is not None:
        options.append({"name": layout.SEGMENT, "value": str(header.segment)})
    if header.segment_start is not None:
        options.append({"name": layout.SEGMENT_START, "value": str(LSN(header.segment_start))})
    built: bytes = layout.HEADER.build({"header": {"magic": None, "format_version": header.format_version,
                                                   "server_version": header.server_version,
                                                   "proto_version": header.proto_version, "options": options}})
    return built


#: A record's data: its bytes, or its pieces in order (a built prefix and rows that are not to be copied).
RecordData = bytes | memoryview | tuple[bytes | memoryview, ...]


def record_size(data: RecordData) -> int:
    """The bytes of a record's data, whole or in pieces."""
    return sum(map(len, data)) if isinstance(data, tuple) else len(data)


def encode_record(lsn: int, xid: int, data: RecordData) -> bytes:
    """One record's bytes, laid out by the plan derived from :data:`~replwire.schema.capture.RECORD` (a test
    checks it against construct's build)."""
    out = _Pending()
    out.add(((lsn, xid, data),))
    return b"".join(out.pieces())


#: How many bytes of records :class:`CaptureWriter` gathers before it writes them to the file.
BATCH = 1 << 20
#: A piece of a record's data at least this long is written from where it is, not copied into the batch.
_AS_IS = 64 * 1024


class _Pending:
    """Records laid out but not yet written: small parts gathered in a bytearray, large pieces of data kept
    as they are between them (:data:`_AS_IS`), in the order they go to the file."""

    def __init__(self) -> None:
        self.done: list[bytes | bytearray | memoryview] = []  # before the gathered bytes
        self.done_size = 0
        self.gathered = bytearray()

    def __len__(self) -> int:
        return self.done_size + len(self.gathered)

    def add(self, records: Iterable[tuple[int, int, RecordData]]) -> None:
        """Append the bytes of each ``(lsn, xid, data)`` record (what :func:`encode_record` returns for one)."""
        head_of, crc_of, crc32 = RECORD_PLAN.head.pack, RECORD_PLAN.crc.pack, zlib.crc32
        out = self.gathered
        for lsn, xid, data in records:
            if not isinstance(data, tuple):
                head = head_of(lsn, xid, len(data))
                if len(data) < _AS_IS:
                    out += head
                    out += data
                    out += crc_of(crc32(data, crc32(head)))
                    continue
                data = (data,)
            head = head_of(lsn, xid, record_size(data))
            out += head
            crc = crc32(head)
            for piece in data:
                crc = crc32(piece, crc)
                if len(piece) < _AS_IS:
                    out += piece
                else:
                    self.done_size += len(out) + len(piece)
                    self.done += (out, piece)
                    out = self.gathered = bytearray()
            out += crc_of(crc)

    def pieces(self) -> list[bytes | bytearray | memoryview]:
        return [*self.done, self.gathered] if self.done else [self.gathered]

    def keep(self, size: int) -> None:
        """Drop everything after the first ``size`` bytes."""
        if size >= self.done_size:
            del self.gathered[size - self.done_size:]
            return
        whole = b"".join(self.pieces())
        self.done, self.done_size, self.gathered = [], 0, bytearray(whole[:size])


class CaptureWriter:
    """Append records to a capture file, creating it with ``header`` or continuing an existing one.

    Continuing a file whose header differs (protocol version, options or client encoding) is refused: its
    records would be read with the wrong context.  A torn or corrupt tail is cut off first and reported in
    ``recovered``; a file damaged inside (intact records after the damaged one) is refused, not cut.
    Records are gathered in memory and written in batches of about :data:`BATCH` bytes; :meth:`sync` makes
    everything appended so far durable (write + flush + fsync) and returns the file size, after which the
    caller may acknowledge the positions appended.

    A write or fsync that fails (a full disk, an I/O error) cuts the file back to where the last :meth:`sync`
    left it -- the end of the last durable record -- and raises; the writer is broken from then on (every
    later call raises the same error), so nothing can be written after bytes of a batch that did not make it
    whole, whatever space there is by then.  Nothing appended after the last sync was acknowledged: the
    server sends it again when the capture is resumed.
    """

    def __init__(self, path: str | os.PathLike[str], header: CaptureHeader) -> None:
        self.path = os.fspath(path)
        self.header = header
        self.recovered: TailProblem | None = None
        self._last: int | None = None  # the LSN of the last record appended
        self._file: Any
        self._batch = _Pending()  # appended, not yet written: the file's logical end is tell() + len(batch)
        self._durable = 0  # the file's size after the last sync: the end of the last durable record
        self._failed: OSError | None = None  # the write or fsync that failed (the writer is broken)
        self._cut = True  # the file ends at _durable (False: a failure's cut is still to be made)
        #: the file's format version: a file continued keeps the one it was created with
        self.format_version = header.format_version
        if os.path.exists(self.path) and os.path.getsize(self.path) > 0:
            with CaptureReader(self.path) as reader:
                self.format_version = reader.header.format_version
                if reader.header.settings != header.settings:
                    raise CaptureFileError(self.path, "cannot append: the file was captured with (proto_version, "
                                                      f"options, client_encoding) {reader.header.settings}, not "
                                                      f"{header.settings}")
                reading = reader.records(raw=True)
                for _, lsn, _, _ in reading:
                    self._last = lsn
                self.recovered, end = reading.tail, reading.end
            if self.recovered is not None and self.recovered.intact_from is not None:
                raise CaptureFileError(self.path, f"cannot append: {self.recovered}; cutting the file there "
                                                  "would drop them", self.recovered.offset, damaged_inside=True)
            # unbuffered: every byte that reaches the file is one this writer knows about (see _write)
            self._file = open(self.path, "r+b", buffering=0)  # noqa: SIM115 -- closed by close()
            try:
                self._file.truncate(end)
                self._file.seek(end)
                self._durable = end
                self._fsync()
            except BaseException:
                self._file.close()
                raise
        else:
            # Written under a temporary name and renamed once its header is durable: a reader never finds the
            # file without its whole header (a capture being started, watched by --status or a test).
            making = f"{self.path}.{os.getpid()}.new"
            self._file = open(making, "wb", buffering=0)  # noqa: SIM115
            try:
                self._batch.gathered += encode_header(header)
                self.sync()
                os.rename(making, self.path)
                directory = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
                try:
                    os.fsync(directory)  # the new file's name is durable too
                finally:
                    os.close(directory)
            except BaseException:
                self._file.close()
                # a file without its whole header, or not durably named, is no capture file: not left behind
                os.unlink(making if os.path.exists(making) else self.path)
                raise

    def append(self, lsn: int, xid: int, data: RecordData) -> None:
        self.extend(((lsn, xid, data),))

    def extend(self, records: Sequence[tuple[int, int, RecordData]]) -> None:
        """Append the ``(lsn, xid, data)`` records, in order (a burst costs less than one :meth:`append` per
        record).  A record's data in pieces is written as one record; its large pieces must not change until
        the next :meth:`sync`."""
        self._check()
        if not records:
            return
        before = len(self._batch)
        try:
            self._batch.add(records)
        except BaseException:  # (a KeyboardInterrupt): all of the records or none
            self._batch.keep(before)
            raise
        self._last = records[-1][0]
        if len(self._batch) >= BATCH:
            self._write()

    def confirm(self, lsn: int, at_start: bool = False) -> None:
        """Append a ``SlotConfirmed`` record (:data:`~replwire.schema.capture.SLOT_CONFIRMED`): the slot's
        confirmed position as streaming starts (``at_start``), or a position about to be acknowledged, which
        :meth:`sync` must make durable first.  Only between transactions.  A file of an older format version
        gets none (its readers would not know the record)."""
        if self.format_version >= 3:
            self.append(lsn, 0, _confirmed_record(lsn, at_start))

    def _check(self) -> None:
        if self._failed is not None:
            raise self._failed

    def _write(self) -> None:
        """Write the batch whole, or fail (:meth:`_fail`): a short write is followed by the rest."""
        if not self._batch:
            return
        start = self._file.tell()
        views = [memoryview(piece) for piece in self._batch.pieces()]
        try:
            for view in views:
                done = 0
                while done < len(view):
                    done += self._file.write(view[done:])
        except OSError as error:
            self._fail(error)
            raise
        except BaseException:  # interrupted (a KeyboardInterrupt): the batch is written whole next time
            self._file.truncate(start)
            self._file.seek(start)
            raise
        finally:
            for view in views:
                view.release()
        self._batch = _Pending()

    def _fail(self, error: OSError) -> None:
        """A write or fsync failed: drop what is gathered, cut the file back to the end of its last durable
        record, and break the writer (``error`` is raised by every later call)."""
        self._failed = error
        self._batch = _Pending()  # (a new one: the failed write's frames may still hold views of the old)
        self._cut = False
        self._cut_back()

    def _cut_back(self) -> None:
        try:
            self._file.truncate(self._durable)
            self._file.seek(self._durable)
            os.fsync(self._file.fileno())
        except OSError:
            return  # tried again by close()
        self._cut = True

    @property
    def failed(self) -> OSError | None:
        """The write or fsync that failed, if one did (the file was cut back to :attr:`durable`)."""
        return self._failed

    @property
    def durable(self) -> int:
        """The file's size after the last :meth:`sync`: where its last durable record ends."""
        return self._durable

    @property
    def last_lsn(self) -> LSN | None:
        """The LSN of the last record in the file (appended or found there), or ``None``."""
        return None if self._last is None else LSN(self._last)

    def mark(self) -> tuple[int, int | None]:
        """Where the file ends now (records gathered but not yet written included), for :meth:`rewind`."""
        return self._file.tell() + len(self._batch), self._last

    def rewind(self, mark: tuple[int, int | None]) -> None:
        """Drop every record appended after ``mark`` (from :meth:`mark`); call :meth:`sync` to make it durable."""
        self._check()
        size, last_lsn = mark
        written = self._file.tell()
        if size >= written:
            self._batch.keep(size - written)
        else:
            self._batch = _Pending()
            self._file.truncate(size)
            self._file.seek(size)
            self._durable = min(self._durable, size)
        self._last = last_lsn

    def _fsync(self) -> None:
        self._check()
        self._write()
        try:
            os.fsync(self._file.fileno())
        except OSError as error:
            self._fail(error)
            raise
        self._durable = self._file.tell()

    def sync(self) -> int:
        """Flush and fsync; returns the durable size of the file."""
        self._fsync()
        return self._durable

    def close(self) -> None:
        """Sync and close; a broken writer's file is only closed (cut back to its last durable record)."""
        if self._file.closed:
            return
        try:
            if self._failed is None:
                self.sync()
            elif not self._cut:
                self._cut_back()
        finally:
            self._file.close()

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def is_capture_file(path: str | os.PathLike[str]) -> bool:
    """Whether the file starts with the capture file magic."""
    with open(path, "rb") as handle:
        return handle.read(len(layout.MAGIC)) == layout.MAGIC
