from collections.abc import Iterator
from pathlib import Path

import pytest
import tidegate.protocol  # noqa: F401  (loads kafka-python's schema modules with its warning silenced)

from tests.clients.server import Tidegate

#: Short timeouts so the coordinator's timeout abort shows within a test.
CONFIG = """
"transaction.abort.timed.out.transaction.cleanup.interval.ms" = 200
"""


@pytest.fixture
def tidegate(tmp_path: Path) -> Iterator[Tidegate]:
    config = tmp_path / "tidegate.toml"
    config.write_text(CONFIG)
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config=config)
    server.start()
    try:
        yield server
    finally:
        server.close()
