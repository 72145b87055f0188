"""Peak memory of ``replwire decode`` on a large capture file: one streamed transaction of about 1 GiB.

    python -m bench.decode_memory [--gib 1.0] [--row-bytes 1000] [--keep FILE]

The capture file holds the transaction of :func:`bench.assembler_memory.messages` (Stream Start...Stop
blocks of Inserts carrying ``--row-bytes`` of text each, one rolled-back subtransaction, a Stream Commit),
written with :class:`~replwire.codec.io.capture_file.CaptureWriter` (protocol 2, streaming on).  Then
``replwire decode FILE`` runs as its own process with its output to ``/dev/null``; its peak RSS comes from
``getrusage`` of the children.  The target is a peak under 200 MB: the Assembler spills the transaction to
a temporary file past its threshold, and the lines are written as they are made.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter

from .assembler_memory import messages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decode_memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--row-bytes", type=int, default=1000)
    parser.add_argument("--keep", type=pathlib.Path, help="write the capture file here and keep it")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="replwire-bench-memory-") as tmp:
        path = args.keep or pathlib.Path(tmp) / "big.rwcap"
        if not path.exists():
            header = CaptureHeader(proto_version=2, server_version=180000, options={"streaming": "on"})
            with CaptureWriter(path, header) as writer:
                for data, lsn in messages(int(args.gib * 2**30), args.row_bytes):
                    writer.append(lsn or 0, 0, data)
        size = path.stat().st_size
        print(f"capture file: {size / 2**30:.2f} GiB; load average {os.getloadavg()}", file=sys.stderr)
        started = time.perf_counter()
        with open(os.devnull, "w") as sink:
            subprocess.run([sys.executable, "-m", "replwire.codec.cli", "decode", str(path)], stdout=sink,
                           check=True)
        seconds = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    print(f"replwire decode of {size / 2**30:.2f} GiB: {seconds:.1f} s, peak RSS {peak / 1024:.0f} MiB "
          f"(target < 200 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
