"""The files of one stream: consecutive segments of one slot's captured stream, and their records.  What
``replwire decode``, the Spark jobs and sources (through :mod:`replwire.codec.split`) and ``replwire serve``
accept as one stream is decided here, once.

Strategy: :func:`open_inputs` looks at each file -- its form, protocol version, where its records start and
how big it is -- and checks they agree, then puts them in stream order (:func:`stream_order`, which reads
each input's first records); :func:`read_records` reads a range of an input's records, whatever its form,
through the one reading of each form in :mod:`replwire.codec.io.capture_file`.  A
record's stream *position* is ``(input << 48) | byte offset`` (:meth:`Input.position`): it orders records
across inputs and names a transaction by where it opened.

Inputs are replwire capture files and the COPY-CSV form (``COPY (SELECT lsn, xid, data FROM
pg_logical_slot_peek_binary_changes(...)) TO STDOUT WITH (FORMAT csv)``), which records no protocol
version, so one must be given for it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ...schema.encodings import SQL_ASCII, UTF8, text_codec
from ..errors import ReplwireError
from ..scalars import LSN
from ..stream import snapshot_records
from .capture_file import CaptureFileError, CaptureHeader, Reading, is_capture_file, read_capture
from .copy_csv import read_copy_csv
from .positions import PositionTracker

__all__ = ["Input", "NotACaptureFile", "NotAFile", "Reach", "check_file", "open_inputs", "read_records",
           "stream_order", "text_encoding"]

_POSITION_BITS = 48
_PUBLICATIONS = "publication_names"  # the pgoutput option naming the publications a capture streamed


@dataclass(frozen=True)
class Input:
    """One input file: ``form`` is ``"capture"`` or ``"copy-csv"``; records start at ``first``; ``encoding`` is
    the client encoding its Strings and text values are in; ``database`` the database a capture file's header
    says it was captured from (``""`` when it does not say); ``header`` a capture file's whole header (the
    options, client encoding and server version ``replwire serve`` serves it with: read here, once), ``None``
    for COPY-CSV."""

    path: str
    form: str
    proto_version: int
    size: int
    first: int
    index: int = 0
    encoding: str = UTF8
    database: str = ""
    header: CaptureHeader | None = field(default=None, compare=False)

    def position(self, offset: int) -> int:
        """The stream position of the record at ``offset``."""
        return (self.index << _POSITION_BITS) | offset


class NotAFile(CaptureFileError):
    """An input that is missing, or no regular file (:func:`check_file`): a mistake in the command line."""


class NotACaptureFile(CaptureFileError):
    """An input that is not a capture file, given without the protocol version to read it as COPY-CSV with
    (so that a caller can say which option gives it)."""


def open_inputs(paths: Sequence[str | os.PathLike[str]], proto_version: int | None = None,
                encoding: str | None = None, *, csv_encoding: str | None = None, need_text: bool = False,
                order: bool = True, growing: bool = False) -> list[Input]:
    """Look at each input: its form, protocol version, client encoding and size.  Capture files record their
    protocol version and client encoding; COPY-CSV files need ``proto_version``, and are in ``encoding``
    (else ``csv_encoding``, which says nothing of capture files; else UTF-8).  All inputs must agree -- and
    capture files that say where they came from (the slot, the server's system identifier, the database)
    and which publications they streamed must say the same: they are to be segments of one stream, and
    another slot's records would be taken for repeats or for changes of the same rows.

    A capture file recorded in ``SQL_ASCII`` holds bytes in no declared encoding (the server sends them
    unconverted): ``encoding``, when given, says which encoding to read them in; otherwise bytes 128-255
    are read as the surrogates U+DC80-U+DCFF, which keep every byte but are no Unicode text.  Callers that
    need Unicode text (Spark, whose strings are UTF-8 and whose Parquet files cannot hold surrogates) pass
    ``need_text=True``: SQL_ASCII input is then refused up front unless ``encoding`` names a real one.
    Any other capture file given an ``encoding`` must have been captured in it.

    With ``order`` (the default), several inputs are returned in stream order, whatever order they were given
    in (:func:`stream_order`; each one's ``index`` is its place in that order): compare the paths with the
    ones given to tell the user.  Inputs that cannot be one stream by their positions are refused.

    ``growing=True``: the last input (in stream order) is a capture file still being written
    (:mod:`~replwire.codec.io.follow`): its ``size`` is the end of its last whole record now
    (:func:`~replwire.codec.io.follow.whole_end`), so a record being written at its end is neither read nor
    reported; reading on from there, as it grows, is :class:`~replwire.codec.io.follow.Follower`'s.  A
    COPY-CSV last input is refused (:class:`~replwire.codec.io.capture_file.CaptureFileError`).
    """
    out: list[Input] = []
    sources: dict[str, tuple[str, str]] = {}  # header option -> (the first value an input names, that input)
    for index, raw in enumerate(paths):
        path = os.fspath(raw)
        check_file(path)
        header: CaptureHeader | None = None
        if is_capture_file(path):
            with read_capture(path) as reader:
                header, first = reader.header, reader.header_end
            version, recorded, database = header.proto_version, header.client_encoding, header.database or ""
            form = "capture"
            # where the records came from, and which publications' changes they are: another publication's
            # stream holds other tables, and what one file has of them the other lacks
            for name, value in (*header.source.items(), (_PUBLICATIONS, header.options.get(_PUBLICATIONS))):
                if value is None:
                    continue
                seen, where = sources.setdefault(name, (value, path))
                if seen != value:
                    raise CaptureFileError(path, f"the inputs are not one stream: {where} was captured with "
                                                 f"{name} {seen!r}, this file with {value!r} (give the files of "
                                                 "one capture)")
        elif proto_version is None:
            raise NotACaptureFile(path, "not a capture file: to read it as the COPY-CSV of "
                                         "pg_logical_slot_peek_binary_changes, give the protocol version it was "
                                         "read with (--proto-version; protoVersion for the Spark data source; "
                                         "proto_version= from Python)")
        else:
            version, first, form, recorded, database = (proto_version, 0, "copy-csv", encoding or csv_encoding or UTF8,
                                                        "")
        if proto_version is not None and form == "capture" and version != proto_version:
            raise CaptureFileError(path, f"captured with protocol version {version}, but {proto_version} was "
                                         f"given")
        try:
            codec = text_encoding(recorded, encoding, need_text=need_text)
        except ValueError as error:
            raise CaptureFileError(path, str(error)) from None
        out.append(Input(path, form, version, os.path.getsize(path), first, index, codec, database, header))
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
    out = stream_order(out) if order and len(out) > 1 else out
    if growing:
        from .follow import whole_end

        last = out[-1]
        if last.form != "capture":
            raise CaptureFileError(last.path, "only a capture file can be followed as it grows (this one is "
                                              "COPY-CSV)")
        out[-1] = replace(last, size=whole_end(last.path, last.first))
    return out


def check_file(path: str) -> None:
    """Refuse (:class:`NotAFile`) what is not a file: a missing path, a directory, and a pipe or FIFO,
    which could be read only once (its inputs are read more than once: a look at their start first) -- and
    opening a FIFO with no writer waits for one."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise NotAFile(path, "no such file") from None
    except OSError as error:
        raise NotAFile(path, error.strerror or str(error)) from None
    if not stat.S_ISREG(mode):
        raise NotAFile(path, "not a regular file: a pipe, a FIFO or a device can be read only once (replwire "
                             "decode reads one, and - for standard input; otherwise copy it to a file first)")


@dataclass(frozen=True)
class _Start:
    """Where an input's records begin in the stream: the consistent point of the snapshot section it opens
    with (``snapshot``), else the first position a record of it completes (``completed``: a commit's,
    prepare's or rollback's end LSN, a non-transactional message's LSN), else the first record LSN it has
    (``lsn``: an input that holds only part of a transaction, or where its slot stood as it started)."""

    snapshot: int | None = None
    completed: int | None = None
    lsn: int | None = None

    @property
    def key(self) -> tuple[int, int]:
        if self.snapshot is not None:
            return self.snapshot, 0
        at = self.completed if self.completed is not None else self.lsn
        return (-1, 0) if at is None else (at, 1)  # (an input with no position at all goes first: it adds nothing)


def _start(source: Input) -> _Start:
    """Read the first records of ``source`` up to the first position one completes (see :class:`_Start`).  A
    record that does not decode ends the look (decoding the input reports it, naming the record)."""
    tracker = PositionTracker(source.proto_version, source.encoding)
    first: int | None = None
    reading = read_records(source, raw=True)
    try:
        for _, lsn, _, data in reading:
            if data and data[0] in snapshot_records.KINDS:
                if data[0] == snapshot_records.SLOT and first is None:  # the section names the slot's consistent point
                    return _Start(snapshot=lsn)
                if data[0] == snapshot_records.CONFIRMED and first is None:  # where its slot stood as it started
                    first = lsn
                continue
            if first is None and lsn:
                first = lsn
            position = tracker.feed(data)
            if position is not None:
                return _Start(completed=position, lsn=first)
    except (ReplwireError, ValueError):  # (CaptureFileError, DecodeError and StreamStateError among them)
        pass
    finally:
        reading.close()
    return _Start(lsn=first)


def _segment(source: Input) -> int:
    """The segment number a capture file's header gives it (0 for any other input)."""
    return (source.header.segment or 0) if source.header is not None else 0


def _check_series(ordered: Sequence[Input]) -> None:
    """Refuse a series of segments (a capture with rotation) with one left out in the middle: between two
    consecutive inputs in stream order that are segments, the second numbered more than one past the first.
    (A series that starts again at 1 -- another series of the slot -- is not one to check.)"""
    for before, after in zip(ordered, ordered[1:]):
        first, then = _segment(before), _segment(after)
        if first and then > first + 1:
            missing = f"segment {first + 1} is" if then == first + 2 else f"segments {first + 1} to {then - 1} are"
            start = after.header.segment_start if after.header is not None else None
            at = f", which starts at {LSN(start)}" if start is not None else ""
            raise CaptureFileError(after.path, f"the inputs are not one stream: {missing} missing between "
                                               f"{before.path} (segment {first}) and this file (segment "
                                               f"{then}{at}); give every segment from the first one wanted on")


def stream_order(inputs: Sequence[Input]) -> list[Input]:
    """``inputs`` -- segments of one slot's stream -- in stream order, each ``index`` its place in it.

    Within a slot's stream the positions its records complete (commit end LSNs, non-transactional messages'
    LSNs) only grow; a capture resumed into another file starts again at the slot's confirmed position,
    which is at or before the end of what the file before holds (what comes again is skipped when read).
    So the inputs are ordered by the first position each completes; an input that opens with a snapshot
    section starts at the section's consistent point, where its slot was created.  Inputs with equal
    starts are in the order of their segment numbers (a capture with rotation's), else as they were given.
    Refused (:class:`CaptureFileError`): two snapshot sections at different consistent points, and a
    transaction completed before the snapshot that starts the stream (a slot is created once: such a file is
    of another slot of that name, and what happened between its end and the snapshot is in neither).

    A missing segment between two given ones is not seen here, from the inputs' starts (WAL with nothing for
    the publication moves no position a record completes): the readers of the records see it, with
    :class:`Reach`, in files that record where their slot stood (format version 3) -- except between the
    segments of a capture with rotation, whose headers number them: a number left out is refused here."""
    starts = [_start(source) for source in inputs]
    numbers = [_segment(source) for source in inputs]
    order = sorted(range(len(inputs)), key=lambda i: (starts[i].key, numbers[i]))
    _check_series([inputs[i] for i in order])
    snapshots = [(at, inputs[i].path) for i in order if (at := starts[i].snapshot) is not None]
    if snapshots:
        point, where = snapshots[0]
        for other, path in snapshots[1:]:
            if other != point:
                raise CaptureFileError(path, f"the inputs are not one stream: it opens with a snapshot at "
                                             f"consistent point {LSN(other)}, and {where} with one at "
                                             f"{LSN(point)}: a slot has one (give the files of one slot)")
        for i in order:
            completed = starts[i].completed
            if completed is not None and completed < point:
                raise CaptureFileError(inputs[i].path, f"the inputs are not one stream: it holds a transaction "
                                                       f"completed at {LSN(completed)}, before the snapshot in "
                                                       f"{where} started its slot at {LSN(point)} (a file of "
                                                       "another slot of that name?)")
    return [replace(inputs[i], index=place) for place, i in enumerate(order)]


class Reach:
    """How far the records of a stream read so far reach -- the highest position a record completes or a
    ``SlotConfirmed`` record names (:data:`position`) -- and the check that each capture in them started
    within it.

    A capture starts streaming at its slot's confirmed position, and writes that position first
    (``SlotConfirmed`` with ``at_start``); it acknowledges only positions its records complete or that a
    ``SlotConfirmed`` written before the acknowledgement names.  So when nothing is missing, every start is
    at or before the reach of the records before it; a start past it means the slot moved on over changes no
    input holds -- a file of the stream left out, or another client of the slot -- and is refused
    (:class:`~replwire.codec.io.capture_file.CaptureFileError`).  Files without these records (format
    version 2 and older, COPY-CSV) are not checked.

    Readers pass every ``SlotConfirmed`` record to :meth:`confirmed`, with the highest position their own
    records completed so far (``completed``), or raise :attr:`position` themselves as records complete."""

    __slots__ = ("position",)

    def __init__(self) -> None:
        self.position = -1  # (-1: nothing read yet reaches anywhere)

    def confirmed(self, path: str, data: bytes, completed: int = -1, offset: int | None = None) -> None:
        """Take the ``SlotConfirmed`` record ``data`` of input ``path`` (at ``offset``); refuse a start past
        the reach."""
        fields = snapshot_records.parse_record(data)
        reach = max(self.position, completed)
        if fields.at_start and 0 <= reach < fields.lsn:
            raise CaptureFileError(path, f"the inputs are not one stream: a capture in this file started "
                                         f"at {LSN(fields.lsn)}, "
                                         f"where its slot stood, but the records before it reach only "
                                         f"{LSN(reach)}: the slot had moved past changes no input holds (a file "
                                         f"of the stream is missing, or another client read the slot in "
                                         f"between); give every file of the stream", offset)
        self.position = max(reach, fields.lsn)


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
