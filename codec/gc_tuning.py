"""How often CPython's cyclic garbage collector runs during a long decoding pass.

Strategy: decoding makes millions of small objects (messages, tuple columns, changes) that reference
counting frees as soon as they are used -- hardly any of them are in reference cycles -- yet each one
counts towards the collector's next run, and every full run walks every live object: the plan of the
inputs, the imported modules.  With CPython's default thresholds that walking is a large share of a long
pass's time.  :func:`fewer_collections` raises the thresholds for the length of a pass; the collector
still runs, less often.

The youngest generation's threshold counts objects made less objects freed, so it is what the objects
held at once reach: a transaction buffered until its commit (a streamed one: tens of thousands of
changes, a few objects a column) holds that many.  Below it, every collection walks the buffered objects
again and moves them on; above it, they are freed before any collection sees them.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["QUIET_THRESHOLDS", "fewer_collections"]

#: Thresholds of the cyclic garbage collector while a pass runs (CPython's defaults: 700, 10, 10).
QUIET_THRESHOLDS = (200_000, 20, 100)
_quiet_lock = threading.Lock()
_quiet_users = 0
_saved_thresholds: tuple[int, ...] = ()


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the cyclic garbage collector less often inside (thresholds :data:`QUIET_THRESHOLDS`).

    Nested and overlapping users share one setting; the last one to leave restores the thresholds found.
    """
    global _quiet_users, _saved_thresholds
    with _quiet_lock:
        if not _quiet_users:
            _saved_thresholds = gc.get_threshold()
            gc.set_threshold(*QUIET_THRESHOLDS)
        _quiet_users += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_users -= 1
            if not _quiet_users:
                gc.set_threshold(*_saved_thresholds)
