"""Fixtures for the admin API tests: a real ``tidegate serve`` subprocess (module-wide,
for client-only tests) and an in-process gateway (``Node``: in-memory segment store and
the real controller) for tests that also look at streams, segments and the index.
Clients are real (kafka-python, confluent-kafka, kcat); against the in-process gateway
they run in a worker thread so the event loop keeps serving."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tidegate.protocol  # noqa: F401  (loads kafka-python's schema modules with its warning silenced)

from tests.clients.server import Tidegate
from tests.gateway.conftest import node  # noqa: F401  (the in-process gateway fixture)


@pytest.fixture(scope="module")
def tidegate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tidegate]:
    base = tmp_path_factory.mktemp("tidegate")
    server = Tidegate(base / "data", base / "tidegate.log")
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def rest_server(tmp_path: Path) -> Iterator[Tidegate]:
    """A ``tidegate serve`` of this test alone, with its admin REST API."""
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", rest=True)
    server.start()
    try:
        yield server
    finally:
        server.close()
