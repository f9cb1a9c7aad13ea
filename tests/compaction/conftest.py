"""A real ``tidegate serve`` for the compaction tests, with the controller's retention and
the cleaner running every fraction of a second so a test sees several passes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.server import Tidegate
from tests.gateway.conftest import node  # noqa: F401  (the in-process gateway fixture)
from tests.java.conftest import java  # noqa: F401  (kafka-clients, compiled once)

#: Short periods: the cleaner, retention and log-start following.
SERVE_CONFIG = """
"log.cleaner.backoff.ms" = 200

[controller]
retention_period_ms = 200
"""


def serve(base: Path, extra: str = "") -> Tidegate:
    config = base / "tidegate.toml"
    config.write_text(extra + SERVE_CONFIG)  # top-level keys before the tables
    return Tidegate(base / "data", base / "tidegate.log", config=config)


@pytest.fixture(scope="module")
def tidegate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tidegate]:
    server = serve(tmp_path_factory.mktemp("tidegate"))
    server.start()
    try:
        yield server
    finally:
        server.close()

