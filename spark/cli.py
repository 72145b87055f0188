"""``replwire spark``: the pipeline jobs from the command line (``changes`` and ``apply``).

Both check the output directory, then start a Spark session (``--master``, default ``local[*]``; under
``spark-submit`` the session it configured is used; see :func:`_session`), show the first pass's progress
with ``rich`` and Spark's own progress bar for the decoding (on a terminal), and end with a summary table.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
from typing import Any

import click

from replwire.codec.errors import install_hint
from replwire.codec.scalars import LSN

__all__ = ["spark"]

_INPUTS = click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False,
                                                                            path_type=pathlib.Path))


def _options(function: Any) -> Any:
    for option in reversed([
        click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=pathlib.Path),
                     help="Output directory: a dataset (or Delta table) per source table; Iceberg's "
                          "warehouse."),
        click.option("--proto-version", type=click.IntRange(1, 4),
                     help="Protocol version of COPY-CSV inputs (capture files record their own)."),
        click.option("--encoding",
                     help="Client encoding of COPY-CSV inputs (default UTF8; capture files record their own); "
                          "for inputs from a SQL_ASCII database, which declares none, the encoding their bytes "
                          "are in (UTF8, or LATIN1, which keeps every byte): needed for them."),
        click.option("--master", default=None,
                     help="Spark master (default: local[*], or what spark-submit configured)."),
        click.option("--partition-mb", type=click.IntRange(1), default=None,
                     help="About how many MB of input one Spark task decodes (default: the input spread "
                          "evenly over the cores, at most 128 MB a task)."),
        click.option("--overwrite", is_flag=True, help="Replace the output directory if it is not empty."),
        click.option("--table", "include", multiple=True, metavar="GLOB",
                     help="Write only the changes of tables matching GLOB, as replwire decode --table keeps them "
                          "(schema.table; repeatable; e.g. 'public.*', '*.orders'; a GLOB without a dot is any "
                          "schema's table).  Logical messages are kept."),
        click.option("--exclude-table", "exclude", multiple=True, metavar="GLOB",
                     help="Leave out the changes of tables matching GLOB (as --table; repeatable; wins over "
                          "--table)."),
    ]):
        function = option(function)
    return function


def _table_filter(include: tuple[str, ...], exclude: tuple[str, ...]) -> Any:
    """The :class:`~replwire.codec.stream.tables.TableFilter` of ``--table`` and ``--exclude-table`` (``None``
    when neither is given); a usage error for a GLOB that does not parse."""
    from replwire.codec.stream.tables import TableFilter

    try:
        tables = TableFilter(include, exclude)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--table/--exclude-table") from None
    return tables or None


@click.group("spark")
def spark() -> None:
    """The data pipeline on Apache Spark: captured change streams into per-table Parquet."""


def _session(master: str | None) -> Any:
    """The Spark session: ``master`` (default ``local[*]``), or under ``spark-submit`` the one it configured.

    A local master's Python workers run this interpreter (``PYSPARK_PYTHON`` unless set): Spark would start
    the ``python3`` on PATH, which need not have replwire (cron, pipx, a script's venv).  A cluster's get
    replwire shipped (:func:`replwire.spark.register`).  Spark's console progress bar is on only when stderr
    is a terminal, and outside ``spark-submit`` Spark logs errors only (spark/log4j2.properties, unless
    ``SPARK_SUBMIT_OPTS`` or ``$SPARK_CONF_DIR/log4j2.properties`` configure log4j2)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        from pyspark.sql import SparkSession
    except ImportError as error:
        raise click.ClickException(f"the Spark pipeline needs PySpark: {install_hint('spark')}") from error
    from replwire.spark import register

    submitted = bool(os.environ.get("SPARK_ENV_LOADED"))
    if master is None and not submitted:
        master = "local[*]"
    if master is not None and master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    options = os.environ.get("SPARK_SUBMIT_OPTS", "")
    conf = os.environ.get("SPARK_CONF_DIR")
    if not (submitted or "log4j2.configurationFile" in options
            or conf and os.path.exists(os.path.join(conf, "log4j2.properties"))):
        quiet = pathlib.Path(__file__).with_name("log4j2.properties")
        os.environ["SPARK_SUBMIT_OPTS"] = f"{options} -Dlog4j2.configurationFile={quiet.as_uri()}".strip()
    builder = SparkSession.builder.appName("replwire").config("spark.ui.showConsoleProgress",
                                                              str(sys.stderr.isatty()).lower())
    if master is not None:
        builder = builder.master(master)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def _run(job: str, inputs: tuple[pathlib.Path, ...], out: pathlib.Path, proto_version: int | None,
         encoding: str | None, master: str | None, partition_mb: int | None, overwrite: bool,
         tables: Any = None, form: str = "parquet", lakehouse: dict[str, Any] | None = None) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
    from rich.table import Table

    from replwire.codec.io.capture_file import CaptureFileError
    from replwire.codec.split import open_inputs
    from replwire.spark import jobs
    from replwire.spark.dataset import check_out
    from replwire.spark.shipping import describe_executors

    console = Console()
    try:  # what the jobs refuse, before Spark starts, which takes seconds
        ordered = [i.path for i in open_inputs(inputs, proto_version, encoding, need_text=True)]
    except CaptureFileError as error:
        raise click.UsageError(str(error)) from None
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--encoding") from None
    if ordered != [os.fspath(p) for p in inputs]:  # (the jobs read them in this order too)
        click.echo(f"note: reading the inputs in stream order (by the positions their records complete): "
                   f"{', '.join(ordered)}", err=True)
    try:
        if form == "parquet":  # (lakehouse tables are brought up to date where they are)
            check_out(str(out), overwrite)
        elif form == "delta":
            from replwire.spark.delta import need_deltalake

            need_deltalake()
        else:
            from replwire.spark.iceberg import need_pyiceberg

            need_pyiceberg()
    except (FileExistsError, ValueError) as error:  # before Spark starts, which takes seconds
        raise click.ClickException(str(error)) from error
    started = time.monotonic()
    session = _session(master)
    with Progress(TextColumn("first pass"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("plan", total=None)

        def report(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        try:
            run = getattr(jobs, job)
            result = run(session, [str(p) for p in inputs], str(out), proto_version=proto_version,
                         encoding=encoding, part_bytes=partition_mb << 20 if partition_mb else None,
                         overwrite=overwrite, progress=report, tables=tables,
                         **({"format": form, **(lakehouse or {})} if job == "apply" else {}))
        except (CaptureFileError, FileExistsError, ValueError) as error:
            raise click.ClickException(str(error)) from error
    elapsed = time.monotonic() - started
    summary = result if job == "changes" else result.changes
    table = Table(title=f"replwire spark {job}: {out}")
    table.add_column("table")
    table.add_column("schema versions", justify="right")
    table.add_column("changes", justify="right")
    if job == "apply":
        table.add_column("rows now", justify="right")
    if form != "parquet":
        table.add_column("applied")
    for name, versions in sorted(summary.rows.items()):
        cells = [name, ", ".join(f"v{v}" for v in sorted(versions)), f"{sum(versions.values()):,}"]
        if job == "apply":
            cells.append(f"{result.rows.get(name, 0):,}")
        if form != "parquet":
            done = result.applied[name]
            cells.append(f"{done.changes:,} changes by {done.how}, to {LSN(done.position)}"
                         if done.how != "none" else f"nothing new past {LSN(done.position)}")
        table.add_row(*cells)
    console.print(table)
    if job == "apply":
        for name, n in sorted(result.rows.items()):
            click.echo(f"{name}: {n} rows")
    for column in summary.unknown_defaults:
        click.echo(f"warning: {column} was added with a default the server wrote into each row: the rows the "
                   "stream has not sent since are null in it (a backfill of the table gives them)", err=True)
    for tail in summary.tails:
        click.echo(f"{'error' if tail in summary.damaged else 'warning'}: {tail}", err=True)
    click.echo(f"{summary.records:,} messages, {summary.transactions:,} transactions, {summary.changes:,} "
               f"changes in {summary.parts} parts; {elapsed:.1f} s")
    if summary.executors:  # those that decoded the parts (local masters: the driver's machine, one)
        click.echo(f"executors: {describe_executors(summary.executors)}")
    session.stop()
    if summary.damaged:  # what was readable is written; the damage inside a file is an error
        sys.exit(1)


@spark.command("changes")
@_INPUTS
@_options
def changes_command(inputs: tuple[pathlib.Path, ...], out: pathlib.Path, proto_version: int | None,
                    encoding: str | None, master: str | None, partition_mb: int | None, overwrite: bool,
                    include: tuple[str, ...], exclude: tuple[str, ...]) -> None:
    """Write the committed changes of INPUTS -- consecutive segments of one stream (capture files or
    COPY-CSV), in any order: they are read in stream order -- as per-table Parquet datasets:
    OUT/<schema>.<table>/v<N>/ (one per table shape), every
    row with its op, schema, table, xid, LSNs and commit time."""
    _run("changes", inputs, out, proto_version, encoding, master, partition_mb, overwrite,
         _table_filter(include, exclude))


@spark.command("apply")
@_INPUTS
@_options
@click.option("--format", "form", type=click.Choice(["parquet", "delta", "iceberg"]), default="parquet",
              show_default=True,
              help="parquet: OUT rewritten from INPUTS.  delta, iceberg: Delta or Iceberg tables brought up "
                   "to date with the changes past the position each holds, exactly once.")
@click.option("--catalog", metavar="URI",
              help="iceberg: the catalog (sqlite:/postgresql: a SQL catalog, http: a REST one; default: "
                   "sqlite:///OUT/catalog.db); OUT is its warehouse.")
@click.option("--namespace", metavar="NS",
              help="iceberg: the namespace of every table (default: the source table's schema: public.orders "
                   "is the Iceberg table public.orders; with NS, NS.orders).")
@click.option("--follow", is_flag=True,
              help="delta, iceberg: keep going while a running capture writes INPUTS, applying what they hold "
                   "past the tables' positions every time they grow, until SIGINT or SIGTERM.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True, metavar="SECONDS",
              help="With --follow: how often to look whether INPUTS have grown.")
def apply_command(inputs: tuple[pathlib.Path, ...], out: pathlib.Path, proto_version: int | None,
                  encoding: str | None, master: str | None, partition_mb: int | None, overwrite: bool,
                  include: tuple[str, ...], exclude: tuple[str, ...], form: str, catalog: str | None,
                  namespace: str | None, follow: bool, interval: float) -> None:
    """Write the current state of every table of INPUTS: OUT/<schema>.<table>/ holds the last committed
    row per key (deletes removed, TRUNCATE clearing, unchanged TOASTed values carried over).

    As Parquet, OUT is written anew, and the per-table changes it came from are kept in OUT/_changes.  As
    Delta or Iceberg tables, each is brought up to date: the changes past the position it holds are applied
    in one commit that records the new position, so running again on the same INPUTS changes nothing, and on
    more segments of the stream applies just the new ones.  Iceberg tables are <schema>.<table> (or
    <NS>.<table>) in the catalog (--catalog, default OUT/catalog.db, named "replwire").

    With --follow, the Delta or Iceberg tables follow a capture that is still being written: a line on
    stderr for each round that applied something; SIGINT or SIGTERM ends it after the round under way (a
    second one at once: killed mid-round, the tables stay as exact, and the next run goes on)."""
    if form != "iceberg" and (catalog is not None or namespace is not None):
        raise click.UsageError("--catalog and --namespace go with --format iceberg")
    if follow:
        if form == "parquet":
            raise click.UsageError("--follow keeps Delta or Iceberg tables up to date: give --format delta or "
                                   "iceberg")
        if overwrite:
            raise click.UsageError("--follow does not go with --overwrite")
        _follow(inputs, out, proto_version, encoding, master, partition_mb, form, catalog, namespace, interval,
                _table_filter(include, exclude))
        return
    _run("apply", inputs, out, proto_version, encoding, master, partition_mb, overwrite,
         _table_filter(include, exclude), form,
         {"catalog": catalog, "namespace": namespace} if form == "iceberg" else None)


def _follow(inputs: tuple[pathlib.Path, ...], out: pathlib.Path, proto_version: int | None, encoding: str | None,
            master: str | None, partition_mb: int | None, form: str, catalog: str | None, namespace: str | None,
            interval: float, tables: Any) -> None:
    """``apply --follow``: :func:`replwire.spark.lakehouse.follow` until a signal."""
    import signal

    from replwire.codec.io.capture_file import CaptureFileError
    from replwire.spark.delta import need_deltalake
    from replwire.spark.iceberg import need_pyiceberg
    from replwire.spark.lakehouse import follow

    try:
        (need_deltalake if form == "delta" else need_pyiceberg)()
    except ValueError as error:
        raise click.ClickException(str(error)) from error
    stop: list[int] = []

    def on_signal(number: int, frame: Any) -> None:
        if stop:  # a second one: now
            raise SystemExit(128 + number)
        stop.append(number)
        click.echo(f"replwire spark apply: {signal.Signals(number).name}: stopping after this round", err=True)

    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, on_signal)
    session = _session(master)
    started = time.monotonic()

    def each(result: Any) -> None:
        done = {table: d for table, d in result.applied.items() if d.how != "none"}
        if not done:
            return
        changes = sum(d.changes for d in done.values())
        upto = LSN(max(d.position for d in done.values()))
        click.echo(f"[{time.monotonic() - started:7.1f} s] {changes:,} changes applied to {len(done)} "
                   f"table{'s' * (len(done) != 1)}, up to {upto} "
                   f"({', '.join(f'{t} {d.how}' for t, d in sorted(done.items()))})", err=True)

    try:
        rounds = follow(session, [str(p) for p in inputs], str(out), format=form, interval=interval,
                             stopping=lambda: bool(stop), each=each, proto_version=proto_version,
                             encoding=encoding, part_bytes=partition_mb << 20 if partition_mb else None,
                             catalog=catalog, namespace=namespace, tables=tables)
    except (CaptureFileError, FileExistsError, ValueError) as error:
        raise click.ClickException(str(error)) from error
    finally:
        session.stop()
    click.echo(f"replwire spark apply: stopped after {time.monotonic() - started:.1f} s; {rounds:,} "
               f"round{'s' * (rounds != 1)} applied changes", err=True)


if __name__ == "__main__":  # spark-submit .../replwire/spark/cli.py apply ...
    spark()
