"""Throughput of ``replwire serve``: messages per second re-encoded for a client, and received by a psycopg2
consumer over a loopback socket.

Strategy: a generated stream (:func:`replwire.codec.testing.generate.generate`: plain and streamed
transactions, rolled-back subtransactions, unchanged TOAST) is served three ways and timed: the sans-I/O
replay alone, as captured (protocol 4, streaming on) and reassembled (protocol 1, no streaming); then
through the server to psycopg2's ``LogicalReplicationConnection`` (protocol 4, streaming on).  The load
average is printed beside the numbers: compare the ratios within one run.

    python -m bench.serve [--transactions 3000] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import select
import time

from replwire.codec.serve import Replay, Request, Server, ServeSettings, Source
from replwire.codec.testing.generate import generate


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    stream = generate(args.transactions, args.seed)
    source = Source.from_messages(stream.messages, proto_version=stream.proto_version, options=stream.options)
    print(f"{len(stream.messages)} messages in {args.transactions} generated transactions; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    count, rate = replay_rate(source, {"proto_version": "4", "streaming": "on"})
    print(f"replay as captured (proto 4, streaming on): {count} messages, {rate:,.0f} msg/s")
    _, rate = replay_rate(source, {"proto_version": "1"})
    print(f"replay reassembled (proto 1): {rate:,.0f} msg/s")
    print(f"served to psycopg2 (proto 4, streaming on): {psycopg2_rate(source, count):,.0f} msg/s")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
