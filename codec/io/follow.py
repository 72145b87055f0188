"""Following a capture file that a running ``replwire capture`` is still writing: ``replwire decode --follow``,
and whatever applies what is newly committed in a growing file (``spark apply --follow``).

Strategy: a growing file's last record may be one being written -- the file ends inside it (a torn tail).
That is no damage while the file grows: :func:`whole_end` says where its whole records end now (the size up
to which it can be read), and :class:`Follower` reads its records from an offset on, and at the end of what
is whole waits (polls every ``poll`` seconds) for more, as ``tail -f`` does.  Damage inside the file is still
an error: a record that fails its checksum with intact records after it, seen so twice (a write in
progress is given the time of one poll to land), ends the following with that :class:`~replwire.codec.io.
capture_file.TailProblem` as the reading's ``tail``, as a damaged file ends any reading.  A record cut short
by the end of the file is taken for one being written and waited for, whatever its length says (a length
damaged into a huge one is told only once the file has grown past it, by its checksum).  A file its writer
cuts back below what was read yields a :class:`Cut` and is read on from there.

For a set of segments, :func:`~replwire.codec.io.segments.open_inputs` with ``growing=True`` makes the last
one (in stream order) a growing file: its :attr:`~replwire.codec.io.segments.Input.size` is then the end of
its last whole record, so readings up to ``Input.size`` meet no torn tail; reading on from there is this
module's.  The following stays on the file it opened (its inode), whatever is renamed onto its name later.

A segment of a capture with rotation (:mod:`~replwire.codec.io.rotation`) ends where the capture went on in
the next one: the capture makes a segment durable, whole, before it creates the next, so once the next
segment's name exists (:func:`next_segment`), what the followed one holds is all it will hold.  The reading
then ends at its end, with :attr:`FollowReading.moved_on` naming the next segment, which the caller follows
on (:func:`~replwire.codec.decode.committed` does).  A segment removed while it is followed (a capture
that lost its last acknowledgement with the process goes back to the segment before it) is an error: the
records read from it are ones the server sends again.

Use::

    inputs = open_inputs(paths, growing=True)
    ... read every input up to its size ...
    follower = Follower(poll=0.2, idle_exit=None, stop=lambda: stopping, waiting=flush_output)
    reading = follower.records(inputs[-1].path, inputs[-1].size)
    for record in reading:   # raw records (offset, lsn, xid, data), as read_records(..., raw=True) gives
        if record.__class__ is Cut: ...   # the file was cut back: drop what is open, records come again
        ...
    reading.tail   # None, or the damage (or, after idle_exit, the torn tail) that ended it
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from .capture_file import CaptureFileError, TailProblem, read_capture
from .rotation import DIGITS, segment_number, segment_path

__all__ = ["POLL", "Cut", "Follower", "FollowReading", "next_segment", "whole_end"]

#: Seconds between looks at a growing file's size, by default.
POLL = 0.2
#: Every payload's first byte: a reading that skips them all reads and checks every record, yielding none.
_EVERY = frozenset(range(256))


def whole_end(path: str | os.PathLike[str], start: int | None = None) -> int:
    """The offset just after the last whole record of the capture file ``path`` now: how far it can be read
    while it is being written.  Reads (and checks) the records from ``start`` on (a record boundary, such as
    an earlier answer; default: the first record), so asking again as the file grows costs only what is
    new.  A torn or damaged record ends the whole records: following the file (:class:`Follower`) tells the
    two apart."""
    with read_capture(path) as reader:
        reader.growing = True
        reading = reader.records(start, raw=True, skip=_EVERY)
        for _ in reading:  # (none: every record is skipped)
            pass
        return int(reading.end)


def next_segment(path: str | os.PathLike[str], segment: int | None) -> str | None:
    """The path of the segment after ``path``, segment number ``segment`` of a series (its header's), named as
    the capture names it (``app.000003.rwcap`` -> ``app.000004.rwcap``); ``None`` for a file that is no
    segment, or one renamed so that its name no longer says its number."""
    if segment is None:
        return None
    path = os.fspath(path)
    number = f".{segment:0{DIGITS}d}"
    base, suffix = os.path.splitext(path)
    for stem, tail in ((base, suffix), (path, "")):  # (app.000003.rwcap, or app.000003 of the series app)
        if stem.endswith(number) and os.path.basename(stem[:-len(number)]):
            pattern = stem[:-len(number)] + tail
            if segment_number(pattern, path) == segment:
                return segment_path(pattern, segment + 1)
    return None


@dataclass(frozen=True, slots=True)
class Cut:
    """What a :class:`FollowReading` yields where the file was cut back, to ``offset``, below what it had
    read: its writer dropped records it had written (``replwire capture --via sql`` drops a transaction a
    batch ended inside of, to the end of the last whole one, before asking for it again; a failed write cuts
    back to the last fsync).  What was after the cut comes again: a reader drops what it holds of a
    transaction still open (:meth:`Assembler.resume <replwire.codec.Assembler.resume>`), and knows the
    transactions it already has by their end LSNs.  Exact where the cut is at a transaction's end, as those
    of ``--via sql`` are.  A cut is seen when the file is shorter than what was read at a look; one made
    and written over again between two looks is not: where the records written again are the ones cut (what
    ``--via sql`` asks for again), nothing changed for the reader; where they are others, the reader's
    offset falls inside a record, which reads as damage (an error, never other records)."""

    offset: int


@dataclass
class Follower:
    """How to follow a growing capture file: look at its size every ``poll`` seconds; stop when ``stop()``
    says so (checked at every look, so within ``poll`` seconds of it becoming true while the file is idle;
    while records keep coming, after each round of them), or after ``idle_exit`` seconds with no new record
    (``None``: never).  ``waiting()`` is called before each wait (a writer flushes what it holds there)."""

    poll: float = POLL
    idle_exit: float | None = None
    stop: Callable[[], bool] | None = None
    waiting: Callable[[], None] | None = None

    def records(self, path: str | os.PathLike[str], start: int | None = None) -> FollowReading:
        """The raw records ``(offset, lsn, xid, data)`` of the capture file ``path`` from ``start`` (a record
        boundary; default: the first record) on, as they are written, and a :class:`Cut` where the file was
        cut back (see :class:`FollowReading`)."""
        return FollowReading(self, os.fspath(path), start)


class FollowReading(Iterator[Any]):
    """One pass over a growing capture file's records, iterated once, that waits at the end of what is whole
    (see the module docstring).  Like :class:`~replwire.codec.io.capture_file.Reading`: ``end`` is the offset
    just after the last record yielded; ``tail`` is, once it is done, ``None`` (stopped, or idle), the damage
    that ended it (``intact_from`` set), or, when ``idle_exit`` ended it at a torn tail, that tail;
    ``moved_on`` is, when it ended because the capture went on in the next segment, that segment's path.
    :meth:`close` stops it early."""

    def __init__(self, follower: Follower, path: str, start: int | None) -> None:
        self.follower, self.path = follower, path
        self.end = start if start is not None else -1
        self.tail: TailProblem | None = None
        self.moved_on: str | None = None
        self._records = self._run(start)

    def __iter__(self) -> Iterator[Any]:
        return self._records

    def __next__(self) -> Any:
        return next(self._records)

    def close(self) -> None:
        self._records.close()

    def _run(self, start: int | None) -> Generator[Any, None, None]:
        follower = self.follower
        poll, idle_exit, stop, waiting = follower.poll, follower.idle_exit, follower.stop, follower.waiting
        clock = time.monotonic
        with read_capture(self.path) as reader:
            reader.growing = True
            at = reader.header_end if start is None else start
            self.end = at
            idle_since = clock()
            suspect: tuple[int, str] | None = None  # damage seen once: seen again, it is damage
            after = next_segment(self.path, reader.header.segment)
            final = False  # the next segment exists: what is read now is all this one holds
            while True:
                if reader.refresh() < at:  # cut back by its writer: what was after the cut comes again
                    if reader.size < reader.header_end:
                        raise CaptureFileError(self.path, f"the file was cut to {reader.size} bytes, inside its "
                                                          "header, while it was followed")
                    at = self.end = reader.size
                    suspect = None
                    yield Cut(at)
                    continue
                reading = reader.records(at, raw=True)
                try:
                    for record in reading:
                        self.end = reading.end
                        yield record
                finally:
                    reading.close()
                moved, at = reading.end != at, reading.end
                self.end = at
                problem = reading.tail
                if problem is not None and problem.intact_from is not None:
                    if suspect == (problem.offset, problem.reason):
                        self.tail = problem
                        return
                    suspect = (problem.offset, problem.reason)
                else:
                    suspect = None
                if stop is not None and stop():
                    return
                if moved:
                    idle_since = clock()
                    if problem is None:
                        continue  # (the file may have grown meanwhile: look again at once)
                elif after is not None and problem is None:
                    if final:
                        self.moved_on = after
                        return
                    if os.path.exists(after):
                        final = True
                        continue  # (read to the end once more: the segment was whole before the next began)
                    if not os.path.exists(self.path):
                        raise CaptureFileError(self.path, "the segment was removed while it was followed: the "
                                                          "capture went back to the segment before it (it had "
                                                          "not acknowledged this one's start when it stopped), "
                                                          "and writes again there what this one held; decode "
                                                          "the segments again")
                if not moved and idle_exit is not None and clock() - idle_since >= idle_exit and suspect is None:
                    if problem is not None:  # a torn tail nobody finished: reported as any reading does
                        self.tail = problem
                    return
                if waiting is not None:
                    waiting()
                deadline = clock() + poll
                while True:  # (in slices, so that a stop is seen soon)
                    left = deadline - clock()
                    if left <= 0 or (stop is not None and stop()):
                        break
                    time.sleep(min(left, 0.05))
