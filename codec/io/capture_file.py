"""Capture files: pgoutput messages stored durably, read back, and a torn tail survived.

Strategy: the layout is :mod:`replwire.schema.capture` (a checksummed header, then checksummed records);
this module only moves bytes between those declarations and files.  The header is parsed by its
construct declaration.  Records, read by the hundred thousand, go through a plan derived once from the
walker's layout of :data:`~replwire.schema.capture.RECORD` (one ``struct`` format for its fixed fields
and the data length, then the CRC-32 after the data), over large chunks of the file; a test checks that
it agrees with construct's parse of valid and damaged records.  Reads never ask the file for more bytes
than it has, so a corrupt length cannot make the reader allocate; the first record that is cut short or
fails its checksum ends the valid part, and is reported (:class:`TailProblem`) with everything before it
kept.  A writer opened on an existing file checks the header matches, cuts such a tail off and appends
after the last good record.  :meth:`CaptureWriter.sync` flushes and fsyncs, so a caller can acknowledge
positions only once they are on disk.

The COPY-CSV form -- what ``COPY (SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(...)) TO
STDOUT WITH (FORMAT csv)`` writes -- is read by :func:`read_copy_csv`.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any, BinaryIO

from construct import ConstructError

from ...schema import capture as layout
from .. import walker
from ..errors import ReplwireError
from ..scalars import LSN


class CaptureFileError(ReplwireError, ValueError):
    """A file that is not a readable capture file, or one that cannot be appended to as asked."""

    def __init__(self, path: str, reason: str, offset: int | None = None) -> None:
        self.path, self.reason, self.offset = path, reason, offset
        where = f" at offset {offset}" if offset is not None else ""
        super().__init__(f"{path}{where}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:  # whole after crossing a process boundary, notes and all
        return (CaptureFileError, (self.path, self.reason, self.offset), self.__dict__)


@dataclass(frozen=True)
class CaptureHeader:
    """What a capture file says about its records."""

    proto_version: int
    server_version: int = 0
    options: dict[str, str] = field(default_factory=dict)
    format_version: int = layout.FORMAT_VERSION


#: A record as :meth:`CaptureReader.raw_records` gives it: ``(offset, lsn, xid, data)``.
RawRecord = tuple[int, int, int, bytes]


@dataclass(frozen=True)
class CaptureRecord:
    """One stored message: its LSN, the xid column, the pgoutput bytes, and where the record starts."""

    lsn: LSN
    xid: int
    data: bytes
    offset: int | None = None


@dataclass(frozen=True)
class TailProblem:
    """Why reading stopped before the end of the file: the valid part ends at ``offset``."""

    offset: int
    reason: str
    size: int

    def __str__(self) -> str:
        return (f"{self.size - self.offset} bytes after offset {self.offset} were not read: {self.reason} "
                f"(a torn or corrupt tail; everything before it is intact)")


class _Capped(io.RawIOBase):
    """A file reader that never hands out more bytes than the file has left (no allocation from a
    corrupt length)."""

    def __init__(self, raw: BinaryIO, size: int) -> None:
        self.raw, self.size = raw, size

    def read(self, n: int = -1) -> bytes:
        left = self.size - self.raw.tell()
        return self.raw.read(left if n is None or n < 0 else min(n, left))

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()


def _reason(error: ConstructError) -> str:
    reason = getattr(error, "reason", None) or (str(error.args[0]) if error.args else type(error).__name__)
    return "record cut short" if "stream read less than specified amount" in reason else reason


@dataclass(frozen=True)
class RecordPlan:
    """Where a record's parts lie, derived from the walker's layout of the record declaration.

    ``head`` unpacks the fixed fields (``names``) and then the length of the length-prefixed field
    ``data``; the data follows the head, and the CRC-32 (``crc``) of head and data follows the data.
    """

    head: struct.Struct
    names: tuple[str, ...]
    data: str
    crc: struct.Struct


def record_plan(declaration: Any) -> RecordPlan:
    """The :class:`RecordPlan` of a record declared as one checksummed record of fixed-size integers
    followed by one length-prefixed field (the shape of :data:`~replwire.schema.capture.RECORD`); any other
    shape raises :class:`~replwire.codec.walker.UnknownConstruct`, so a change to the declaration cannot be
    misread silently."""
    outer = walker.node(declaration)
    if not (isinstance(outer, walker.Record) and len(outer.fields) == 1
            and isinstance(outer.fields[0].node, walker.Checksummed)
            and isinstance(outer.fields[0].node.node, walker.Record)):
        raise walker.UnknownConstruct(f"a capture record must be one checksummed record, not {outer!r}")
    *fixed, last = outer.fields[0].node.node.fields
    if not all(isinstance(f.node, walker.Int) for f in fixed) or not isinstance(last.node, walker.LengthPrefixed):
        raise walker.UnknownConstruct("a capture record's fields must be integers, then one length-prefixed "
                                      f"field: {[type(f.node).__name__ for f in (*fixed, last)]}")
    head = ">" + "".join(f.node.format for f in fixed) + last.node.length.format
    # walker.Checksummed: the record's bytes are followed by their CRC-32 (zlib's), a big-endian Int32
    return RecordPlan(struct.Struct(head), tuple(f.name for f in fixed), last.name, struct.Struct(">L"))


_PLAN = record_plan(layout.RECORD)
if (*_PLAN.names, _PLAN.data) != tuple(f.name for f in fields(CaptureRecord))[:-1]:  # all but offset
    raise walker.UnknownConstruct(f"the record fields {_PLAN.names + (_PLAN.data,)} are not CaptureRecord's")

#: How much of the file is read at a time (a record larger than this is read whole, up to the file's size).
CHUNK = 1 << 20
_CUT_SHORT = "record cut short"


class CaptureReader:
    """The records of a capture file; ``header`` is read on opening.

    Iterating (or :meth:`records`) yields :class:`CaptureRecord` objects.  Afterwards ``tail`` is a
    :class:`TailProblem` when the file ended with a torn or corrupt record (``None`` when every byte was
    read), and ``valid_end`` is the offset just after the last good record.  ``header_end`` is the offset
    of the first record.  Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._file = open(self.path, "rb")  # noqa: SIM115 -- closed by close()
        self.size = os.fstat(self._file.fileno()).st_size
        self._stream = _Capped(self._file, self.size)
        self.tail: TailProblem | None = None
        self.skipped = 0  # see skim()
        try:
            raw = layout.HEADER.parse_stream(self._stream)["header"]
        except ConstructError as error:
            self.close()
            raise CaptureFileError(self.path, f"not a readable capture file header: {_reason(error)}", 0) from None
        if raw.format_version != layout.FORMAT_VERSION:
            self.close()
            raise CaptureFileError(self.path, f"format version {raw.format_version} is not supported "
                                              f"(this replwire reads {layout.FORMAT_VERSION})", 8)
        self.header = CaptureHeader(proto_version=raw.proto_version, server_version=raw.server_version,
                                    options={o.name: o.value for o in raw.options},
                                    format_version=raw.format_version)
        self.header_end = self.valid_end = self._stream.tell()

    def __iter__(self) -> Iterator[CaptureRecord]:
        return self.records()

    def records(self, start: int | None = None, stop: int | None = None) -> Iterator[CaptureRecord]:
        """The records whose offset is at least ``start`` and below ``stop``.

        ``start`` (default: the first record, ``header_end``) must be a record boundary: an offset a
        :class:`CaptureRecord` or :meth:`offsets` reported, or ``valid_end``; anything else reads as a
        corrupt record.  ``stop`` defaults to the end of the file; a record that starts below ``stop`` is
        yielded whole even if it ends after it, so ranges split at record boundaries cover every record
        once.  ``tail`` and ``valid_end`` are set as for plain iteration: ``valid_end`` follows the last
        good record read, ``tail`` reports a torn or corrupt record met in the range (reading stops there).
        """
        begin = self._range_start(start)
        end = self.size if stop is None else min(stop, self.size)
        return self._scan(begin, end, False)

    def raw_records(self, start: int | None = None, stop: int | None = None) -> Iterator[RawRecord]:
        """:meth:`records` as plain ``(offset, lsn, xid, data)`` tuples (``lsn`` an ``int``): for readers
        that go through millions of records and need few of them as :class:`CaptureRecord` s."""
        begin = self._range_start(start)
        end = self.size if stop is None else min(stop, self.size)
        return self._scan(begin, end, True)

    def skim(self, start: int | None, stop: int | None, skip: frozenset[int]) -> Iterator[RawRecord]:
        """:meth:`raw_records`, less the records whose payload starts with a byte in ``skip``: those are
        read and checked like the rest, but only counted.  :attr:`skipped` is how many came just before the
        record last yielded, and once the records are done, how many came after it.

        For readers that need only a few kinds of message out of millions of records (the first pass of
        :mod:`replwire.codec.split` skips the row changes): a record passed over costs a fraction of
        one yielded."""
        begin = self._range_start(start)
        end = self.size if stop is None else min(stop, self.size)
        return self._scan(begin, end, True, skip)

    def offsets(self, stop: int | None = None) -> Iterator[tuple[int, int]]:
        """``(offset, size)`` of each record from the first while one starts below ``stop`` (default: the end of
        the file), for choosing where to split the file between readers.

        Cheap: only each record's head is read (the reader seeks past larger records), and CRCs are *not*
        checked (checking them, as :meth:`records` does, made this scan about 1.5 times as slow on small
        records, and it would have to read every byte of large ones).  So a record
        with a damaged payload is found only by :meth:`records`; here ``tail`` reports only a record cut
        short (or a length running past the end of the file), and ``valid_end`` follows the last record
        whose lengths fit in the file.  Records after the first :class:`TailProblem` that :meth:`records`
        reports are not part of the valid capture, even if a later range reads cleanly.
        """
        end = self.size if stop is None else min(stop, self.size)
        return self._lengths(end)

    def _lengths(self, end: int) -> Iterator[tuple[int, int]]:
        self.tail, self.valid_end = None, self.header_end
        size, file = self.size, self._file
        unpack_head, head_size, crc_size = _PLAN.head.unpack_from, _PLAN.head.size, _PLAN.crc.size
        buf, base, i = b"", self.header_end, 0
        while base + i < end:
            if len(buf) - i < head_size:  # also after a record longer than what is left of the chunk
                base, i = base + i, 0
                file.seek(base)
                buf = file.read(min(CHUNK, size - base))
                if len(buf) < head_size:
                    self.tail = TailProblem(base, _CUT_SHORT, size)
                    return
            total = head_size + unpack_head(buf, i)[-1] + crc_size
            if base + i + total > size:
                self.tail = TailProblem(base + i, _CUT_SHORT, size)
                return
            yield base + i, total
            i += total
            self.valid_end = base + i

    def _range_start(self, start: int | None) -> int:
        if start is None:
            return self.header_end
        if not self.header_end <= start <= self.size:
            raise ValueError(f"{self.path}: start {start} is outside the records ({self.header_end} to {self.size})")
        return start

    def _scan(self, begin: int, end: int, raw: bool, skip: frozenset[int] | None = None) -> Iterator[Any]:
        """The records from ``begin`` (a record boundary) while one starts below ``end``; with ``skip``, only
        counted (in ``skipped``) when the payload starts with one of its bytes.

        ``buf`` holds the file's bytes from offset ``base`` on; ``i`` is where the next record starts in it.
        Every read is positioned and capped by the file's size, so interleaved iterations do not disturb each
        other and a corrupt length cannot make a read allocate more than the file holds."""
        self.tail, self.valid_end = None, begin
        size, file = self.size, self._file
        unpack_head, head_size = _PLAN.head.unpack_from, _PLAN.head.size
        unpack_crc, crc_size = _PLAN.crc.unpack_from, _PLAN.crc.size
        crc32, new_lsn, record = zlib.crc32, int.__new__, CaptureRecord
        buf, base, i = b"", begin, 0
        view = memoryview(buf)
        self.skipped = skipped = 0
        while base + i < end:
            if len(buf) - i < head_size:
                file.seek(base + len(buf))
                ahead = min(CHUNK, end - base - len(buf))  # (no further than the range asks)
                buf = buf[i:] + file.read(min(max(ahead, head_size), size - base - len(buf)))
                base, i = base + i, 0
                view = memoryview(buf)
                if len(buf) < head_size:
                    self.tail, self.skipped = TailProblem(base, _CUT_SHORT, size), skipped
                    return
            lsn, xid, length = unpack_head(buf, i)  # the order checked against CaptureRecord's fields above
            total = head_size + length + crc_size
            if base + i + total > size:  # also catches a corrupt length before anything is allocated
                self.tail, self.skipped = TailProblem(base + i, _CUT_SHORT, size), skipped
                return
            if len(buf) - i < total:
                file.seek(base + len(buf))
                ahead = min(CHUNK, end - base - len(buf))
                buf = buf[i:] + file.read(min(max(ahead, total - len(buf) + i), size - base - len(buf)))
                base, i = base + i, 0
                view = memoryview(buf)
            data_end = i + head_size + length
            (stored,) = unpack_crc(buf, data_end)
            computed = crc32(view[i:data_end])
            if stored != computed:
                self.tail = TailProblem(base + i, f"checksum mismatch: stored {stored:08x}, computed {computed:08x}",
                                        size)
                self.skipped = skipped
                return
            offset, i = base + i, data_end + crc_size
            self.valid_end = base + i
            if skip is not None:
                if length and buf[data_end - length] in skip:
                    skipped += 1
                    continue
                self.skipped, skipped = skipped, 0
            if raw:
                yield offset, lsn, xid, buf[data_end - length:data_end]
            else:
                yield record(new_lsn(LSN, lsn), xid, buf[data_end - length:data_end], offset)
        self.skipped = skipped

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> CaptureReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_capture(path: str | os.PathLike[str]) -> CaptureReader:
    """Open a capture file for reading (see :class:`CaptureReader`)."""
    return CaptureReader(path)


def encode_header(header: CaptureHeader) -> bytes:
    options = [{"name": k, "value": v} for k, v in header.options.items()]
    return layout.HEADER.build({"header": {"magic": None, "format_version": header.format_version,
                                           "server_version": header.server_version,
                                           "proto_version": header.proto_version, "options": options}})


def encode_record(lsn: int, xid: int, data: bytes) -> bytes:
    return layout.RECORD.build({"record": {"lsn": lsn, "xid": xid, "data": data}})


class CaptureWriter:
    """Append records to a capture file, creating it with ``header`` or continuing an existing one.

    Continuing a file whose header differs (protocol version or options) is refused: its records would be
    read with the wrong context.  A torn or corrupt tail is cut off first and reported in ``recovered``.
    Records are buffered; :meth:`sync` makes everything written so far durable (flush + fsync) and returns
    the file size, after which the caller may acknowledge the positions written.
    """

    def __init__(self, path: str | os.PathLike[str], header: CaptureHeader) -> None:
        self.path = os.fspath(path)
        self.header = header
        self.recovered: TailProblem | None = None
        self.last_lsn: LSN | None = None
        if os.path.exists(self.path) and os.path.getsize(self.path) > 0:
            with CaptureReader(self.path) as reader:
                if (reader.header.proto_version, reader.header.options) != (header.proto_version, header.options):
                    raise CaptureFileError(self.path, f"cannot append: the file was captured with proto_version "
                                                      f"{reader.header.proto_version} and options "
                                                      f"{reader.header.options}, not {header.proto_version} and "
                                                      f"{header.options}")
                for record in reader:
                    self.last_lsn = record.lsn
                self.recovered, end = reader.tail, reader.valid_end
            self._file = open(self.path, "r+b")  # noqa: SIM115 -- closed by close()
            self._file.truncate(end)
            self._file.seek(end)
            self._fsync()
        else:
            self._file = open(self.path, "wb")  # noqa: SIM115
            self._file.write(encode_header(header))
            self.sync()
            directory = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
            try:
                os.fsync(directory)  # the new file's name is durable too
            finally:
                os.close(directory)

    def append(self, lsn: int, xid: int, data: bytes) -> None:
        self._file.write(encode_record(lsn, xid, data))
        self.last_lsn = LSN(lsn)

    def mark(self) -> tuple[int, LSN | None]:
        """Where the file ends now, for :meth:`rewind`."""
        return self._file.tell(), self.last_lsn

    def rewind(self, mark: tuple[int, LSN | None]) -> None:
        """Drop every record appended after ``mark`` (from :meth:`mark`); call :meth:`sync` to make it durable."""
        size, self.last_lsn = mark
        self._file.flush()
        self._file.truncate(size)
        self._file.seek(size)

    def _fsync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def sync(self) -> int:
        """Flush and fsync; returns the durable size of the file."""
        self._fsync()
        return self._file.tell()

    def close(self) -> None:
        if not self._file.closed:
            self.sync()
            self._file.close()

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_copy_csv(path: str | os.PathLike[str], start: int = 0, stop: int | None = None, *,
                  raw: bool = False) -> Iterator[Any]:
    """Records from the CSV that ``COPY (SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(...))
    TO STDOUT WITH (FORMAT csv)`` writes (bytea in hex: ``\\x...``): one row per line, ``lsn,xid,\\x<hex>``
    (COPY never quotes these three).  Only the rows whose line starts at an offset in ``[start, stop)``
    (``start`` a line start); each record's ``offset`` is where its line starts.  ``raw=True`` gives
    ``(offset, lsn, xid, data)`` tuples, as :meth:`CaptureReader.raw_records` does."""
    name = os.fspath(path)
    with open(name, "rb") as handle:
        handle.seek(start)
        offset = start
        for line in handle:
            if stop is not None and offset >= stop:
                return
            here, offset = offset, offset + len(line)
            try:
                lsn, xid, data = line.rstrip(b"\r\n").split(b",")
                if not data.startswith(b"\\x"):
                    raise ValueError("the data column is not bytea hex (\\x...)")
                position, number, payload = LSN(lsn.decode("ascii")), int(xid), bytes.fromhex(data[2:].decode("ascii"))
                yield (here, int(position), number, payload) if raw else CaptureRecord(position, number, payload, here)
            except ValueError as error:
                raise CaptureFileError(name, f"not an (lsn, xid, data) row: {error}", here) from None


def is_capture_file(path: str | os.PathLike[str]) -> bool:
    """Whether the file starts with the capture file magic."""
    with open(path, "rb") as handle:
        return handle.read(len(layout.MAGIC)) == layout.MAGIC
