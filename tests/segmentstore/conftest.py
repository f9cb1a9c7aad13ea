from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tidegate.core.segmentstore.service import StreamSegmentStore

from tests.segmentstore.helpers import Backings


@pytest.fixture
def backings() -> Backings:
    return Backings()


@pytest.fixture
async def store(backings: Backings, tmp_path: Path) -> AsyncIterator[StreamSegmentStore]:
    s = backings.store(tmp_path)
    await s.start()
    yield s
    await s.close()
