"""Capture files: pgoutput messages stored durably, read back, and a torn tail survived.

Strategy: the layout is :mod:`replwire.schema.capture` (a checksummed header, then checksummed records);
this module only moves bytes between those declarations and files.  Reading streams record by record
through a reader that never asks the file for more bytes than it has, so a corrupt length cannot make it
allocate; the first record that is cut short or fails its checksum ends the valid part, and is reported
(:class:`TailProblem`) with everything before it kept.  A writer opened on an existing file checks the
header matches, cuts such a tail off and appends after the last good record.  :meth:`CaptureWriter.sync`
flushes and fsyncs, so a caller can acknowledge positions only once they are on disk.

The COPY-CSV form -- what ``COPY (SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(...)) TO
STDOUT WITH (FORMAT csv)`` writes -- is read by :func:`read_copy_csv`.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from construct import ConstructError

from ..schema import capture as layout
from .errors import ReplwireError
from .scalars import LSN


class CaptureFileError(ReplwireError, ValueError):
    """A file that is not a readable capture file, or one that cannot be appended to as asked."""

    def __init__(self, path: str, reason: str, offset: int | None = None) -> None:
        self.path, self.reason, self.offset = path, reason, offset
        where = f" at offset {offset}" if offset is not None else ""
        super().__init__(f"{path}{where}: {reason}")


@dataclass(frozen=True)
class CaptureHeader:
    """What a capture file says about its records."""

    proto_version: int
    server_version: int = 0
    options: dict[str, str] = field(default_factory=dict)
    format_version: int = layout.FORMAT_VERSION


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


class CaptureReader:
    """Iterate the records of a capture file; ``header`` is read on opening.

    After iteration, ``tail`` is a :class:`TailProblem` when the file ended with a torn or corrupt record
    (``None`` when every byte was read), and ``valid_end`` is the offset just after the last good record.
    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._file = open(self.path, "rb")  # noqa: SIM115 -- closed by close()
        self.size = os.fstat(self._file.fileno()).st_size
        self._stream = _Capped(self._file, self.size)
        self.tail: TailProblem | None = None
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
        self.valid_end = self._stream.tell()

    def __iter__(self) -> Iterator[CaptureRecord]:
        self._stream.seek(self.valid_end)
        while self.valid_end < self.size:
            start = self.valid_end
            try:
                raw = layout.RECORD.parse_stream(self._stream)["record"]
            except ConstructError as error:
                self.tail = TailProblem(start, _reason(error), self.size)
                return
            self.valid_end = self._stream.tell()
            yield CaptureRecord(LSN(raw.lsn), raw.xid, raw.data, start)

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


def read_copy_csv(path: str | os.PathLike[str]) -> Iterator[CaptureRecord]:
    """Records from the CSV that ``COPY (SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(...))
    TO STDOUT WITH (FORMAT csv)`` writes (bytea in hex: ``\\x...``)."""
    name = os.fspath(path)
    with open(name, newline="", encoding="ascii") as handle:
        for number, row in enumerate(csv.reader(handle), start=1):
            try:
                lsn, xid, data = row
                if not data.startswith("\\x"):
                    raise ValueError("the data column is not bytea hex (\\x...)")
                yield CaptureRecord(LSN(lsn), int(xid), bytes.fromhex(data[2:]))
            except ValueError as error:
                raise CaptureFileError(name, f"line {number}: not an (lsn, xid, data) row: {error}") from None


def is_capture_file(path: str | os.PathLike[str]) -> bool:
    """Whether the file starts with the capture file magic."""
    with open(path, "rb") as handle:
        return handle.read(len(layout.MAGIC)) == layout.MAGIC
