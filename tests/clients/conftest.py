from collections.abc import Iterator
from pathlib import Path

import pytest
import tidegate.protocol  # noqa: F401  (loads kafka-python's schema modules with its warning silenced)

from tests.clients.server import Tidegate


@pytest.fixture
def tidegate(tmp_path: Path) -> Iterator[Tidegate]:
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log")
    server.start()
    try:
        yield server
    finally:
        server.close()
