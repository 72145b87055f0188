"""The facts of a committed transaction, apart from its changes.

Strategy: one type, :class:`Outcome`, for what the server says about a transaction when it commits -- xid,
commit and end LSNs, commit time, origin, the two-phase gid and prepare facts, whether it was streamed --
whoever works them out: the :class:`~replwire.codec.Assembler` (a :class:`~replwire.codec.Transaction` is
an Outcome with its changes), the first pass of :mod:`replwire.codec.split` (one Outcome per transaction,
held by the parts that have its changes), and the Spark rows, which read them into columns.  It is a
slotted dataclass because the first pass makes one per transaction of a stream.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..scalars import LSN, Timestamp

__all__ = ["Outcome"]


@dataclass(slots=True)
class Outcome:  # not frozen: a frozen dataclass is several times as slow to make, and one is made per transaction
    """What is known of a committed transaction besides its changes.

    ``commit_lsn``/``end_lsn``/``commit_time`` come from Commit, Stream Commit or Commit Prepared (``end_lsn``
    is what to confirm as flushed once the transaction is durably applied).  ``origin`` is
    ``(name, origin_lsn)`` when an Origin message came with it.  ``gid`` is set for a two-phase transaction,
    with ``prepare_lsn``/``prepare_time`` from its Prepare or Stream Prepare.  ``streamed`` tells whether it
    arrived in Stream Start...Stop blocks.
    """

    xid: int | None  # None for the rows of an initial snapshot, which no transaction made
    commit_lsn: LSN
    end_lsn: LSN
    commit_time: Timestamp
    origin: tuple[str, LSN] | None = None
    gid: str | None = None
    prepare_lsn: LSN | None = None
    prepare_time: Timestamp | None = None
    streamed: bool = False
