"""``replwire decode --table / --exclude-table`` on a real capture of several tables in two schemas: the
output is the unfiltered output's subset the test computes itself, on the compiled and the Python path
alike."""

from __future__ import annotations

import fnmatch
import json
import os

import pytest

from tests.cli.test_cli_capture import REPLWIRE, replwire

pytestmark = pytest.mark.server

TABLES = ["public.orders", "public.items", "shop.orders", "shop.items", "shop.Mixed"]


@pytest.fixture(scope="module")
def capture(pg18, tmp_path_factory):
    out = tmp_path_factory.mktemp("tables") / "tables.rwcap"
    with pg18.connect() as conn:
        conn.execute("CREATE SCHEMA shop")
        for name in TABLES:
            schema, table = name.split(".")
            conn.execute(f'CREATE TABLE {schema}."{table}" (id int PRIMARY KEY, v text)')
        conn.execute("CREATE PUBLICATION tables_pub FOR TABLE " + ", ".join(
            f'{n.split(".")[0]}."{n.split(".")[1]}"' for n in TABLES))
        conn.execute("SELECT pg_create_logical_replication_slot('tables_slot', 'pgoutput')")
        for i in range(40):  # transactions of one table, of several, of excluded ones only
            with conn.transaction():
                for j, name in enumerate(TABLES):
                    if (i + j) % 3:
                        schema, table = name.split(".")
                        conn.execute(f'INSERT INTO {schema}."{table}" VALUES (%s, %s)', (i, f"{name} {i}"))
                if i % 5 == 0:
                    conn.execute("SELECT pg_logical_emit_message(true, 'p', 'in a transaction')")
            conn.execute('UPDATE shop."Mixed" SET v = v || %s WHERE id = %s', ("!", i))
            conn.execute("DELETE FROM public.items WHERE id = %s", (i,))
        with conn.transaction():  # a large one
            conn.execute("INSERT INTO shop.orders SELECT g, 'big' FROM generate_series(1000, 4000) g")
            conn.execute("INSERT INTO public.items SELECT g, 'big' FROM generate_series(1000, 3000) g")
        conn.execute("TRUNCATE public.orders, shop.items, shop.\"Mixed\"")
        conn.execute("TRUNCATE public.items")
        conn.execute("SELECT pg_logical_emit_message(false, 'p', 'alone')")
    result = replwire("capture", "--dsn", pg18.dsn, "--slot", "tables_slot", "--publication", "tables_pub",
                      "--no-create-slot", "--messages", "--out", out, "--idle-exit", "1", "--sync-interval", "0.1")
    assert result.returncode == 0, result.stderr
    return out


def decode(path, *args, impl="c", expect=0):
    result = replwire("decode", path, *args, env={**os.environ, "REPLWIRE_IMPL": impl})
    assert result.returncode == expect, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()], result.stderr


def normal(events):
    """Lines without Debezium's processing times (now, when the event was made)."""
    def one(event):
        if not event:
            return event
        event = {k: v for k, v in event.items() if k not in ("ts_ms", "ts_us", "ts_ns")}
        if event.get("op") == "m" and event["source"]["txId"] is None:  # (a lone message: no commit time)
            event["source"] = {k: v for k, v in event["source"].items() if k not in ("ts_ms", "ts_us", "ts_ns")}
        return event
    return list(map(one, events))


def matches(name, include, exclude):
    """The rule, as the test reads the docs (fnmatch per part; no dot: any schema)."""
    def one(pattern):
        schema, _, table = pattern.rpartition(".")
        s, t = name.split(".", 1)
        return fnmatch.fnmatchcase(s, schema or "*") and fnmatch.fnmatchcase(t, table)
    return (not include or any(map(one, include))) and not any(map(one, exclude))


def expected(changes, include, exclude):
    out = []
    for change in changes:
        if change["op"] == "truncate":  # a line per table, each naming the tables truncated (those kept)
            kept = [r for r in change["relations"] if matches(r, include, exclude)]
            if matches(f"{change['schema']}.{change['table']}", include, exclude):
                out.append({**change, "relations": kept})
        elif change["op"] == "message" or matches(f"{change['schema']}.{change['table']}", include, exclude):
            out.append(change)
    return out


CASES = [(["shop.*"], []), ([], ["*.items"]), (["orders", "M?xed"], ["public.*"]), (["nothing.here"], [])]


@pytest.mark.parametrize("output_format", ["jsonl", "debezium"])
def test_filtered_output_is_the_matching_subset(capture, output_format):
    every, _ = decode(capture, "--format", output_format)
    assert {c["op"] for c in every} >= {"insert", "update", "delete", "truncate", "message"} \
        if output_format == "jsonl" else every
    python_every, _ = decode(capture, "--format", output_format, impl="python")
    assert normal(python_every) == normal(every)
    for include, exclude in CASES if output_format == "jsonl" else CASES[1:3]:
        args = [x for p in include for x in ("--table", p)] + [x for p in exclude for x in ("--exclude-table", p)]
        compiled, summary = decode(capture, "--format", output_format, *args)
        python, _ = decode(capture, "--format", output_format, *args, impl="python")
        if output_format == "jsonl":
            want = expected(every, include, exclude)
            assert compiled == want, (include, exclude)
            transactions = len({c["commit_lsn"] for c in want if c.get("xid") is not None})
            lone = sum(c.get("xid") is None for c in want)
            # a truncate is one change, printed as a line per table
            count = len(want) - sum(c["op"] == "truncate" for c in want) + len(
                {c["lsn"] for c in want if c["op"] == "truncate"})
            assert summary.strip().endswith(f"{transactions} transaction{'s' * (transactions != 1)}, "
                                            f"{count} change{'s' * (count != 1)} from 1 file"), summary
            assert lone == 1
        else:  # Debezium's events: the unfiltered ones of the matching tables
            def rows(events):
                return [(e["source"]["schema"], e["source"]["table"], e["op"], e["before"], e["after"])
                        for e in events if e and e.get("op") in ("c", "u", "d")]
            assert rows(compiled) == [r for r in rows(every) if matches(f"{r[0]}.{r[1]}", include, exclude)]
        assert normal(python) == normal(compiled), (include, exclude)


def test_table_output_and_bad_patterns(capture):
    table = replwire("decode", capture, "--format", "table", "--table", "shop.orders")
    assert table.returncode == 0
    rows = table.stdout.splitlines()[1:]
    assert rows and all(" shop.orders " in r or r.startswith("message ") for r in rows)
    bad = replwire("decode", capture, "--table", '"open')
    assert bad.returncode == 2 and "quote is not closed" in bad.stderr
    assert REPLWIRE
