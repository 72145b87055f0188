"""Throughput of ``replwire serve``: messages per second re-encoded for a client, and received by a psycopg2
consumer over a loopback socket.

Strategy: a generated stream (:func:`replwire.codec.testing.workloads.generate`: plain and streamed
transactions, rolled-back subtransactions, unchanged TOAST) is served three ways and timed: the sans-I/O
replay alone, as captured (protocol 4, streaming on) and reassembled (protocol 1, no streaming); then
through the server to psycopg2's ``LogicalReplicationConnection`` (protocol 4, streaming on).  The load
average is printed beside the numbers: compare the ratios within one run.

    python -m bench.serve [--transactions 3000] [--seed 1] [--out bench/results/serve.json]

The table goes to ``--out`` (a generic results file, :func:`bench.report.generic`), which the docs'
benchmark page renders: no figure of it is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import select
import time
from typing import Any

from replwire.codec.serve import Replay, Request, Server, ServeSettings, Source
from replwire.codec.testing.workloads import generate

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "serve.json"


def replay_rate(source: Source, options: dict[str, str]) -> tuple[int, float]:
    request = Request.from_options({**options, "publication_names": "pub"}, server_version=source.server_version)
    started = time.perf_counter()
    count = sum(1 for _ in Replay(source, request).messages())
    return count, count / (time.perf_counter() - started)


def psycopg2_rate(source: Source, count: int) -> float:
    import psycopg2
    import psycopg2.extras

    with Server(source, settings=ServeSettings(source.server_version)) as server:
        factory = psycopg2.extras.LogicalReplicationConnection
        conn = psycopg2.connect(server.address.conninfo(), connection_factory=factory)
        try:
            cur = conn.cursor()
            started = time.perf_counter()
            cur.start_replication(slot_name="bench", decode=False,
                                  options={"proto_version": "4", "streaming": "on", "publication_names": "pub"})
            received = 0
            while received < count:
                message = cur.read_message()
                if message is None:
                    select.select([cur], [], [], 1.0)
                    continue
                received += 1
            return received / (time.perf_counter() - started)
        finally:
            conn.close()


def as_results(rates: list[tuple[str, float]], messages: int, transactions: int, loads: list[float]) -> dict[str, Any]:
    """The measurements as a generic results file (:func:`bench.report.generic`)."""
    from bench.measure import machine

    measured_on = machine()
    return {
        "machine": measured_on, "date": measured_on["date"],
        "columns": ["run", "messages/s"],
        "rows": [[name, round(rate)] for name, rate in rates],
        "notes": [f"{messages:,} messages in {transactions:,} generated transactions (plain and streamed, "
                  "rolled-back subtransactions, unchanged TOAST)",
                  f"load average {loads[0]:.1f} at the start, {loads[1]:.1f} at the end ({os.cpu_count()} cores, "
                  "shared): compare the rows within the run"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS, help="the results file (default %(default)s)")
    args = parser.parse_args()
    stream = generate(args.transactions, args.seed)
    source = Source.from_messages(stream.messages, proto_version=stream.proto_version, options=stream.options)
    load_start = os.getloadavg()[0]
    print(f"{len(stream.messages)} messages in {args.transactions} generated transactions; "
          f"load average {load_start:.1f} on {os.cpu_count()} cores")
    rates = []
    count, rate = replay_rate(source, {"proto_version": "4", "streaming": "on"})
    rates.append(("replay as captured (protocol 4, streaming on)", rate))
    _, rate = replay_rate(source, {"proto_version": "1"})
    rates.append(("replay reassembled for a client without streaming (protocol 1)", rate))
    rates.append(("served to psycopg2 over loopback (protocol 4, streaming on)", psycopg2_rate(source, count)))
    for name, rate in rates:
        print(f"{name}: {rate:,.0f} msg/s")
    load_end = os.getloadavg()[0]
    print(f"load average after: {load_end:.1f}")
    # the machine (and the commit) read before the file is opened: opening it makes the checkout dirty
    results = as_results(rates, count, args.transactions, [load_start, load_end])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1)
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
