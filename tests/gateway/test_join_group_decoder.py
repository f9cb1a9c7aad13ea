"""``protocol.join_group``: our JoinGroup request decoder against kafka-python's, and
that it holds the protocol metadata as slices of the frame (issue 35 item 7: the copy
kafka-python's decoder made was not counted by ``queued.max.request.bytes``)."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import JoinGroupRequest
from tidegate.gateway.handlers.join_group import SPEC
from tidegate.protocol.errors import KafkaProtocolError

_Protocol = JoinGroupRequest.JoinGroupRequestProtocol
MiB = 1024 * 1024


def _fields(request: Any) -> tuple[Any, ...]:
    return (
        request.group_id, request.session_timeout_ms, request.rebalance_timeout_ms,
        request.member_id, request.group_instance_id, request.protocol_type,
        [(p.name, None if p.metadata is None else bytes(p.metadata)) for p in request.protocols],
        request.reason,
    )


def _frame(version: int, protocols: list[tuple[str, bytes]], **kw: Any) -> bytearray:
    request = JoinGroupRequest(
        group_id=kw.get("group_id", "g"), session_timeout_ms=kw.get("session_ms", 10_000),
        rebalance_timeout_ms=kw.get("rebalance_ms", 20_000), member_id=kw.get("member_id", ""),
        group_instance_id=kw.get("instance") if version >= 5 else None,
        protocol_type="consumer",
        protocols=[_Protocol(name=n, metadata=m) for n, m in protocols],
        reason=kw.get("reason") if version >= 8 else None,
    )
    return bytearray(b"header" + request.encode(version=version))


@settings(max_examples=200, deadline=None)
@given(
    version=st.integers(0, 9),
    group_id=st.text(max_size=30),
    session_ms=st.integers(-(2**31), 2**31 - 1),
    rebalance_ms=st.integers(-(2**31), 2**31 - 1),
    member_id=st.text(max_size=30),
    instance=st.none() | st.text(max_size=20),
    reason=st.none() | st.text(max_size=20),
    protocols=st.lists(st.tuples(st.text(max_size=10), st.binary(max_size=200)), max_size=4),
)
def test_decodes_as_kafka_python_does(
    version: int, group_id: str, session_ms: int, rebalance_ms: int, member_id: str,
    instance: str | None, reason: str | None, protocols: list[tuple[str, bytes]],
) -> None:
    raw = _frame(
        version, protocols, group_id=group_id, session_ms=session_ms, rebalance_ms=rebalance_ms,
        member_id=member_id, instance=instance, reason=reason,
    )
    got = SPEC.decode_request(memoryview(raw), 6, version)
    want = JoinGroupRequest.decode(memoryview(raw)[6:], version=version)
    assert _fields(got) == _fields(want)


def test_metadata_is_not_copied_while_the_frame_is_held() -> None:
    """The frame is charged to the request budget until the request is answered; a
    decoded copy of its metadata would be held beside it, uncounted."""
    raw = _frame(5, [("range", b"m" * (8 * MiB)), ("roundrobin", b"n" * (4 * MiB))])
    tracemalloc.start()
    try:
        request = SPEC.decode_request(memoryview(raw), 6, 5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MiB, f"decoding allocated {peak} bytes"
    assert [len(p.metadata) for p in request.protocols] == [8 * MiB, 4 * MiB]
    assert bytes(request.protocols[1].metadata[:3]) == b"nnn"


@pytest.mark.parametrize("version", [0, 5, 6, 9])
def test_truncated_or_null_bodies_are_protocol_errors(version: int) -> None:
    raw = _frame(version, [("range", b"abc")])
    for end in range(6, len(raw)):
        with pytest.raises(KafkaProtocolError):
            SPEC.decode_request(memoryview(raw[:end]), 6, version)
    flexible = version >= 6
    null_group = bytearray(b"header" + (b"\x00" if flexible else b"\xff\xff")) + raw[6 + (2 if flexible else 3):]
    with pytest.raises(KafkaProtocolError, match="group_id"):
        SPEC.decode_request(memoryview(null_group), 6, version)
