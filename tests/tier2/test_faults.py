"""``FaultyStorage`` is reproducible and a failed call has no effect."""

from __future__ import annotations

from tidegate.tier2.api import StorageError
from tidegate.tier2.faults import FaultyStorage
from tidegate.tier2.inmemory import InMemoryStorage


def _run(seed: int) -> tuple[list[int], bytes]:
    inner = InMemoryStorage()
    inner.create("s")
    faulty = FaultyStorage(inner, seed=seed, error_rate=0.3)
    failed: list[int] = []
    for i in range(200):
        try:
            faulty.write("s", inner.get_info("s").length, bytes([i]))
        except StorageError:
            failed.append(i)
    return failed, inner.read("s", 0, inner.get_info("s").length)


def test_seeded_and_failed_writes_have_no_effect() -> None:
    failed, data = _run(7)
    assert _run(7) == (failed, data)
    assert 20 < len(failed) < 100
    assert data == bytes(i for i in range(200) if i not in failed)


def test_lost_reply_means_the_call_took_effect() -> None:
    inner = InMemoryStorage()
    inner.create("s")
    faulty = FaultyStorage(inner, seed=1, error_rate=0.0, lost_reply_rate=1.0)
    try:
        faulty.write("s", 0, b"abc")
    except StorageError:
        pass
    assert inner.get_info("s").length == 3
