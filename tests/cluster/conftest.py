from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.zk import ZooKeeperServer
from tests.java.conftest import java  # noqa: F401 - the compiled Java clients, a fixture


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path / "zk")
    server.start()
    try:
        yield server
    finally:
        server.close()

