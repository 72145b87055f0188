"""The inputs of split decoding: files holding consecutive segments of one captured stream, and their records.

Strategy: :func:`open_inputs` looks at each file once -- its form, protocol version, where its records start
and how big it is -- and checks they agree; :func:`read_records` reads a range of an input's records,
whatever its form, through the one reading of each form in :mod:`replwire.codec.io.capture_file`.  A
record's stream *position* is ``(input << 48) | byte offset`` (:meth:`Input.position`): it orders records
across inputs and names a transaction by where it opened.

Inputs are replwire capture files and the COPY-CSV form (``COPY (SELECT lsn, xid, data FROM
pg_logical_slot_peek_binary_changes(...)) TO STDOUT WITH (FORMAT csv)``), which records no protocol
version, so one must be given for it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from ...schema.core import SQL_ASCII, UTF8, text_codec
from ..io.capture_file import CaptureFileError, Reading, is_capture_file, read_capture, read_copy_csv

__all__ = ["Input", "open_inputs", "read_records", "text_encoding"]

_POSITION_BITS = 48


@dataclass(frozen=True)
class Input:
    """One input file: ``form`` is ``"capture"`` or ``"copy-csv"``; records start at ``first``; ``encoding`` is
    the client encoding its Strings and text values are in."""

    path: str
    form: str
    proto_version: int
    size: int
    first: int
    index: int = 0
    encoding: str = UTF8

    def position(self, offset: int) -> int:
        """The stream position of the record at ``offset``."""
        return (self.index << _POSITION_BITS) | offset


def open_inputs(paths: Sequence[str | os.PathLike[str]], proto_version: int | None = None,
                encoding: str | None = None, *, need_text: bool = False) -> list[Input]:
    """Look at each input: its form, protocol version, client encoding and size.  Capture files record their
    protocol version and client encoding; COPY-CSV files need ``proto_version``, and are in ``encoding``
    (UTF-8 when not given).  All inputs must agree -- and capture files that say where they came from (the
    slot, the server's system identifier, the database) must say the same: they are to be segments of one
    stream, and another slot's records would be taken for repeats or for changes of the same rows.

    A capture file recorded in ``SQL_ASCII`` holds bytes in no declared encoding (the server sends them
    unconverted): ``encoding``, when given, says which encoding to read them in; otherwise bytes 128-255
    are read as the surrogates U+DC80-U+DCFF, which keep every byte but are no Unicode text.  Callers that
    need Unicode text (Spark, whose strings are UTF-8 and whose Parquet files cannot hold surrogates) pass
    ``need_text=True``: SQL_ASCII input is then refused up front unless ``encoding`` names a real one.
    Any other capture file given an ``encoding`` must have been captured in it.
    """
    out: list[Input] = []
    sources: dict[str, tuple[str, str]] = {}  # header option -> (the first value an input names, that input)
    for index, raw in enumerate(paths):
        path = os.fspath(raw)
        if not os.path.exists(path):
            raise CaptureFileError(path, "no such file")
        if is_capture_file(path):
            with read_capture(path) as reader:
                header, first = reader.header, reader.header_end
            version, recorded = header.proto_version, header.client_encoding
            form = "capture"
            for name, value in header.source.items():
                if value is None:
                    continue
                seen, where = sources.setdefault(name, (value, path))
                if seen != value:
                    raise CaptureFileError(path, f"the inputs are not one stream: {where} was captured with "
                                                 f"{name} {seen!r}, this file with {value!r} (give the files of "
                                                 "one capture, in order)")
        elif proto_version is None:
            raise CaptureFileError(path, "not a capture file: to read it as the COPY-CSV of "
                                         "pg_logical_slot_peek_binary_changes, give the protocol version it was "
                                         "read with (--proto-version; protoVersion for the Spark data source; "
                                         "proto_version= from Python)")
        else:
            version, first, form, recorded = proto_version, 0, "copy-csv", encoding or UTF8
        if proto_version is not None and form == "capture" and version != proto_version:
            raise CaptureFileError(path, f"captured with protocol version {version}, but {proto_version} was "
                                         f"given")
        try:
            codec = text_encoding(recorded, encoding, need_text=need_text)
        except ValueError as error:
            raise CaptureFileError(path, str(error)) from None
        out.append(Input(path, form, version, os.path.getsize(path), first, index, codec))
    versions = sorted({i.proto_version for i in out})
    if len(versions) > 1:
        raise CaptureFileError(out[0].path, f"the inputs were captured with different protocol versions: "
                                            f"{versions}")
    encodings = sorted({i.encoding for i in out})
    if len(encodings) > 1:
        raise CaptureFileError(out[0].path, f"the inputs were captured in different client encodings: {encodings}")
    if not out:
        raise ValueError("no inputs")
    if len(out) >= 1 << (63 - _POSITION_BITS):
        raise ValueError("too many inputs for one stream")
    return out


def text_encoding(recorded: str, given: str | None = None, *, need_text: bool = False) -> str:
    """The codec to read the names and text values of input in client encoding ``recorded`` with: that
    encoding, or for ``SQL_ASCII`` (bytes in no declared encoding) the encoding ``given`` names.  Any other
    ``recorded`` encoding must be the one ``given``, if one is.  With ``need_text``, SQL_ASCII read as
    surrogates (no ``given``) is refused (``ValueError``, saying what to do)."""
    codec = text_codec(recorded)
    if given is not None:
        wanted = text_codec(given)
        if codec == SQL_ASCII:
            codec = wanted
        elif codec != wanted:
            raise ValueError(f"captured in client encoding {codec}, but {given} was given")
    if need_text and codec == SQL_ASCII:
        raise ValueError("its text is from a SQL_ASCII database: bytes in no declared encoding, which Unicode "
                         "strings cannot hold; name the encoding to read them in (--encoding, or the encoding "
                         "option): UTF8, or LATIN1, which keeps every byte")
    return codec


def read_records(source: Input, start: int | None = None, stop: int | None = None, *,
                 raw: bool = False) -> Reading:
    """A :class:`~replwire.codec.io.capture_file.Reading` of the records of ``source`` that start at offsets in
    ``[start, stop)`` (``start`` a record boundary): :class:`~replwire.codec.io.capture_file.CaptureRecord`
    s, or ``(offset, lsn, xid, data)`` tuples with ``raw=True``.  A torn or corrupt tail of a capture file
    ends the records and is the reading's ``tail``; the file is closed when the reading ends."""
    if source.form == "capture":
        return read_capture(source.path).records(start, stop, raw=raw, closing=True)
    return read_copy_csv(source.path, source.first if start is None else start, stop, raw=raw)
