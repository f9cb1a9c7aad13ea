from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.zk import ZooKeeperServer


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path / "zk")
    server.start()
    try:
        yield server
    finally:
        server.close()


from tests.java.conftest import java  # noqa: E402,F401 - the compiled Java clients, for cluster tests
