"""``replwire decode`` against a naive hand-written decoder, as whole processes on one synthetic stream.

    python -m bench decode [--messages 280000] [--rounds 3] [--keep DIR] [--profile] [--out FILE]

The stream is the synthetic CDC mix of :func:`bench.corpus.synthetic` (protocol 1: four tables of an int
key and seven short texts; Begin/Commit around 3-7 changes; inserts, updates with and without the old key
or an unchanged TOASTed column, deletes), written as the COPY-CSV that ``COPY (SELECT lsn, xid, data FROM
pg_logical_slot_peek_binary_changes(...)) TO STDOUT WITH (FORMAT csv)`` writes, one increasing LSN per row,
and as a replwire capture file of the same records.  Each round runs, in alternating order, with their
output to a file: ``replwire decode STREAM --proto-version 1`` on the COPY-CSV, the same with
``REPLWIRE_IMPL=python`` (the pure-Python path, no compiled codec), ``replwire decode`` on the capture
file, and ``python bench/naive_decode.py STREAM`` (:mod:`bench.naive_decode`); it keeps each one's best
wall-clock and CPU times (the CPU time is the steadier on a shared machine); events/s counts the JSON lines
each printed, which must be the same for all.  The runs keep their compiled modules (``__pycache__``), as
an installed package does, whatever ``PYTHONDONTWRITEBYTECODE`` says here.  The results go to ``--out`` (default
``bench/results/decode.json``, a generic results file the docs' benchmark page renders).  ``--profile``
then prints a profile of ``replwire decode`` on the same stream (its CLI entry point under cProfile, in this
process).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pathlib
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

from replwire.codec import LSN

from . import corpus

NAIVE = pathlib.Path(__file__).resolve().parent / "naive_decode.py"
RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "decode.json"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def write_stream(path: pathlib.Path, messages: int, capture: pathlib.Path | None = None) -> int:
    """The synthetic stream as COPY-CSV at ``path`` (and as a capture file at ``capture``); returns its
    number of rows."""
    from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter

    items = corpus.synthetic(messages).items
    lsn, xid = 0x1_6000_0000, 1000
    writer = CaptureWriter(capture, CaptureHeader(proto_version=1, server_version=180000)) if capture else None
    with path.open("w") as out:
        for item in items:
            lsn += 40
            tag = item.data[:1]
            if tag == b"B":
                xid += 1
            out.write(f"{LSN(lsn)},{xid},\\x{item.data.hex()}\n")
            if writer is not None:
                writer.append(lsn, xid, item.data)
    if writer is not None:
        writer.close()
    return len(items)


def run(command: list[str], out: pathlib.Path, env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """Wall-clock and CPU (user + system) seconds of ``command`` with stdout to ``out``, and the lines it
    printed.  On a shared machine the CPU time is the steadier of the two."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with out.open("w") as sink:
        started = time.perf_counter()
        subprocess.run(command, stdout=sink, stderr=subprocess.DEVNULL, check=True, env=environment(env))
        seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with out.open("rb") as printed:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: printed.read(1 << 20), b""))
    return seconds, cpu, lines


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The runs' environment: this one with ``extra``, less ``PYTHONDONTWRITEBYTECODE``, so that Python keeps
    the modules it compiled as an installed package has them (else every run compiles replwire's modules
    from source again; the best of the rounds is then a run with them cached)."""
    out = {**os.environ, **(extra or {})}
    out.pop("PYTHONDONTWRITEBYTECODE", None)
    return out


#: The runs, by name: the command's arguments after the interpreter, and its environment.
NAIVE_RUN = "naive script"
MAIN_RUN = "replwire decode"


def commands(stream: pathlib.Path, capture: pathlib.Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    decode = ["-m", "replwire.codec.cli", "decode"]
    return {
        MAIN_RUN: ([*decode, str(stream), "--proto-version", "1"], {}),
        "replwire decode, capture file": ([*decode, str(capture)], {}),
        "replwire decode, Python codec": ([*decode, str(stream), "--proto-version", "1"], {"REPLWIRE_IMPL": "python"}),
        NAIVE_RUN: ([str(NAIVE), str(stream)], {}),
    }


def as_results(best: dict[str, list[float]], rows: int, rounds: int, loads: list[float]) -> dict[str, Any]:
    """The measurements as a generic results file (:func:`bench.report.generic`)."""
    from bench.measure import machine

    measured_on = machine()
    naive_wall, naive_cpu, _ = best[NAIVE_RUN]
    table = [[name, round(wall, 2), round(cpu, 2), round(lines / wall), round(naive_wall / wall, 2),
              round(naive_cpu / cpu, 2)] for name, (wall, cpu, lines) in best.items()]
    wall, cpu = naive_wall / best[MAIN_RUN][0], naive_cpu / best[MAIN_RUN][1]
    return {
        "machine": measured_on, "date": measured_on["date"],
        "columns": ["run", "seconds", "CPU seconds", "events/s", "x naive (wall)", "x naive (CPU)"],
        "rows": table,
        "notes": [f"{rows:,} messages of the synthetic CDC mix (protocol 1), {int(best[MAIN_RUN][2]):,} JSON lines; "
                  f"best of {rounds} rounds, whole processes, in alternating order",
                  f"load average {loads[0]:.1f} at the start, {loads[1]:.1f} at the end (two cores, shared): "
                  "compare the ratios within the run",
                  "the COPY-CSV stream unless said; the capture file holds the same records"],
        "targets": [{"name": "replwire decode / naive script, wall clock", "value": wall, "at_least": 2.0,
                     "holds": wall >= 2.0},
                    {"name": "replwire decode / naive script, CPU time", "value": cpu, "at_least": 2.0,
                     "holds": cpu >= 2.0}],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench decode", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=280_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", type=pathlib.Path, help="write the stream and the outputs here")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS, help="the results file (default %(default)s)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="replwire-bench-decode-") as tmp:
        where = args.keep or pathlib.Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        stream, capture = where / "stream.csv", where / "stream.rwc"
        rows = write_stream(stream, args.messages, capture)
        load_start = os.getloadavg()[0]
        log(f"stream: {rows:,} messages, {stream.stat().st_size / 2**20:.1f} MiB; load average {os.getloadavg()}")
        runs = commands(stream, capture)
        best: dict[str, list[float]] = {}  # best wall, best CPU, lines
        for round_ in range(args.rounds):
            names = list(runs) if round_ % 2 == 0 else list(reversed(runs))
            for name in names:
                arguments, env = runs[name]
                output = where / f"{name.replace(' ', '_').replace(',', '')}.jsonl"
                seconds, cpu, lines = run([sys.executable, *arguments], output, env)
                log(f"  round {round_ + 1}: {name}: {seconds:.2f} s ({cpu:.2f} s CPU), "
                    f"{lines / seconds:,.0f} events/s")
                kept = best.setdefault(name, [seconds, cpu, lines])
                kept[0], kept[1] = min(kept[0], seconds), min(kept[1], cpu)
        if len({lines for _, _, lines in best.values()}) != 1:
            raise SystemExit(f"the runs printed different numbers of lines: {best}")
        load_end = os.getloadavg()[0]
        print(f"stream: {rows:,} messages; best of {args.rounds} rounds; load average {load_start:.1f} at the "
              f"start, {load_end:.1f} at the end")
        for name, (seconds, cpu, lines) in best.items():
            print(f"{name:30s} {seconds:6.2f} s ({cpu:6.2f} s CPU)  {int(lines):,} lines  "
                  f"{lines / seconds:10,.0f} events/s")
        wall = best[NAIVE_RUN][0] / best[MAIN_RUN][0]
        cpu_ratio = best[NAIVE_RUN][1] / best[MAIN_RUN][1]
        print(f"replwire decode / naive script: {wall:.2f}x wall clock, {cpu_ratio:.2f}x CPU "
              "(target >= 2x, aim 4x)")
        # measured before the file is opened: opening it for writing makes the checkout dirty, and the
        # results would name the commit "+uncommitted"
        results = as_results(best, rows, args.rounds, [load_start, load_end])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w") as handle:
            json.dump(results, handle, indent=1)
        print(f"results: {args.out}")
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
