"""A PostgreSQL snapshot as ``pg_current_snapshot()`` prints it, and which transactions it sees.

The text is ``xmin:xmax:xip,...`` with 64-bit transaction ids (``xid8``: the xid epoch in the high 32 bits):
every transaction below ``xmin`` is complete, every one from ``xmax`` on had not completed when the snapshot
was taken, and ``xip`` lists the ones in between that were still in progress (top-level transactions only;
PostgreSQL's docs, System Information Functions: ``pg_snapshot``).  A committed transaction is visible to the
snapshot exactly when it is below ``xmax`` and not in ``xip``.

The replication stream names transactions by 32-bit xids.  :meth:`Snapshot.widen` gives a 32-bit xid its
epoch: the ``xid8`` nearest to ``xmin`` with those low 32 bits.  That is right for every transaction a
stream reader compares with a snapshot, because PostgreSQL keeps every running or recently committed xid
within 2^31 of the oldest one it still has to consider (the wraparound limit).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Snapshot"]

_EPOCH = 1 << 32
_HALF = 1 << 31


@dataclass(frozen=True)
class Snapshot:
    """One snapshot: ``xmin``, ``xmax`` and ``xip`` as ``xid8`` integers."""

    xmin: int
    xmax: int
    xip: frozenset[int]

    def __post_init__(self) -> None:
        if not 0 <= self.xmin <= self.xmax < 1 << 64:
            raise ValueError(f"a snapshot needs 0 <= xmin <= xmax < 2^64, got {self.xmin}:{self.xmax}")
        outside = sorted(x for x in self.xip if not self.xmin <= x < self.xmax)
        if outside:
            raise ValueError(f"xip values must lie in [xmin, xmax) = [{self.xmin}, {self.xmax}), got {outside}")

    @classmethod
    def parse(cls, text: str) -> Snapshot:
        """The snapshot ``pg_current_snapshot()::text`` printed (``"745:750:745,748"``, ``"750:750:"``)."""
        parts = text.strip().split(":")
        if len(parts) != 3:
            raise ValueError(f"not a snapshot (xmin:xmax:xip,...): {text!r}")
        try:
            xmin, xmax = int(parts[0]), int(parts[1])
            xip = frozenset(int(x) for x in parts[2].split(",")) if parts[2] else frozenset()
        except ValueError:
            raise ValueError(f"not a snapshot (xmin:xmax:xip,...): {text!r}") from None
        return cls(xmin, xmax, xip)

    def __str__(self) -> str:
        return f"{self.xmin}:{self.xmax}:{','.join(str(x) for x in sorted(self.xip))}"

    def widen(self, xid: int) -> int:
        """The ``xid8`` of a 32-bit stream ``xid``: the one nearest to ``xmin`` with the same low 32 bits."""
        if not 0 <= xid < _EPOCH:
            raise ValueError(f"a 32-bit xid is in [0, 2^32), got {xid}")
        full = (self.xmin & ~(_EPOCH - 1)) | xid
        if full - self.xmin > _HALF and full >= _EPOCH:
            full -= _EPOCH
        elif self.xmin - full > _HALF:
            full += _EPOCH
        return full

    def sees(self, xid: int) -> bool:
        """Whether the snapshot sees the changes of ``xid`` (a 32-bit xid of a transaction known to have
        committed): it had completed when the snapshot was taken."""
        full = self.widen(xid)
        return full < self.xmax and full not in self.xip
