"""Regenerate the stored real-server corpus in ``tests/captures/``: ``python -m tests.support.make_corpus``
(from the repository root).

It starts PostgreSQL 15 and 18 (see :mod:`replwire.codec.testing.localserver`), captures the workload
through every configuration (``capture.py``) and the live walsender, and keeps a small, varied sample: for
every server, protocol version, message tag, stream state and shape (which old-row image, which column
kinds, which Stream Abort form), the shortest and the longest message under 2 kB, plus a few walsender
frames of each kind.  The robustness properties and the documentation's worked examples read these files;
they stay small enough to commit.
"""

from __future__ import annotations

import json
import pathlib

from replwire.codec import (
    Delete,
    Insert,
    StreamAbort,
    StreamStart,
    StreamStop,
    Update,
    parse,
)
from replwire.codec.testing.localserver import PgServer
from tests.support.capture import capture_all

TESTS = pathlib.Path(__file__).resolve().parents[1]
OUT = TESTS / "captures"
MAX_LEN = 2048


def shape(message) -> tuple:
    """What makes two messages of one tag different enough to keep both."""
    if isinstance(message, (Insert, Update, Delete)):
        parts = tuple(name for name in ("key", "old", "new") if getattr(message, name, None) is not None)
        kinds = "".join(sorted({c.kind for name in parts for c in getattr(message, name)}))
        return parts + (kinds,)
    if isinstance(message, StreamAbort):
        return (message.abort_lsn is not None, message.is_subtransaction)
    return ()


def sample(run) -> dict:
    kept: dict[tuple, list[dict]] = {}
    for capture in run.captures:
        in_stream = False
        for lsn, xid, data in capture.rows:
            message = parse(data, proto_version=capture.proto_version, in_stream=in_stream)
            if len(data) <= MAX_LEN:
                key = (capture.proto_version, chr(data[0]), in_stream, shape(message))
                row = {"hex": data.hex(), "in_stream": in_stream, "lsn": lsn, "xid": xid, "config": capture.config}
                bucket = kept.setdefault(key, [])
                if len(bucket) < 2:
                    bucket.append(row)
                else:  # keep the shortest and the longest
                    bucket.sort(key=lambda r: len(r["hex"]))
                    if len(row["hex"]) < len(bucket[0]["hex"]):
                        bucket[0] = row
                    elif len(row["hex"]) > len(bucket[-1]["hex"]):
                        bucket[-1] = row
            if isinstance(message, StreamStart):
                in_stream = True
            elif isinstance(message, StreamStop):
                in_stream = False
    by_proto: dict[int, list[dict]] = {}
    for (proto, *_), rows in sorted(kept.items(), key=lambda kv: repr(kv[0])):
        unique = {r["hex"]: r for r in rows}
        by_proto.setdefault(proto, []).extend(unique.values())
    frames = []
    for ws in run.walsender:
        seen: dict[str, int] = {}
        for frame in ws.frames:
            tag = chr(frame[0])
            if seen.get(tag, 0) < 3 and len(frame) <= MAX_LEN:
                seen[tag] = seen.get(tag, 0) + 1
                frames.append({"hex": frame.hex(), "sender": "server", "config": ws.config})
    return {"by_proto": by_proto, "frames": frames}


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for major in (15, 18):
        server = PgServer.start(major)
        try:
            run = capture_all(server)
            picked = sample(run)
            for proto, rows in picked["by_proto"].items():
                path = OUT / f"pg{major}-proto{proto}.json"
                path.write_text(json.dumps({"server": server.version_num, "layer": "logical", "proto_version": proto,
                                            "messages": rows}, indent=1, ensure_ascii=False) + "\n")
                print(f"{path.relative_to(TESTS.parent)}: {len(rows)} messages")
            path = OUT / f"pg{major}-walsender.json"
            path.write_text(json.dumps({"server": server.version_num, "layer": "envelope",
                                        "messages": picked["frames"]}, indent=1) + "\n")
            print(f"{path.relative_to(TESTS.parent)}: {len(picked['frames'])} frames")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
