"""Fixtures of the capture tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.conftest import _server

if TYPE_CHECKING:
    from replwire.codec.testing.localserver import PgServer


@pytest.fixture(scope="module")
def own_server() -> Iterator[PgServer]:
    """A PostgreSQL 18 server of the test module's own, for tests that restart it or change its settings."""
    yield from _server(18)
