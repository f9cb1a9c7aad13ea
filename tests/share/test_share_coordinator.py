"""The share coordinator with time passed in: assignments, a member's session timeout
releasing its records, leaving, and the state reloaded from its table segment."""

from __future__ import annotations

from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.share.config import ShareConfig
from tidegate.gateway.share.coordinator import ShareCoordinator
from tidegate.gateway.share.partition import AckType, Acquired
from tidegate.protocol.errors import ErrorCode as E


def _counts(topic: str) -> int | None:
    return {"t": 2}.get(topic)


async def test_session_timeout_releases_and_state_reloads() -> None:
    store = InMemorySegmentStore()
    await store.start()
    now = [0]
    config = ShareConfig(session_timeout_ms=1_000, record_lock_duration_ms=60_000)
    share = ShareCoordinator(store, config, clock_ms=lambda: now[0])
    await share.start()
    try:
        await share.set_group_configs("g", {"share.auto.offset.reset": "earliest"})
        a = share.heartbeat("g", "a", 0, None, ["t", "missing"], "c", "/h", _counts)
        b = share.heartbeat("g", "b", 0, None, ["t"], "c", "/h", _counts)
        assert a.error == E.NONE and a.assignment == {"t": (0, 1)}
        assert b.assignment == {"t": (0, 1)}, "every member gets every partition"
        sp = share.share_partition("g", "t", 0, 0, 10)
        assert sp.acquire("a", 0, 9, 4, now[0]) == [Acquired(0, 3, 1)]
        sp.acknowledge("a", 0, 0, [AckType.ACCEPT])
        await share.persist("g", [("t", 0)])
        now[0] = 800
        assert share.heartbeat("g", "b", b.member_epoch, None, None, "c", "/h", _counts).error == 0
        now[0] = 1_500
        group = share.describe("g")
        assert group is not None and sorted(group.members) == ["b"], "a timed out"
        assert sp.acquire("b", 0, 9, 10, now[0]) == [Acquired(1, 3, 2), Acquired(4, 9, 1)]
        left = share.heartbeat("g", "b", -1, None, None, "c", "/h", _counts)
        assert left.member_epoch == -1 and not share.has_members("g")
    finally:
        await share.close()
    again = ShareCoordinator(store, config, clock_ms=lambda: now[0])
    await again.start()
    try:
        sp = again.share_partition("g", "t", 0, 0, 10)
        assert sp.start_offset == 1, "offset 0 was accepted and stored"
        assert sp.acquire("c", 0, 9, 10, now[0])[0].first_offset == 1
        assert again.heartbeat("g", "x", 4, None, None, "c", "/h", _counts).error == E.UNKNOWN_MEMBER_ID
    finally:
        await again.close()
        await store.close()
