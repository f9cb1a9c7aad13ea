"""Answers are handed to the transport in order, in pieces, each once it has drained."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import server
from gateway.server import _write_buffers


class _Transportish:
    """Records writes; "pauses" after each write of a large piece until drained, as a
    transport whose socket takes nothing at once would."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.backlog = 0  # bytes written since the last drain
        self.drains = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))
        self.backlog += len(data)

    async def drain(self) -> None:
        self.drains += 1
        self.backlog = 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.integers(0, server._LARGE_BUFFER_BYTES + 5),
            st.integers(0, 3 * server._WRITE_PIECE_BYTES + 5),
        ),
        min_size=1,
        max_size=40,
    )
)
async def test_bytes_arrive_in_order_and_large_ones_in_drained_pieces(sizes: list[int]) -> None:
    buffers = [os.urandom(n) for n in sizes]
    sink = _Transportish()
    backlogs: list[int] = []
    real_write = sink.write

    def write(data: bytes | bytearray | memoryview) -> None:
        backlogs.append(sink.backlog)
        real_write(data)

    sink.write = write  # type: ignore[method-assign]
    await _write_buffers(sink, [memoryview(b) if i % 2 else b for i, b in enumerate(buffers)])  # type: ignore[arg-type]
    assert b"".join(sink.writes) == b"".join(buffers)
    # Every write goes onto a drained transport and is at most a piece (coalesced small
    # buffers: a piece plus one small buffer), so its buffer never holds more.
    assert backlogs == [0] * len(backlogs)
    assert all(len(d) < server._WRITE_PIECE_BYTES + server._LARGE_BUFFER_BYTES for d in sink.writes)
