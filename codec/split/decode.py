"""The second pass of split decoding, and the single-process way to the same result.

Strategy: :func:`decode_part` runs the :class:`~replwire.codec.Decoder` and
:class:`~replwire.codec.stream.routing.Router` from the state a :class:`~replwire.codec.split.first_pass.Part`
begins in over the part's records and yields the changes whose transaction was committed (once: a
transaction seen again after a resume is skipped, as ``replwire decode`` does), each with its transaction's
:class:`~replwire.codec.stream.outcome.Outcome` and its stream *position*, which orders changes within a
transaction.  :func:`committed` is what one :class:`~replwire.codec.Assembler` gives over the same inputs:
``replwire decode`` prints it, and the tests hold the parts to it.  Nothing here knows about Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..collector import fewer_collections
from ..errors import DecodeError, ReplwireError
from ..io.capture_file import TailProblem
from ..scalars import LSN
from ..stream.assembler import Assembler, Change, ChangeMaker, Transaction
from ..stream.decoder import StreamStateError
from ..stream.outcome import Outcome
from ..stream.routing import CHANGE, LONE, Router
from .first_pass import Part
from .inputs import Input, read_records

__all__ = ["Decoded", "RecordError", "committed", "decode_part"]


@dataclass(slots=True)
class Decoded:
    """One committed change from :func:`decode_part`: the change (see :class:`~replwire.codec.Change`; its
    ``row_schema`` is what its tuples' values are read with), its transaction's facts (``None`` for a
    non-transactional logical message), and its stream ``position``."""

    position: int
    change: Change
    outcome: Outcome | None


def decode_part(part: Part, *, typed: bool = True, rows: bool = True) -> Iterator[Decoded]:
    """The committed changes of one part, in stream order (see the module docstring).  ``typed=False``
    leaves the values as text (``str``) and bytes; ``rows=False`` makes no row dicts at all (``new``, ``old``
    and ``key`` stay ``None``), for callers that read the wire tuples of ``change.message`` with
    ``change.row_schema`` themselves."""
    with fewer_collections():
        yield from _decode_part(part, typed, rows)


def _decode_part(part: Part, typed: bool, rows: bool) -> Iterator[Decoded]:
    router = Router.from_state(part.state)
    decoder = router.decoder
    maker = ChangeMaker(typed=typed and rows, rows=rows, encoding=decoder.encoding)
    outcomes, repeated, dropped = part.outcome_table(), part.repeated_lone, part.dropped_subxacts
    source = part.source
    base = source.position(0)
    new_lsn = int.__new__  # the records' LSNs are unsigned 64-bit already: no need to check them again
    for offset, lsn, _, data in read_records(source, part.start, part.stop, raw=True):
        in_stream = decoder.in_stream
        message = decoder.feed(data)
        position = base | offset
        route = router.route(message, position, in_stream)
        if route is None:
            continue
        if route.kind is CHANGE:
            key = route.key
            assert key is not None  # a change route names its transaction (Router.route)
            outcome = outcomes.get(key)
            if outcome is None or (dropped and route.value in dropped.get(key, ())):
                continue
            schema = maker.schema_for(decoder, message)
            change = maker.change(message, schema, new_lsn(LSN, lsn) if lsn else None, outcome.xid,
                                  route.value if outcome.streamed else None)
            yield Decoded(position, change, outcome)
        elif route.kind is LONE and position not in repeated:
            yield Decoded(position, maker.change(message, None, new_lsn(LSN, lsn) if lsn else None, None), None)


class RecordError(ReplwireError, ValueError):
    """A record of an input that does not decode: ``path``, ``record`` (its number in the input, from 0) and
    the decoder's ``error`` (a :class:`~replwire.codec.DecodeError` or
    :class:`~replwire.codec.StreamStateError`; also the ``__cause__``)."""

    def __init__(self, path: str, record: int, error: Exception) -> None:
        self.path, self.record, self.error = path, record, error
        super().__init__(f"{path}, record {record}: {error}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (RecordError, (self.path, self.record, self.error))


def committed(inputs: Sequence[Input], *, typed: bool = True,
              tail: Callable[[str, TailProblem], None] | None = None,
              repeated: Callable[[Transaction | Change], None] | None = None) -> Iterator[Transaction | Change]:
    """The single-process way to the same result: every committed transaction (and non-transactional
    logical message) of ``inputs`` from one :class:`~replwire.codec.Assembler`, resumed between inputs, with
    what a resume sends again skipped (an item whose end is not past the last one's), each such item handed
    to ``repeated`` if given.  ``tail(path, problem)`` hears of a torn capture file tail once the records
    before it are done.  A record that does not decode raises :class:`RecordError`."""
    assembler = Assembler(proto_version=inputs[0].proto_version, encoding=inputs[0].encoding, typed=typed)
    feed = assembler.feed
    last_end = -1
    for source in inputs:
        if source.index:
            assembler.resume()
        reading = read_records(source)
        number = 0
        try:
            for number, record in enumerate(reading):  # noqa: B007 - named in the error
                for item in feed(record.data, lsn=record.lsn or None):
                    end = item.end_lsn if isinstance(item, Transaction) else item.lsn
                    if end is not None and end <= last_end:
                        if repeated is not None:
                            repeated(item)
                        continue
                    if end is not None:
                        last_end = end
                    yield item
        except (DecodeError, StreamStateError) as error:
            raise RecordError(source.path, number, error) from error
        finally:
            reading.close()
        if reading.tail is not None and tail is not None:
            tail(source.path, reading.tail)
