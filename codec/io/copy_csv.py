"""The COPY-CSV form of a captured stream: the rows of ``pg_logical_slot_peek_binary_changes`` as COPY writes them.

Strategy: ``COPY (SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(...)) TO STDOUT WITH (FORMAT
csv)`` writes one row per line, ``lsn,xid,\\x<hex>``, which COPY never quotes, so a line is split on its two
commas and each column checked against the text the server prints for it.  :func:`read_copy_csv` gives the
rows as a :class:`~replwire.codec.io.capture_file.Reading`, the same as a capture file's records, so both
forms are read the same way.  Lines have no checksum to tell a torn tail by: a line that is not a row raises
:class:`~replwire.codec.io.capture_file.CaptureFileError`.  A line is read a bounded piece at a time and
must start like a row before more of it is read, and none may be longer than a row can be, so a file that
is not COPY-CSV cannot make the reader allocate much.
"""

from __future__ import annotations

import binascii
import os
import re
from collections.abc import Generator
from typing import Any

from ..scalars import LSN
from .capture_file import CaptureFileError, CaptureRecord, Reading

__all__ = ["MAX_CSV_LINE", "read_copy_csv"]


def read_copy_csv(path: str | os.PathLike[str], start: int = 0, stop: int | None = None, *,
                  raw: bool = False) -> Reading:
    """A :class:`Reading` of the records in the CSV that ``COPY (SELECT lsn, xid, data FROM
    pg_logical_slot_peek_binary_changes(...)) TO STDOUT WITH (FORMAT csv)`` writes (bytea in hex:
    ``\\x...``): one row per line, ``lsn,xid,\\x<hex>`` (COPY never quotes these three).  Only the rows
    whose line starts at an offset in ``[start, stop)`` (``start`` a line start); each record's ``offset`` is
    where its line starts.  ``raw=True`` gives ``(offset, lsn, xid, data)`` tuples, as
    :meth:`CaptureReader.records` does.  A line that is not such a row raises :class:`CaptureFileError`
    (lines have no checksum to tell a torn tail by), so the reading's ``tail`` stays ``None``."""
    reading = Reading(start)
    reading._records = _copy_csv_rows(reading, os.fspath(path), start, stop, raw)
    return reading


_LSN_TEXT = re.compile(rb"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")  # as the server prints an LSN
_XID_TEXT = re.compile(rb"[0-9]{1,10}")
#: The longest line a COPY-CSV row can be: an LSN, an xid, and the data column -- a bytea, which PostgreSQL
#: holds to 1 GB (MaxAllocSize, 0x3fffffff bytes) -- in hex, with its line break.
MAX_CSV_LINE = len(b"FFFFFFFF/FFFFFFFF,4294967295,\\x") + 2 * 0x3FFFFFFF + 2
#: How much of a line is read before its start is checked: a longer line must start like a row.
_CSV_HEAD = 1 << 16
_ROW_START = re.compile(rb"[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8},[0-9]{1,10},\\x[0-9A-Fa-f]*")
#: A row's LSN (and its two halves) and xid, up to its data's hex digits.
_ROW = re.compile(rb"(([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})),([0-9]{1,10}),\\x")


def _line(name: str, offset: int) -> str:
    """The line at ``offset`` of the file ``name`` as a message names it: by its number in the file, whichever
    offset the reading started from (the lines before it are counted only here, for the message)."""
    before, left = 0, offset
    with open(name, "rb") as handle:
        while left > 0:
            chunk = handle.read(min(1 << 20, left))
            if not chunk:
                break
            before += chunk.count(b"\n")
            left -= len(chunk)
    return f"line {before + 1}"


def _copy_csv_rows(reading: Reading, name: str, start: int, stop: int | None, raw: bool
                   ) -> Generator[Any, None, None]:
    with open(name, "rb") as handle:
        handle.seek(start)
        offset = start
        readline = handle.readline
        match_row, unhexlify = _ROW.match, binascii.unhexlify
        last_lsn, last_position = b"", 0  # the fast way's last LSN text and what it says
        while True:
            line = readline(_CSV_HEAD)
            if not line:
                break
            if stop is not None and offset >= stop:
                break
            if len(line) == _CSV_HEAD and line[-1:] != b"\n":  # a long line: read on only if it starts like a row
                if _ROW_START.fullmatch(line) is None:
                    raise CaptureFileError(name, f"{_line(name, offset)} is not an (lsn, xid, data) row: its first "
                                                 f"{_CSV_HEAD} bytes have no line break", offset)
                line += readline(MAX_CSV_LINE - len(line))
                if len(line) == MAX_CSV_LINE and line[-1:] != b"\n":
                    raise CaptureFileError(name, f"{_line(name, offset)} is longer than a row can be ({MAX_CSV_LINE} "
                                                 "bytes: the data column, a bytea, holds at most 1 GB)", offset)
            here, offset = offset, offset + len(line)
            # the common case at once: a row as COPY writes it, ending in a line break
            row = match_row(line)
            if row is not None and line[-1] == 10:
                try:
                    payload = unhexlify(line[row.end():-1])
                except ValueError:  # (binascii.Error is one) -- the line as any other, for its error
                    pass
                else:
                    lsn = row[1]
                    if lsn != last_lsn:  # (the rows of one commit share an LSN)
                        last_lsn, last_position = lsn, (int(row[2], 16) << 32) | int(row[3], 16)
                    reading.end = offset
                    number = int(row[4])
                    yield (here, last_position, number, payload) if raw else CaptureRecord(
                        LSN(last_position), number, payload, here)
                    continue
            try:
                lsn, xid, data = line.rstrip(b"\r\n").split(b",")
                if not data.startswith(b"\\x"):
                    raise ValueError("the data column is not bytea hex (\\x...)")
                match = _LSN_TEXT.fullmatch(lsn)
                if match is None:
                    raise ValueError(f"not an LSN: {lsn.decode('ascii', 'replace')!r}")
                position = (int(match[1], 16) << 32) | int(match[2], 16)
                if not _XID_TEXT.fullmatch(xid):
                    raise ValueError(f"not an xid: {xid.decode('ascii', 'replace')!r}")
                number, payload = int(xid), binascii.unhexlify(data[2:])
            except ValueError as error:  # (binascii.Error is one)
                raise CaptureFileError(name, f"not an (lsn, xid, data) row: {error}", here) from None
            reading.end = offset
            yield (here, position, number, payload) if raw else CaptureRecord(LSN(position), number, payload, here)
