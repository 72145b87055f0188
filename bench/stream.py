"""The streaming check: decode a 1 GB capture message by message and watch the process's peak RSS.

    python -m bench.stream FILE     (prints one JSON object)

The file is in the benchmark's length-prefixed format (:func:`bench.corpus.write_items`); the decoder reads
one message at a time through a buffered file and parses it with ``replwire.codec.parse`` /
``parse_envelope``, keeping nothing.  :func:`decode_in_child` runs this in a fresh interpreter so that the
peak RSS it reports is the decoder's own, not the benchmark's (which holds its corpora in memory).

Strategy: :func:`write_stream` repeats the benchmark's corpora (real captures, with their 10 kB TOASTed
values, and the synthetic mix) until the file reaches the requested size.
"""

from __future__ import annotations

import itertools
import json
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

from . import corpus as corpora


def write_stream(path: pathlib.Path, items: Iterable[corpora.Item], target: int) -> int:
    """Write ``items`` over and over to ``path`` until it holds at least ``target`` bytes."""
    items = list(items)
    written = len(corpora.MAGIC)
    with path.open("wb", buffering=1 << 20) as out:
        out.write(corpora.MAGIC)
        for chunk in itertools.cycle([items]):
            written += corpora.write_items(out, chunk)
            if written >= target:
                break
    return written


def decode(path: pathlib.Path) -> dict[str, Any]:
    """Parse every message of ``path``, one at a time."""
    from replwire.codec import parse, parse_envelope  # noqa: PLC0415 - measured after the import

    from . import measure  # noqa: PLC0415

    rss_start = measure.current_rss()
    messages = size = 0
    start = time.perf_counter()
    with path.open("rb", buffering=1 << 20) as src:
        for item in corpora.read_items(src):
            if item.proto_version is None:
                parse_envelope(item.data, sender="server")
            else:
                parse(item.data, proto_version=item.proto_version, in_stream=item.in_stream)
            messages += 1
            size += len(item.data)
    seconds = time.perf_counter() - start
    return {"messages": messages, "message_bytes": size, "seconds": seconds,
            "messages_per_s": messages / seconds, "mb_per_s": size / seconds / 1e6,
            "rss_at_start_bytes": rss_start, "peak_rss_bytes": measure.peak_rss()}


def decode_in_child(path: pathlib.Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "bench.stream", str(path)], capture_output=True, text=True,
                          cwd=corpora.ROOT, check=True)
    return json.loads(done.stdout)


if __name__ == "__main__":
    print(json.dumps(decode(pathlib.Path(sys.argv[1]))))
