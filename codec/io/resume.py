"""Resuming a capture file: what may be resumed, and where to cut it so that it ends with what the slot
confirmed.

Strategy: a capture started on an existing file resumes from the slot's confirmed position: records after
the last one the server has confirmed are cut off first (the server sends them again), so the file ends up
holding every message exactly once.  Only the slot the file came from can do that: a new file's header
records the slot's name, the server's system identifier and the database, and a file that names another is
refused (:func:`check_source`), as is one captured with other settings (:func:`check_settings`); a file that
holds records is refused too when its slot does not exist (:func:`refuse_new_slot`: a new slot would start
now, and what happened between the file's end and now would be in neither).  These are checked, like the
output file itself (:func:`check_output`), before anything is created on the server.  :func:`resume_point`
reads the file with a :class:`~replwire.codec.io.positions.PositionTracker`; a file damaged inside is not
cut where that would drop positions the slot already confirmed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import DecodeError, ReplwireError
from ..scalars import LSN
from ..stream import snapshot_records
from ..wire.fast import parse
from .capture_file import CaptureFileError, CaptureHeader, CaptureReader, cut_file, read_capture
from .connection import CaptureDamaged, CaptureError, ServerInfo
from .positions import PositionTracker, message_completes

__all__ = ["Resume", "check_output", "check_settings", "check_source", "first_record", "refuse_new_slot",
           "resume", "resume_point"]

_CONFIRMED = bytes((snapshot_records.CONFIRMED,))


def check_output(path: str | os.PathLike[str]) -> CaptureHeader | None:
    """Check, before any work on the server, that a capture can write ``path``: an existing, non-empty file
    must be a readable capture file (whose header is returned, to resume it), and a new one's directory
    must exist and be writable.  A problem is a :class:`CaptureError` naming the file and what to do."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise CaptureError(f"{path} is a directory, not a capture file: name a file to capture into")
    if os.path.exists(path) and os.path.getsize(path) > 0:
        try:
            with read_capture(path) as reader:
                header = reader.header
        except CaptureFileError as error:
            raise CaptureError(f"{error}: an existing file is resumed, so it must be a capture file (name a new "
                               "file to start a capture)") from None
        except OSError as error:
            raise CaptureError(f"cannot read {path}: {error.strerror}") from None
        if not os.access(path, os.W_OK):
            raise CaptureError(f"cannot resume {path}: the file is not writable")
        return header
    if os.path.exists(path):  # empty: written from the start
        if not os.access(path, os.W_OK):
            raise CaptureError(f"cannot write {path}: the file is not writable")
        return None
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CaptureError(f"cannot create {path}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise CaptureError(f"cannot create {path}: the directory {directory} is not writable")
    return None


def check_settings(path: str | os.PathLike[str], header: CaptureHeader, wanted: CaptureHeader) -> None:
    """Refuse to resume the capture file ``path`` (whose header is ``header``) with other settings than
    ``wanted``'s (protocol version, pgoutput options, client encoding): its records would be read with the
    wrong ones."""
    if header.settings != wanted.settings:
        raise CaptureError(f"{os.fspath(path)} was captured with other settings {header.settings}, not "
                           f"{wanted.settings}; use another --out file")


def check_source(path: str | os.PathLike[str], header: CaptureHeader, slot_name: str, server: ServerInfo) -> None:
    """Refuse to resume the capture file ``path`` (whose header is ``header``) from ``slot_name`` on
    ``server`` when its header names another slot, server or database (what it does not name is not
    checked: an older file).  The slot the file came from is the only one that continues it."""
    path = os.fspath(path)
    if header.slot_name is not None and header.slot_name != slot_name:
        raise CaptureError(f"{path} was captured from slot {header.slot_name!r}, not {slot_name!r}: resume it "
                           f"with --slot {header.slot_name}, or use another --out for a capture of slot "
                           f"{slot_name!r}")
    here = server.system_identifier
    if header.system_identifier is not None and here is not None and header.system_identifier != here:
        raise CaptureError(f"{path} was captured from the server with system identifier "
                           f"{header.system_identifier}, not this one ({here}): resume it from that server "
                           "(--dsn), or use another --out")
    if header.database is not None and server.database is not None and header.database != server.database:
        raise CaptureError(f"{path} was captured from database {header.database!r}, not {server.database!r}: "
                           f"resume it with a --dsn naming dbname={header.database}, or use another --out")


def first_record(path: str) -> bytes | None:
    """The data of the first record of the capture file ``path`` that holds something captured (``None``: it
    holds none, at most records of where its slot stood)."""
    with read_capture(path) as reader:
        reading = reader.records(raw=True)
        try:
            first = next((data for _, _, _, data in reading if data[:1] != _CONFIRMED), None)
        finally:
            reading.close()
    return first


def resume_point(path: str, confirmed: LSN) -> tuple[int, int]:
    """Where to cut an existing capture file so that it ends with what the server confirmed: the offset after
    the last record whose completed position is at or below ``confirmed`` (records after it are sent again),
    and how many records stay.

    A damaged record is where the file's readable part ends.  Intact records after it (the file is damaged
    inside, not torn at its end) that complete a position at or below ``confirmed`` hold changes the server
    will not send again: cutting would lose them, so that is refused with a :class:`CaptureDamaged`."""
    found = resume(path, confirmed)
    return found.cut, found.kept


@dataclass(frozen=True)
class Resume:
    """:func:`resume_point`'s ``cut`` and ``kept``, and what the records cut off held: how many, their
    bytes, and how many positions they complete (what a capture counted as messages, bytes and
    transactions when it received them)."""

    cut: int
    kept: int
    messages: int
    bytes: int
    transactions: int


def resume(path: str, confirmed: LSN) -> Resume:
    """:func:`resume_point`, with what is cut off."""
    with read_capture(path) as reader:
        tracker = PositionTracker(reader.header.proto_version, reader.header.client_encoding)
        cut, kept, count = reader.header_end, 0, 0
        size = completed = kept_size = kept_completed = 0  # (the bytes and positions of all, and of the kept)
        reading = reader.records(raw=True)
        for offset, lsn, _, data in reading:
            position: int | None
            if data and data[0] == snapshot_records.CONFIRMED:  # where the slot stood (between transactions)
                if snapshot_records.parse_record(data).lsn <= confirmed:
                    cut = reading.end
                continue
            count += 1
            size += len(data)
            if data and data[0] in snapshot_records.KINDS:  # a snapshot or backfill record, not pgoutput
                position = snapshot_records.record_completes(data, lsn)
            else:
                try:
                    position = tracker.feed(data)
                except ReplwireError as error:
                    raise CaptureError(f"{path}: the record at offset {offset} holds a message replwire cannot "
                                       f"decode ({error}): the file cannot be resumed past it.  Keep this file "
                                       "as it is and capture to another --out") from None
            if position is not None:
                completed += 1
                if position <= confirmed:
                    cut, kept, kept_size, kept_completed = reading.end, count, size, completed
        damage = reading.tail
        if damage is not None and damage.intact_from is not None:
            lost = _confirmed_after(reader, damage.intact_from, confirmed)
            if lost is not None:
                raise CaptureDamaged(f"{path}: {damage}; the records after it complete positions the slot "
                                   f"already confirmed (up to {LSN(lost)}, confirmed {confirmed}), which the "
                                   "server will not send again: resuming would cut them off.  Keep this file "
                                   "as it is (decode reads up to the damage) and capture to another --out")
    return Resume(cut, kept, count - kept, size - kept_size, completed - kept_completed)


def _confirmed_after(reader: CaptureReader, start: int, confirmed: LSN) -> int | None:
    """The highest position at or below ``confirmed`` that a record of ``reader`` from offset ``start`` on
    completes (read from each message alone: no stream state is known there), or ``None``."""
    proto, encoding = reader.header.proto_version, reader.header.client_encoding
    found = None
    for _, lsn, _, data in reader.records(start, raw=True):
        if not data:
            continue
        if data[0] in snapshot_records.KINDS:
            position = snapshot_records.record_completes(data, lsn)
        else:
            try:
                position = message_completes(parse(data, proto_version=proto, encoding=encoding))
            except DecodeError:
                continue
        if position is not None and position <= confirmed and (found is None or position > found):
            found = position
    return found



def refuse_new_slot(out: str, name: str, existing: CaptureHeader) -> None:
    """The slot ``name`` does not exist, and the file ``out`` (its header ``existing``) is to be resumed:
    refused when the file holds records (a new slot would start now, so what happened between the file's end
    and now would be in neither).  An interrupted snapshot is taken again with its slot by ``take_snapshot``,
    before this."""
    try:
        first = first_record(out)
    except CaptureFileError as error:
        raise CaptureError(str(error)) from None
    if first is None:  # nothing was captured, nothing to continue: the new slot's stream starts the file
        try:
            with read_capture(out) as reader:
                start = reader.header_end
            cut_file(out, start)  # (where the old slot stood says nothing of the new one)
        except (OSError, CaptureFileError) as error:
            raise CaptureError(f"cannot write {out}: {error}") from None
        return
    if first[:1] and first[0] == snapshot_records.BEGIN:
        taken = snapshot_records.parse_record(first).slot
        raise CaptureError(f"replication slot {name!r} does not exist, and {out} holds a snapshot taken "
                           f"with slot {taken!r}: a new slot would start now, without the changes between "
                           f"the snapshot and now (run the same command with --snapshot and --slot {taken} to "
                           "take an interrupted snapshot again, or use another --out for a new capture)")
    if existing.slot_name == name:
        raise CaptureError(f"replication slot {name!r}, which {out} was captured from, no longer exists: "
                           "the changes since the file's end are lost with it; start a new capture file "
                           "(another --out)")
    came_from = f"slot {existing.slot_name!r}" if existing.slot_name else "another slot"
    raise CaptureError(f"replication slot {name!r} does not exist, and {out} already holds a capture "
                       f"(from {came_from}): a new slot would start now, and the changes between the file's "
                       "end and now would be missing. Use the slot the file was captured from (--slot), or "
                       "another --out for a new capture")

