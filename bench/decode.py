"""``replwire decode`` against a naive hand-written decoder, as whole processes on one synthetic stream.

    python -m bench decode [--messages 280000] [--rounds 3] [--keep DIR] [--profile]

The stream is the synthetic CDC mix of :func:`bench.corpus.synthetic` (protocol 1: four tables of an int
key and seven short texts; Begin/Commit around 3-7 changes; inserts, updates with and without the old key
or an unchanged TOASTed column, deletes), written as the COPY-CSV that ``COPY (SELECT lsn, xid, data FROM
pg_logical_slot_peek_binary_changes(...)) TO STDOUT WITH (FORMAT csv)`` writes, one increasing LSN per row.
Each round runs ``replwire decode STREAM --proto-version 1`` and ``python bench/naive_decode.py STREAM``
(:mod:`bench.naive_decode`), in alternating order, with their output to a file, and keeps each one's best
wall-clock and CPU times (the CPU time is the steadier on a shared machine); events/s counts the JSON
lines each printed.  ``--profile`` then prints a profile of
``replwire decode`` on the same stream (its CLI entry point under cProfile, in this process).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pathlib
import pstats
import resource
import subprocess
import sys
import tempfile
import time

from replwire.codec import LSN

from . import corpus

NAIVE = pathlib.Path(__file__).resolve().parent / "naive_decode.py"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def write_stream(path: pathlib.Path, messages: int) -> int:
    """The synthetic stream as COPY-CSV at ``path``; returns its number of rows."""
    items = corpus.synthetic(messages).items
    lsn, xid = 0x1_6000_0000, 1000
    with path.open("w") as out:
        for item in items:
            lsn += 40
            tag = item.data[:1]
            if tag == b"B":
                xid += 1
            out.write(f"{LSN(lsn)},{xid},\\x{item.data.hex()}\n")
    return len(items)


def run(command: list[str], out: pathlib.Path) -> tuple[float, float, int]:
    """Wall-clock and CPU (user + system) seconds of ``command`` with stdout to ``out``, and the lines it
    printed.  On a shared machine the CPU time is the steadier of the two."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with out.open("w") as sink:
        started = time.perf_counter()
        subprocess.run(command, stdout=sink, stderr=subprocess.DEVNULL, check=True)
        seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with out.open("rb") as printed:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: printed.read(1 << 20), b""))
    return seconds, cpu, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench decode", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=280_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", type=pathlib.Path, help="write the stream and the outputs here")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="replwire-bench-decode-") as tmp:
        where = args.keep or pathlib.Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        stream = where / "stream.csv"
        rows = write_stream(stream, args.messages)
        log(f"stream: {rows:,} messages, {stream.stat().st_size / 2**20:.1f} MiB; load average {os.getloadavg()}")
        commands = {
            "replwire decode": [sys.executable, "-m", "replwire.codec.cli", "decode", str(stream),
                                "--proto-version", "1"],
            "naive script": [sys.executable, str(NAIVE), str(stream)],
        }
        best: dict[str, list[float]] = {}  # best wall, best CPU, lines
        for round_ in range(args.rounds):
            names = list(commands) if round_ % 2 == 0 else list(reversed(commands))
            for name in names:
                seconds, cpu, lines = run(commands[name], where / f"{name.split()[0]}.jsonl")
                log(f"  round {round_ + 1}: {name}: {seconds:.2f} s ({cpu:.2f} s CPU), "
                    f"{lines / seconds:,.0f} events/s")
                kept = best.setdefault(name, [seconds, cpu, lines])
                kept[0], kept[1] = min(kept[0], seconds), min(kept[1], cpu)
        print(f"stream: {rows:,} messages; best of {args.rounds} rounds; load average {os.getloadavg()}")
        for name, (seconds, cpu, lines) in best.items():
            print(f"{name:16s} {seconds:6.2f} s ({cpu:6.2f} s CPU)  {int(lines):,} lines  "
                  f"{lines / seconds:10,.0f} events/s")
        wall = best["naive script"][0] / best["replwire decode"][0]
        cpu_ratio = best["naive script"][1] / best["replwire decode"][1]
        print(f"replwire decode / naive script: {wall:.2f}x wall clock, {cpu_ratio:.2f}x CPU "
              "(target >= 2x, aim 4x)")
        if args.profile:
            from replwire.codec.cli.main import main as cli

            profiler = cProfile.Profile()
            with (where / "profiled.jsonl").open("w") as sink:
                saved, sys.stdout = sys.stdout, sink
                try:
                    profiler.runcall(cli, ["decode", str(stream), "--proto-version", "1"], standalone_mode=False)
                finally:
                    sys.stdout = saved
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
