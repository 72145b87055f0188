"""The benchmark command: every codec side by side, in one process, on a real and a synthetic corpus.

    python -m bench [--quick] [--messages N] [--rounds R] [--servers 18,15] [--refresh] [--no-real]
                    [--stream-gib G] [--out bench/results/latest.json]

For each corpus (see :mod:`bench.corpus`) and each message family, every codec (see :mod:`bench.codecs`)
parses the messages, then builds them from its own parsed objects; throughput is messages/s and MB/s of
wire bytes, with the ratio to the hand-written yardstick measured in the same run.  The results, the
machine, a profile of the fast codec and the 1 GB streaming check (:mod:`bench.stream`) go to a JSON file
(shape in ``bench/README.md``); :mod:`bench.report` renders it as a Markdown table and an SVG chart, and
the table is printed at the end.

Strategy: the codecs are interleaved round by round and each keeps its best round (the slow construct
paths run fewer rounds); a sanity check (``build(parse(b)) == b``) runs untimed before any timing, and a
codec that fails it is left out with the reason recorded.  Totals are sums over the families.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import pathlib
import pstats
import re
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from . import codecs as codec_registry
from . import corpus as corpora
from . import measure, report, stream

RESULTS = corpora.ROOT / "bench" / "results" / "latest.json"

#: The targets, as ratios from the same run: the public entry points (the compiled codec) and the generated
#: Python codec against the hand-written yardstick.
TARGETS = [
    {"name": "parse >= 3x yardstick", "op": "parse", "codec": "replwire-fast", "versus": "yardstick",
     "at_least": 3.0},
    {"name": "build >= 1.5x yardstick", "op": "build", "codec": "replwire-fast", "versus": "yardstick",
     "at_least": 1.5},
    {"name": "parse >= 4x pypgoutput", "op": "parse", "codec": "replwire-fast", "versus": "pypgoutput",
     "at_least": 4.0},
    {"name": "Python codec: parse >= 0.8x yardstick", "op": "parse", "codec": "replwire-python",
     "versus": "yardstick", "at_least": 0.8},
    {"name": "Python codec: build >= 0.8x yardstick", "op": "build", "codec": "replwire-python",
     "versus": "yardstick", "at_least": 0.8},
]
STREAM_LIMIT = 200 * 1024 * 1024


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def suites(args: argparse.Namespace) -> list[tuple[str, str, corpora.Corpus, list[str] | None]]:
    """(corpus name, subset name, corpus, codec names or None for all)."""
    log(f"building the synthetic corpus ({args.messages:,} messages)...")
    synthetic = corpora.synthetic(args.messages)
    out = [("synthetic", "all", synthetic, None)]
    if not args.no_real:
        log(f"real-server corpus (PostgreSQL {', '.join(map(str, args.servers))}; cached in bench/corpora/)...")
        try:
            real = corpora.real(tuple(args.servers), refresh=args.refresh)
        except Exception as error:  # noqa: BLE001 - no server on this machine: reported, not fatal
            log(f"  skipped: {error!r}")
            args.real_error = repr(error)
        else:
            out.append(("real", "all", real, [c for c in args.codecs if c != "pypgoutput"]))
            subset = real.select(corpora.pypgoutput_subset)
            out.append(("real", "pypgoutput-subset", subset,
                        ["replwire-fast", "replwire-python", "yardstick", "pypgoutput"]))
    return out


def run_suite(name: str, subset: str, corpus: corpora.Corpus, codecs: list[codec_registry.Codec],
              args: argparse.Namespace) -> tuple[list[dict], dict]:
    log(f"{name}/{subset}: {len(corpus.items):,} messages, {corpus.size / 1e6:.1f} MB")
    problems = {}
    usable = []
    for codec in codecs:
        groups = [g for family in corpus.families() if codec.handles(family) for g in corpus.groups(family)]
        problem = codec_registry.check(codec, groups)
        if problem:
            log(f"  {codec.name} left out: {problem[:200]}")
            problems[codec.name] = problem
        else:
            usable.append(codec)
    rows = []
    for family in corpus.families():
        groups = corpus.groups(family)
        messages = sum(len(g[2]) for g in groups)
        size = sum(len(d) for g in groups for d in g[2])
        here = [c for c in usable if c.handles(family)]
        for op in ("parse", "build"):
            runnable = [c for c in here if op == "parse" or c.build_loop is not None]

            def prepare(codec: codec_registry.Codec) -> Any:
                return groups if op == "parse" else codec.prepare_build(groups)  # type: ignore[misc]

            # the slow codecs' build inputs are big (construct dicts): made just before their run, then dropped
            inputs = {c.name: prepare(c) for c in runnable if not c.slow}
            best: dict[str, tuple[float, int, int]] = {}
            for round_ in range(args.rounds):
                for codec in runnable:
                    if codec.slow and round_ >= args.slow_rounds:
                        continue
                    loop = codec.parse_loop if op == "parse" else codec.build_loop
                    data = inputs[codec.name] if codec.name in inputs else prepare(codec)
                    seconds, peak, before = measure.timed(functools.partial(loop, data))  # type: ignore[arg-type]
                    del data
                    if codec.name not in best or seconds < best[codec.name][0]:
                        best[codec.name] = (seconds, peak, before)
            del inputs
            for codec in runnable:
                seconds, peak, before = best[codec.name]
                rows.append({"corpus": name, "subset": subset, "op": op, "family": family, "codec": codec.name,
                             "messages": messages, "bytes": size, "seconds": seconds, "peak_rss_bytes": peak,
                             "rss_before_bytes": before,
                             "rounds": args.slow_rounds if codec.slow else args.rounds})
            log(f"  {family:16s} {op}: " + ", ".join(
                f"{c.name} {messages / best[c.name][0]:,.0f}/s" for c in runnable))
    return rows, problems


def totals(rows: list[dict]) -> list[dict]:
    """Per (corpus, subset, op, codec): the sum over the families, as family ``all``."""
    out: dict[tuple, dict] = {}
    for r in rows:
        key = (r["corpus"], r["subset"], r["op"], r["codec"])
        t = out.setdefault(key, {**r, "family": "all", "messages": 0, "bytes": 0, "seconds": 0.0,
                                 "peak_rss_bytes": 0, "rss_before_bytes": 0})
        t["messages"] += r["messages"]
        t["bytes"] += r["bytes"]
        t["seconds"] += r["seconds"]
        if r["peak_rss_bytes"] >= t["peak_rss_bytes"]:
            t["peak_rss_bytes"], t["rss_before_bytes"] = r["peak_rss_bytes"], r["rss_before_bytes"]
    return list(out.values())


def complete(rows: list[dict]) -> list[dict]:
    """Add rates and the ratio to the yardstick of the same corpus, subset, op and family."""
    for r in rows:
        r["messages_per_s"] = r["messages"] / r["seconds"]
        r["mb_per_s"] = r["bytes"] / r["seconds"] / 1e6
    yard = {(r["corpus"], r["subset"], r["op"], r["family"]): r for r in rows if r["codec"] == "yardstick"}
    for r in rows:
        y = yard.get((r["corpus"], r["subset"], r["op"], r["family"]))
        comparable = y is not None and y["messages"] == r["messages"]
        r["ratio_to_yardstick"] = r["messages_per_s"] / y["messages_per_s"] if comparable else None
    return rows


def check_targets(rows: list[dict]) -> list[dict]:
    by = {(r["corpus"], r["subset"], r["op"], r["family"], r["codec"]): r for r in rows}
    out = []
    for target in TARGETS:
        for (corpus, subset, op, family, codec), r in sorted(by.items()):
            if family != "all" or op != target["op"] or codec != target["codec"]:
                continue
            other = by.get((corpus, subset, op, family, target["versus"]))
            if other is None or other["messages"] != r["messages"]:
                continue
            value = r["messages_per_s"] / other["messages_per_s"]
            out.append({**target, "corpus": corpus, "subset": subset, "value": value,
                        "holds": value >= target["at_least"]})
    return out


def profile(corpus: corpora.Corpus, top: int = 14) -> dict[str, Any]:
    """cProfile of the fast codec parsing and building the corpus once (where the time goes)."""
    fast = next(c for c in codec_registry.all_codecs() if c.name == "replwire-fast")
    groups = corpus.groups()
    out = {}
    for op in ("parse", "build"):
        data = groups if op == "parse" else fast.prepare_build(groups)  # type: ignore[misc]
        loop = fast.parse_loop if op == "parse" else fast.build_loop
        profiler = cProfile.Profile()
        profiler.runcall(loop, data)  # type: ignore[misc]
        stats = pstats.Stats(profiler)
        total = stats.total_tt  # type: ignore[attr-defined]
        entries = []
        for (filename, line, function), (calls, _, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
            where = function if filename == "~" else f"{pathlib.Path(filename).name}:{line}({function})"
            where = re.sub(r" at 0x[0-9a-f]+", "", where)  # builtins' names carry an address that changes every run
            entries.append({"function": where, "calls": calls, "tottime_s": tottime, "cumtime_s": cumtime,
                            "share": tottime / total if total else 0.0})
        entries.sort(key=lambda e: -e["tottime_s"])
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
        out[op] = {"total_s": total, "messages": len(corpus.items), "top": entries[:top]}
    return out


def direct_parse_loop(tables: dict[str, Any]) -> Callable[[codec_registry.Groups], None]:
    """A parse loop that calls the generated functions of ``tables`` (the generated module's globals)
    straight from its dispatch tables, without the public ``parse`` around them (for the breakdown)."""
    out, inn, envelope = tables["_PARSE_OUT"], tables["_PARSE_IN"], tables["_PARSE_ENVELOPE"]["server"]

    def loop(groups: codec_registry.Groups) -> None:
        for proto_version, in_stream, datas in groups:
            table = envelope if proto_version is None else (inn if in_stream else out)[proto_version]
            for data in datas:
                table[data[0]](data, proto_version, in_stream, "utf-8")

    return loop


def breakdown(corpus: corpora.Corpus, rounds: int) -> dict[str, Any]:
    """Where the fast codec's parse time goes, by taking parts away: the public ``parse`` around the
    generated functions, then the generated functions alone, against the yardstick on the same messages."""
    codecs = {c.name: c for c in codec_registry.all_codecs()}
    steps = {
        "replwire-fast (public parse)": codecs["replwire-fast"].parse_loop,
        "generated functions, called directly": direct_parse_loop(vars(codec_registry.fast._generated)),
        "yardstick": codecs["yardstick"].parse_loop,
    }
    groups = corpus.groups()
    best = {name: float("inf") for name in steps}
    for _ in range(rounds):
        for name, loop in steps.items():
            best[name] = min(best[name], measure.timed(lambda: loop(groups))[0])  # noqa: B023
    n = len(corpus.items)
    public = best["replwire-fast (public parse)"]
    return {"corpus": corpus.name, "messages": n,
            "steps": [{"step": name, "seconds": s, "ns_per_message": s / n * 1e9, "share_of_public": s / public}
                      for name, s in best.items()]}


def stream_check(items: list[corpora.Item], gib: float) -> dict[str, Any]:
    """Write about ``gib`` GiB of messages to a temporary file, decode it in a fresh process, delete it."""
    corpora.CORPORA.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=corpora.CORPORA, prefix="stream-") as tmp:
        path = pathlib.Path(tmp) / "stream.rwb"
        target = int(gib * 2**30)
        log(f"writing a {gib:g} GiB stream file...")
        start = time.perf_counter()
        written = stream.write_stream(path, items, target)
        log(f"  {written / 2**30:.2f} GiB in {time.perf_counter() - start:.0f} s; decoding it in a fresh process...")
        result = stream.decode_in_child(path)
    result["file_bytes"] = written
    result["limit_bytes"] = STREAM_LIMIT
    result["holds"] = result["peak_rss_bytes"] < STREAM_LIMIT
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run: 20k synthetic messages, 2 rounds, "
                        "a 0.1 GiB stream")
    parser.add_argument("--messages", type=int, default=200_000, help="size of the synthetic corpus")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per codec (best one kept)")
    parser.add_argument("--slow-rounds", type=int, default=1, help="rounds for the construct-based codecs")
    parser.add_argument("--servers", default="18", help="PostgreSQL majors for the real corpus, e.g. 18,15")
    parser.add_argument("--refresh", action="store_true", help="capture the real corpus again")
    parser.add_argument("--no-real", action="store_true", help="skip the real-server corpus")
    parser.add_argument("--stream-gib", type=float, default=1.0, help="size of the streaming check (0: skip)")
    parser.add_argument("--no-profile", action="store_true", help="skip the profile")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS, help="results file")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.rounds, args.stream_gib = 20_000, 2, min(args.stream_gib, 0.1)
    args.servers = [int(s) for s in str(args.servers).split(",") if s]
    args.real_error = None
    all_codecs = codec_registry.all_codecs()
    args.codecs = [c.name for c in all_codecs]
    started = time.perf_counter()
    declined_before = codec_registry.fast.DECLINED.copy()  # the process may have declined before (tests)
    machine = measure.machine()
    machine["replwire_codec"] = "compiled (C)" if codec_registry.fast.IMPL == "c" else "Python"
    rows: list[dict] = []
    problems: dict[str, dict] = {}
    summaries = {}
    todo = suites(args)
    for name, subset, corpus, names in todo:
        chosen = [c for c in all_codecs if names is None or c.name in names]
        suite_rows, suite_problems = run_suite(name, subset, corpus, chosen, args)
        rows += suite_rows
        if suite_problems:
            problems[f"{name}/{subset}"] = suite_problems
        summaries[f"{name}/{subset}"] = corpus.summary()
    rows = complete(rows + totals(rows))
    results: dict[str, Any] = {
        "format": "replwire-bench/1",
        "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine,
        "settings": {"messages": args.messages, "rounds": args.rounds, "slow_rounds": args.slow_rounds,
                     "servers": args.servers, "codecs": args.codecs},
        "corpora": summaries,
        "results": rows,
        "targets": check_targets(rows),
        "left_out": problems,
        "real_corpus_error": args.real_error,
    }
    declined = codec_registry.fast.DECLINED - declined_before
    results["declined"] = {f"{op}:{name}": count for (op, name), count in declined.items()}
    if not args.no_profile:
        log("profiling the fast codec on the synthetic corpus...")
        results["profile"] = profile(todo[0][2])
        results["breakdown"] = breakdown(todo[0][2], args.rounds)
    if args.stream_gib > 0:
        items = [i for _, _, c, _ in todo[:2] for i in c.items]
        results["stream"] = stream_check(items, args.stream_gib)
    results["seconds"] = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    log(f"results written to {args.out}")
    print(report.markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
