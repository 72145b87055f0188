"""``apply --format iceberg``: a real server's changes, captured in three segments (:mod:`tests.spark.lakehouse`),
applied segment by segment into Iceberg tables, which -- read back with ``pyiceberg``, not with replwire --
equal ``SELECT *`` on the server after each; a replayed run commits nothing; the tables of another stream,
or of another writer, are refused.  PostgreSQL 18's binary protocol 4, streamed, only: the Delta tests run
the workload on PostgreSQL 15's text protocol 1 as well, through the same increment.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.server
pytest.importorskip("pyspark")
pytest.importorskip("pyiceberg")

from tests.spark.lakehouse import QUERIES, arrow_rows, captured_segments, write_segment  # noqa: E402
from tests.spark.test_spark import fresh_database, peek  # noqa: E402


def open_catalog(out):
    """The catalog ``apply`` made in ``out`` by default, opened as a user of pyiceberg would."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("replwire", uri=f"sqlite:///{out}/catalog.db", warehouse=f"file://{out}")


def assert_equal(out, tables):
    catalog = open_catalog(out)
    for table, (names, expected) in tables.items():
        got = arrow_rows(catalog.load_table(("public", table)).scan().to_arrow(), names)
        assert got == expected, f"{table}: {sum((got - expected).values())} rows too many, " \
                                f"{sum((expected - got).values())} missing"


def snapshots(out):
    """Per table: its snapshots, and the positions its snapshots' summaries record (in commit order)."""
    catalog = open_catalog(out)
    found = {}
    for table in QUERIES:
        metadata = catalog.load_table(("public", table)).metadata
        positions = [s.summary.additional_properties.get("replwire.position") for s in metadata.snapshots]
        found[table] = len(metadata.snapshots), [p for i, p in enumerate(positions) if p and p not in positions[:i]]
    return found


def test_iceberg_apply_segment_by_segment_equals_the_server(spark, pg18, tmp_path):
    from replwire.spark import jobs

    tag = "iceberg_18"
    fresh_database(pg18, tag)
    out = str(tmp_path / "lake")
    options = {"binary": "true", "streaming": "parallel"}
    with pg18.connect(dbname=tag, autocommit=True) as conn:
        conn.execute("SET logical_decoding_work_mem = '64kB'")  # the big insert is streamed
        hows = []
        for paths, tables in captured_segments(conn, tag, tmp_path, 4, options):
            result = jobs.apply(spark, paths, out, format="iceberg", part_bytes=256 << 10)
            assert_equal(out, tables)
            hows.append({table: done.how for table, done in result.applied.items()})
            assert result.rows == {f"public.{t}": sum(rows.values()) for t, (_, rows) in tables.items()}
            before = snapshots(out)
            again = jobs.apply(spark, paths, out, format="iceberg")  # the same inputs again: nothing to do
            assert {done.how for done in again.applied.values()} == {"none"}
            assert snapshots(out) == before  # not one snapshot more
            assert_equal(out, tables)
        # another server's stream into the same tables: refused before anything is written
        rows = peek(conn, f"slot_{tag}", 4, {"publication_names": f"pub_{tag}", **options})
        foreign = write_segment(tmp_path / "other.rwc", rows, 4, options, "7000000000000000002")
        with pytest.raises(ValueError, match="holds the changes of another stream"):
            jobs.apply(spark, [foreign], out, format="iceberg")
        assert snapshots(out) == before
    assert hows[0] == {"public.orders": "create", "public.pairs": "create", "public.trunc": "create",
                       "public.logs": "create"}
    assert hows[1] == {"public.orders": "merge", "public.pairs": "rewrite", "public.trunc": "rewrite",
                       "public.logs": "append"}
    # a widened type and a dropped column are changed in place: the table is merged into, not rewritten
    assert hows[2] == {"public.orders": "merge", "public.pairs": "rewrite", "public.trunc": "merge",
                       "public.logs": "append"}
    for table, (_, positions) in snapshots(out).items():
        assert len(positions) == 3, (table, positions)
    orders = open_catalog(out).load_table(("public", "orders")).schema()
    assert [f.name for f in orders.fields][:8] == ["id", "qty", "ts", "doc", "raw", "tags", "body", "extra"]
    assert str(orders.find_field("qty").field_type) == "long"


def test_an_iceberg_table_of_another_writer_or_source_table_is_refused(tmp_path):
    import pyarrow as pa

    from replwire.spark import iceberg

    catalog = iceberg.catalog(str(tmp_path))
    catalog.create_namespace("lake")
    rows = pa.table({"id": pa.array([1], pa.int32())})
    catalog.create_table(("lake", "t"), schema=rows.schema).append(rows)
    stream = "replwire:1:db:slot"
    assert iceberg.IcebergTarget(catalog, ("lake", "t"), stream, "public.t").foreign() \
        == "lake.t is an Iceberg table that replwire apply did not write"
    assert iceberg.IcebergTarget(catalog, ("lake", "new"), stream, "public.new").foreign() is None
    # --namespace lake: sales.orders after public.orders would be lake.orders too
    catalog.create_table(("lake", "orders"), schema=rows.schema).append(rows, snapshot_properties={
        "replwire.stream": stream, "replwire.position": "0/10", "replwire.table": "public.orders"})
    assert iceberg.IcebergTarget(catalog, ("lake", "orders"), stream, "public.orders").position == 0x10
    assert iceberg.IcebergTarget(catalog, ("lake", "orders"), stream, "sales.orders").foreign() \
        == "lake.orders holds the changes of the source table public.orders, not of sales.orders"


def _changes(rows, fields, key):
    """Change rows of a table of ``fields`` (Arrow fields) as :func:`replwire.spark.dataset.read_changes` lays
    them out: ``rows`` are ``(op, commit_lsn, *values)``."""
    import pyarrow as pa

    count = len(rows)
    return pa.table([pa.array([r[0] for r in rows]), pa.array([r[1] for r in rows], pa.int64()),
                     pa.array(range(count), pa.int64()),
                     *[pa.array([r[2 + i] for r in rows], f.type) for i, f in enumerate(fields)],
                     pa.nulls(count, pa.struct([f for f in fields if f.name in key])),
                     pa.nulls(count, pa.list_(pa.string())), pa.nulls(count, pa.map_(pa.string(), pa.string()))],
                    names=[f"f{i}" for i in range(len(fields) + 6)])


def _apply(catalog, rows, fields, key):
    """Apply change ``rows`` (see :func:`_changes`) to the table ``public.t``: how, the type of its second
    column, its rows."""
    import pyarrow as pa

    from replwire.spark import iceberg

    target = iceberg.IcebergTarget(catalog, ("public", "t"), "replwire:1:db:slot", "public.t")
    schema = pa.schema([*fields, pa.field("_unrepresentable", pa.map_(pa.string(), pa.string())),
                        pa.field("_unchanged_toast", pa.list_(pa.string()))])
    names = [f.name for f in fields]
    done = iceberg.apply_table(_changes(rows, fields, key), target, names, key, True, [], schema)
    table = catalog.load_table(("public", "t"))
    return done.how, str(table.schema().find_field(names[1]).field_type), \
        sorted(tuple(row.values()) for row in table.scan().to_arrow().select(names).to_pylist())


def test_iceberg_widens_a_type_in_place_and_rewrites_for_another_change(tmp_path):
    """int to bigint: promoted in the merge's commit; bigint to text: the column dropped and added again, the
    table rewritten; the same changes again: nothing."""
    import pyarrow as pa

    from replwire.spark import iceberg

    catalog = iceberg.catalog(str(tmp_path))

    def apply(rows, kind):
        return _apply(catalog, rows, [pa.field("id", pa.int32()), pa.field("n", kind)], ["id"])

    first = [("insert", 100, 1, 10), ("insert", 100, 2, 20)]
    assert apply(first, pa.int32())[:2] == ("create", "int")
    widened = [*first, ("update", 200, 1, 11)]
    assert apply(widened, pa.int64()) == ("merge", "long", [(1, 11), (2, 20)])
    changed = [(op, lsn, key, str(n)) for op, lsn, key, n in [*widened, ("update", 300, 2, "x")]]
    assert apply(changed, pa.string()) == ("rewrite", "string", [(1, "11"), (2, "x")])
    assert apply(changed, pa.string())[0] == "none"


def test_iceberg_merges_by_a_key_of_two_columns(tmp_path):
    """The merge's filter catches (1, "y") and (2, "x") with the keys (1, "x") and (2, "y"): they stay."""
    import pyarrow as pa

    from replwire.spark import iceberg

    catalog = iceberg.catalog(str(tmp_path))
    fields = [pa.field("a", pa.int32()), pa.field("b", pa.string()), pa.field("v", pa.int32())]
    first = [("insert", 100, a, b, 0) for a in (1, 2, 3) for b in "xy"]
    assert _apply(catalog, first, fields, ["a", "b"])[0] == "create"
    then = [*first, ("update", 200, 1, "x", 5), ("delete", 200, 2, "y", None)]
    assert _apply(catalog, then, fields, ["a", "b"]) == (
        "merge", "string", [(1, "x", 5), (1, "y", 0), (2, "x", 0), (3, "x", 0), (3, "y", 0)])


def test_an_iceberg_commit_that_fails_leaves_the_table_as_it_was(tmp_path, monkeypatch):
    """The catalog commit of a merge that also widens a column fails (as a run killed there would leave
    it, its data files written): the table keeps its schema, rows and position; run again, it ends right."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from replwire.spark import iceberg

    catalog = iceberg.catalog(str(tmp_path))
    first = [("insert", 100, 1, 10), ("insert", 100, 2, 20)]
    _apply(catalog, first, [pa.field("id", pa.int32()), pa.field("n", pa.int32())], ["id"])
    before = catalog.load_table(("public", "t")).metadata

    def killed(*args, **kwargs):
        raise OSError("killed")

    then = [*first, ("update", 200, 1, 11), ("delete", 200, 2, None), ("insert", 200, 3, 30)]
    fields = [pa.field("id", pa.int32()), pa.field("n", pa.int64())]
    with monkeypatch.context() as patch:
        patch.setattr(SqlCatalog, "commit_table", killed)
        with pytest.raises(OSError, match="killed"):
            _apply(catalog, then, fields, ["id"])
    assert catalog.load_table(("public", "t")).metadata == before
    assert iceberg.IcebergTarget(catalog, ("public", "t"), "replwire:1:db:slot", "public.t").position == 100
    assert _apply(catalog, then, fields, ["id"]) == ("merge", "long", [(1, 11), (3, 30)])
