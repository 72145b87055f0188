"""What a server serves: a stream of pgoutput messages in one or more segments, read lazily, and what one pass
over it tells (which transactions complete where, which relations it has).

Strategy: a :class:`Segment` is one captured session -- one capture file, or a list of built messages --
with the protocol version, options and client encoding its messages were made with; its ``records`` opens a
fresh, lazy iteration of ``(lsn, message bytes)`` every time, so every client connection reads the stream
from the start at its own pace and nothing holds the stream in memory.  Several segments are the captures of
one slot read in turn (a capture resumed into a second file): the second may repeat transactions the first
already holds, or start over one the first has only in part.  :meth:`Source.scan` passes over every segment
once (at most once per source) and records, for each message that opens a transaction -- Begin, Begin
Prepare, the first Stream Start of a streamed transaction -- how that transaction ended (its
:class:`TxnFate`): committed or prepared at an LSN, aborted at an LSN, or never completed in its segment.
Which transaction a message belongs to is :class:`~replwire.codec.stream.routing.Router`'s answer, as for
``replwire decode`` and the Spark jobs: the scan and every session read a segment through one
:class:`Walk`, and key its transactions alike.  That index is what lets a
session decide, when a transaction opens, whether the client already confirmed it (it is then skipped, as a
walsender skips transactions before the position a client asks for), without reading ahead.  The scan also
collects the Relation messages, which answer a subscriber's questions about the publication's tables.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from ..errors import ReplwireError
from ..io.capture_file import CaptureFileError, read_capture
from ..io.copy_csv import read_copy_csv
from ..io.positions import message_completes
from ..io.segments import NotACaptureFile, NotAFile, Reach, open_inputs
from ..messages import CommitPrepared, Relation, StreamAbort, StreamStart, WireMessage
from ..options import boolean
from ..stream import snapshot_records
from ..stream.decoder import IDLE, Decoder
from ..stream.routing import COMMIT, DROP, LONE, OPEN, ORIGIN, PREPARE, Route, Router
from ..wire.fast import build

__all__ = ["ABORTED", "COMMITTED", "InputsRefused", "NeedsProtoVersion", "Scan", "Segment", "Source", "SourceError",
           "TxnFate", "Walk", "resumed_decoder"]

COMMITTED = "committed"  # a Commit, Stream Commit, Prepare or Stream Prepare
ABORTED = "aborted"  # a top-level Stream Abort


class SourceError(ReplwireError, ValueError):
    """A stream that cannot be served: unreadable, out of order, or segments that do not go together."""


class InputsRefused(SourceError):
    """Input files refused before any is read as a stream, as ``replwire decode`` and the Spark jobs refuse
    them (:func:`~replwire.codec.io.segments.open_inputs`): missing, not a regular file, not a capture file
    without a protocol version, or files that are not one stream.  ``usage`` is true for what is a mistake in
    the command line rather than in the files (a path that is no regular file)."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


class NeedsProtoVersion(InputsRefused):
    """An input that is not a capture file, given without the protocol version to serve it as COPY-CSV;
    ``path`` names it (a command line says which option to give)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path} is not a capture file: give the protocol version it was read with "
                         f"(--proto-version; proto_version= from Python) to serve it as COPY-CSV", usage=True)
        self.path = path


@dataclass(frozen=True)
class TxnFate:
    """How a transaction opened in a segment ended: ``kind`` (:data:`COMMITTED` or :data:`ABORTED`), at
    ``lsn`` (the commit or prepare LSN, or the abort's record position); ``origin`` whether it carried an
    Origin message.  (Not :class:`~replwire.codec.stream.outcome.Outcome`, a committed transaction's facts:
    this is only what a session needs to send or skip a transaction when it opens, aborted ones too.)"""

    kind: str
    lsn: int
    origin: bool = False


@dataclass(frozen=True)
class Segment:
    """One captured session: ``records()`` iterates ``(lsn, message bytes)`` afresh on every call;
    ``records(marks)`` calls ``marks(path, data, offset=offset)`` for each record that says where the slot
    stood (see :class:`~replwire.codec.io.segments.Reach`)."""

    name: str
    proto_version: int
    options: Mapping[str, str]
    client_encoding: str
    server_version: int
    records: Callable[..., Iterator[tuple[int, bytes]]]

    @property
    def binary(self) -> bool:
        return boolean("binary", self.options.get("binary", "false"))


@dataclass
class Scan:
    """What one pass over a source found: ``fates[(segment, key)]`` for each transaction that ended in the
    segment it opened in (``key`` its opener's ordinal, :class:`Walk`),
    ``relations`` the last Relation per (namespace, name), ``messages`` how many there are, ``last_lsn``
    the highest record position."""

    fates: dict[tuple[int, int], TxnFate] = field(default_factory=dict)
    relations: dict[tuple[str, str], Relation] = field(default_factory=dict)
    messages: int = 0
    last_lsn: int = 0
    notes: list[str] = field(default_factory=list)


class Source:
    """The segments served, in order; they must share a client encoding and agree on binary values."""

    def __init__(self, segments: Sequence[Segment], *, server_version: int | None = None) -> None:
        if not segments:
            raise SourceError("nothing to serve: no segments")
        encodings = {s.client_encoding.upper() for s in segments}
        if len(encodings) > 1:
            raise SourceError(f"the segments are in different client encodings ({', '.join(sorted(encodings))}): "
                              f"serve them separately")
        if len({s.binary for s in segments}) > 1:
            raise SourceError("some segments hold binary values and some text: serve them separately")
        self.segments = list(segments)
        self.server_version = server_version or max(s.server_version for s in segments) or 160000
        self.notes: list[str] = []  # what the scan's notes start with
        self._scan: Scan | None = None

    @property
    def client_encoding(self) -> str:
        return self.segments[0].client_encoding

    @property
    def binary(self) -> bool:
        return self.segments[0].binary

    def scan(self) -> Scan:
        """The index of the whole source (computed on first use, by reading every segment once)."""
        if self._scan is None:
            self._scan = _scan(self.segments)
            self._scan.notes[:0] = self.notes
        return self._scan

    # -- constructors -----------------------------------------------------------------------------------

    @classmethod
    def from_captures(cls, paths: Iterable[str | os.PathLike[str]], *, server_version: int | None = None,
                      proto_version: int | None = None, client_encoding: str = "UTF8") -> Source:
        """Capture files of one slot's stream, served in stream order: the files of a resumed capture in any
        order, as ``replwire decode`` and the Spark jobs take them -- the set is accepted or refused as they
        accept or refuse it (:func:`~replwire.codec.io.segments.open_inputs`); when the order given is not
        the stream's, ``scan().notes`` says so.  A file that is not a capture file is read as the COPY-CSV
        of the SQL interface (``lsn,xid,\\x<hex>`` rows), which says nothing of how it was made: it needs
        ``proto_version`` (and its ``client_encoding``), and is served as possibly holding streamed and
        prepared transactions."""
        names = [os.fspath(path) for path in paths]
        if not names:
            raise SourceError("nothing to serve: no segments")
        try:  # (each file's start is read once, here: its header, options and all, comes with its Input)
            inputs = open_inputs(names, proto_version, csv_encoding=client_encoding)
        except NotACaptureFile as error:
            raise NeedsProtoVersion(error.path) from None
        except (CaptureFileError, OSError) as error:
            raise InputsRefused(str(error), usage=isinstance(error, NotAFile)) from None
        segments = []
        for source in inputs:
            name, header = source.path, source.header
            if header is None:  # COPY-CSV
                options = {"streaming": "on", "two_phase": "true"} if source.proto_version >= 2 else {}
                segments.append(Segment(name, source.proto_version, options, client_encoding, 0, _csv_records(name)))
            else:
                segments.append(Segment(name, header.proto_version, dict(header.options), header.client_encoding,
                                        header.server_version, _capture_records(name)))
        served = cls(segments, server_version=server_version)
        if [source.path for source in inputs] != names:
            served.notes.append("serving the files in stream order (by the positions their records complete): "
                                + ", ".join(source.path for source in inputs))
        return served

    @classmethod
    def from_messages(cls, messages: Iterable[WireMessage | tuple[int, WireMessage]], *, proto_version: int = 4,
                      options: Mapping[str, str] | None = None, client_encoding: str = "UTF8",
                      server_version: int = 180000) -> Source:
        """Built messages (or ``(lsn, message)`` pairs), in stream order, encoded once with
        ``proto_version``; ``options`` are the pgoutput options they stand for (``binary`` when their
        tuples hold binary values).  A message without an LSN is placed one past the one before, a commit
        at its ``end_lsn``: give commits LSNs above their changes', as a server's are."""
        decoder = Decoder(proto_version=proto_version, encoding=client_encoding)
        records: list[tuple[int, bytes]] = []
        position = 0
        for item in messages:
            lsn, message = item if isinstance(item, tuple) else (None, item)
            in_stream = decoder.in_stream
            decoder.accept(message)
            if lsn is not None:
                position = int(lsn)
            else:  # one past the one before; a commit (or prepare, or abort) at its end position
                end = getattr(message, "end_lsn", None) or getattr(message, "rollback_end_lsn", None)
                position = max(position + 1, int(end) if end is not None else 0)
            records.append((position, build(message, proto_version=proto_version, in_stream=in_stream,
                                            encoding=client_encoding)))
        segment = Segment("messages", proto_version, dict(options or {}), client_encoding, server_version,
                          lambda marks=None: iter(records))
        return cls([segment], server_version=server_version)


def _csv_records(path: str) -> Callable[..., Iterator[tuple[int, bytes]]]:
    def records(marks: Callable[..., None] | None = None) -> Iterator[tuple[int, bytes]]:
        for _, lsn, _, data in read_copy_csv(path, raw=True):
            yield lsn, data
    return records


def _capture_records(path: str) -> Callable[..., Iterator[tuple[int, bytes]]]:
    """The records of a capture file, snapshot section aside.  A file damaged inside (intact records after a
    damaged one) raises :class:`SourceError`: serving what comes before the damage as the whole stream would
    hide the rest from every client; a torn end (an interrupted write) ends the records.  The records that
    say where the slot stood are not served either: ``marks(path, data, offset=offset)``, when given, takes them."""
    def records(marks: Callable[..., None] | None = None) -> Iterator[tuple[int, bytes]]:
        with read_capture(path) as reader:
            reading = reader.records(raw=True)
            for offset, lsn, _, data in reading:
                if data and data[0] in snapshot_records.KINDS:  # a snapshot section's rows, or where the slot stood
                    if marks is not None and data[0] == snapshot_records.CONFIRMED:
                        marks(path, data, offset=offset)
                    continue
                yield lsn, data
            if reading.tail is not None and reading.tail.intact_from is not None:
                raise SourceError(f"{path}: {reading.tail}")
    return records


def resumed_decoder(segment: Segment, previous: Decoder | None) -> Decoder:
    """A decoder for ``segment``: a resumed capture's next file goes on from where the one before left off
    -- the relation and type caches kept, whatever was open forgotten (it is sent again from its start) --
    as :meth:`~replwire.codec.Decoder.resume` does, in the segment's own protocol version."""
    decoder = Decoder(proto_version=segment.proto_version, encoding=segment.client_encoding)
    if previous is not None:
        decoder.relations = dict(previous.relations)
        decoder.types = dict(previous.types)
    return decoder


class Walk:
    """One pass over a segment's records: each message decoded with ``decoder`` and routed by a
    :class:`~replwire.codec.stream.routing.Router` -- what :meth:`Source.scan` and the
    :class:`~replwire.codec.serve.replay.Replay` read, so that both name every transaction by the same key
    (the ordinal of its opener in the segment) as ``replwire decode`` and the Spark jobs route it.  Iterate
    for ``(lsn, message, in_stream, route)``; ``ordinal`` is the record's place in the segment (in an error,
    the record that failed), ``router.streams`` the open streamed transactions' keys by xid.

    Each segment is routed on its own (a transaction is served only from the captured session it opened
    and ended in; a resumed capture sends what was open again from its start), and leniently: a segment
    may end a transaction opened before it (a Commit Prepared of an earlier Prepare)."""

    def __init__(self, segment: Segment, decoder: Decoder, marks: Callable[..., None] | None = None) -> None:
        self.segment, self.decoder, self.marks = segment, decoder, marks
        self.router = Router(decoder, strict=False)
        self.ordinal = -1

    def __iter__(self) -> Iterator[tuple[int, WireMessage, bool, Route | None]]:
        decoder, route = self.decoder, self.router.route
        for ordinal, (lsn, data) in enumerate(self.segment.records(self.marks)):
            self.ordinal = ordinal
            in_stream = decoder.in_stream
            message = decoder.feed(data)
            yield lsn, message, in_stream, route(message, ordinal, in_stream)


def _scan(segments: Sequence[Segment]) -> Scan:
    """Read every segment once: each transaction's fate by (segment, key), the relations, the reach."""
    scan = Scan()
    decoder: Decoder | None = None
    reach = Reach()
    for number, segment in enumerate(segments):
        decoder = resumed_decoder(segment, decoder)
        walk = Walk(segment, decoder, reach.confirmed)
        joined: set[int] = set()  # streamed transactions whose first block is not in the segment: no fate
        origins: set[int] = set()  # transactions with an Origin
        try:
            for lsn, message, _, route in walk:
                scan.messages += 1
                scan.last_lsn = max(scan.last_lsn, lsn)
                at = message_completes(message)
                if at is not None and at > reach.position:
                    reach.position = at
                if message.__class__ is Relation:
                    assert isinstance(message, Relation)
                    scan.relations[(message.namespace or "pg_catalog", message.name)] = message
                if route is None:
                    continue
                kind, key = route.kind, route.key
                assert key is not None or kind is LONE  # (every other route names its transaction)
                if kind is OPEN:
                    if route.streamed and not cast(StreamStart, message).is_first_segment:
                        joined.add(cast(int, key))
                elif kind is ORIGIN:
                    origins.add(cast(int, key))
                elif (kind is COMMIT or kind is PREPARE) and key not in joined:
                    end = route.value
                    if end.__class__ is not CommitPrepared:  # (its Prepare gave the transaction its fate)
                        lsn_at = end.prepare_lsn if kind is PREPARE else end.commit_lsn
                        scan.fates[(number, cast(int, key))] = TxnFate(COMMITTED, int(lsn_at), key in origins)
                elif kind is DROP and message.__class__ is StreamAbort and key not in joined:
                    scan.fates[(number, cast(int, key))] = TxnFate(ABORTED, lsn)
        except SourceError:
            raise
        except CaptureFileError as error:  # (Reach: not one stream)
            raise InputsRefused(str(error)) from None
        except ReplwireError as error:
            raise SourceError(f"{segment.name}: message #{walk.ordinal}: {error}") from None
        if decoder.state != IDLE or any(key not in joined for key in walk.router.streams.values()):
            scan.notes.append(f"{segment.name}: ends inside a transaction; what it has of it is not served")
    return scan
