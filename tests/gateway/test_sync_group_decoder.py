"""``protocol.sync_group``: our SyncGroup request decoder against kafka-python's, and
that it holds the assignments as slices of the frame (issue 35 item 7: 8 SyncGroups of
50 MiB took the node past ``queued.max.request.bytes`` with kafka-python's copies)."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import SyncGroupRequest
from tidegate.gateway.handlers.sync_group import SPEC
from tidegate.protocol.errors import KafkaProtocolError

_Assignment = SyncGroupRequest.SyncGroupRequestAssignment
MiB = 1024 * 1024


def _fields(request: Any) -> tuple[Any, ...]:
    return (
        request.group_id, request.generation_id, request.member_id,
        request.group_instance_id, request.protocol_type, request.protocol_name,
        [(a.member_id, None if a.assignment is None else bytes(a.assignment))
         for a in request.assignments],
    )


def _frame(version: int, assignments: list[tuple[str, bytes]], **kw: Any) -> bytearray:
    request = SyncGroupRequest(
        group_id=kw.get("group_id", "g"), generation_id=kw.get("generation", 1),
        member_id=kw.get("member_id", "m"),
        group_instance_id=kw.get("instance") if version >= 3 else None,
        protocol_type=kw.get("protocol_type") if version >= 5 else None,
        protocol_name=kw.get("protocol_name") if version >= 5 else None,
        assignments=[_Assignment(member_id=m, assignment=a) for m, a in assignments],
    )
    return bytearray(b"header" + request.encode(version=version))


@settings(max_examples=200, deadline=None)
@given(
    version=st.integers(0, 5),
    group_id=st.text(max_size=30),
    generation=st.integers(-(2**31), 2**31 - 1),
    member_id=st.text(max_size=30),
    instance=st.none() | st.text(max_size=20),
    protocol_type=st.none() | st.text(max_size=10),
    protocol_name=st.none() | st.text(max_size=10),
    assignments=st.lists(st.tuples(st.text(max_size=10), st.binary(max_size=200)), max_size=4),
)
def test_decodes_as_kafka_python_does(
    version: int, group_id: str, generation: int, member_id: str, instance: str | None,
    protocol_type: str | None, protocol_name: str | None, assignments: list[tuple[str, bytes]],
) -> None:
    raw = _frame(
        version, assignments, group_id=group_id, generation=generation, member_id=member_id,
        instance=instance, protocol_type=protocol_type, protocol_name=protocol_name,
    )
    got = SPEC.decode_request(memoryview(raw), 6, version)
    want = SyncGroupRequest.decode(memoryview(raw)[6:], version=version)
    assert _fields(got) == _fields(want)


def test_assignments_are_not_copied_while_the_frame_is_held() -> None:
    """The frame is charged to the request budget until the request is answered; a
    decoded copy of its assignments would be held beside it, uncounted."""
    raw = _frame(3, [("a", b"m" * (8 * MiB)), ("b", b"n" * (4 * MiB))])
    tracemalloc.start()
    try:
        request = SPEC.decode_request(memoryview(raw), 6, 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MiB, f"decoding allocated {peak} bytes"
    assert [len(a.assignment) for a in request.assignments] == [8 * MiB, 4 * MiB]
    assert bytes(request.assignments[1].assignment[:3]) == b"nnn"


@pytest.mark.parametrize("version", [0, 3, 4, 5])
def test_truncated_or_null_bodies_are_protocol_errors(version: int) -> None:
    raw = _frame(version, [("a", b"abc")], protocol_type="consumer", protocol_name="range")
    for end in range(6, len(raw)):
        with pytest.raises(KafkaProtocolError):
            SPEC.decode_request(memoryview(raw[:end]), 6, version)
    flexible = version >= 4
    null_group = bytearray(b"header" + (b"\x00" if flexible else b"\xff\xff")) + raw[6 + (2 if flexible else 3):]
    with pytest.raises(KafkaProtocolError, match="group_id"):
        SPEC.decode_request(memoryview(null_group), 6, version)
