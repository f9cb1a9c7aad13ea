"""What a classic group may hold, against a real ``tidegate serve`` over raw sockets
(issue 35, item 7): oversized JoinGroup metadata is refused at once, not held until the
session times out; a group whose members' metadata would pass its bound refuses a new
member; a SyncGroup whose assignments cannot be stored fails for good
(UNKNOWN_SERVER_ERROR, as Kafka), not with COORDINATOR_NOT_AVAILABLE clients retry
forever."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.consumer import (
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from tests.clients.requests import Conn
from tests.clients.server import Tidegate

KiB, MiB = 1024, 1024 * 1024
NONE, UNKNOWN_SERVER_ERROR, INVALID_REQUEST = 0, -1, 42
MEMBER_ID_REQUIRED, GROUP_MAX_SIZE_REACHED = 79, 81
#: The group's bound in this server (the member's stays at its default, 256 KiB).
GROUP_BYTES_MAX = 300 * KiB


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tidegate]:
    tmp = tmp_path_factory.mktemp("groups")
    config = tmp / "tidegate.toml"
    config.write_text(
        "[groups]\ninitial_rebalance_delay_ms = 0\n"
        f"group_metadata_bytes_max = {GROUP_BYTES_MAX}\n"
    )
    s = Tidegate(tmp / "data", tmp / "tidegate.log", config)
    s.start()
    try:
        yield s
    finally:
        s.close()


def _join(conn: Conn, group: str, metadata: bytes, member_id: str = "") -> Any:
    return conn.call(JoinGroupRequest(
        group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
        member_id=member_id, group_instance_id=None, protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=metadata)],
    ), 5, JoinGroupResponse)


def _joined(conn: Conn, group: str, metadata: bytes) -> Any:
    """A member that joined (v5: a first join hands out the member id)."""
    first = _join(conn, group, metadata)
    assert first.error_code == MEMBER_ID_REQUIRED, first
    answer = _join(conn, group, metadata, first.member_id)
    assert answer.error_code == NONE, answer
    return answer


def test_oversized_join_metadata_is_refused_at_once(server: Tidegate) -> None:
    conn = Conn(server.port)
    try:
        for i in range(4):
            answer = _join(conn, f"big-{i}", b"m" * (2 * MiB))
            assert answer.error_code == INVALID_REQUEST, answer
        # Within the member's bound, but past the group's with the first member's.
        _joined(conn, "full", b"a" * (200 * KiB))
        assert _join(conn, "full", b"b" * (200 * KiB)).error_code == GROUP_MAX_SIZE_REACHED
    finally:
        conn.close()


def test_an_assignment_too_large_to_store_fails_for_good(server: Tidegate) -> None:
    conn = Conn(server.port)
    try:
        joined = _joined(conn, "assign", b"x" * 100)
        assert joined.leader == joined.member_id
        answer = conn.call(SyncGroupRequest(
            group_id="assign", generation_id=joined.generation_id, member_id=joined.member_id,
            group_instance_id=None, assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                member_id=joined.member_id, assignment=b"y" * (2 * MiB))],
        ), 3, SyncGroupResponse)
        assert answer.error_code == UNKNOWN_SERVER_ERROR, answer
        # A member that rejoins with a small assignment is served again.
        joined = _join(conn, "assign", b"x" * 100, joined.member_id)
        assert joined.error_code == NONE, joined
        answer = conn.call(SyncGroupRequest(
            group_id="assign", generation_id=joined.generation_id, member_id=joined.member_id,
            group_instance_id=None, assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                member_id=joined.member_id, assignment=b"small")],
        ), 3, SyncGroupResponse)
        assert answer.error_code == NONE and answer.assignment == b"small", answer
    finally:
        conn.close()
    assert "failed (" not in server.tail(2000)
