"""Answers are handed to the transport in order, in pieces, each once it has drained;
small ones by the request's own task when their turn has come."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tidegate.gateway.net import server
from tidegate.gateway.net.server import _write_buffers

from tests.clients.requests import record_batch
from tests.gateway.conftest import Node
from tests.gateway.test_produce_fetch import create, fetch_records, produce


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


async def test_a_small_answer_is_written_by_its_own_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A produce answer whose turn has come is written as its request finishes, not by
    the connection's writer one event-loop hop later; a large answer (a fetch of 200 KB)
    still goes through the writer, in pieces. Answers stay correct and in order."""
    written: list[int] = []
    real = server._write_buffers

    async def counting(writer: Any, buffers: list[bytes | memoryview]) -> None:
        written.append(sum(len(b) for b in buffers))
        await real(writer, buffers)

    monkeypatch.setattr(server, "_write_buffers", counting)
    node = Node(tmp_path / "data")
    await node.start()
    client = await node.client()
    try:
        await create(client, "t", 1)
        written.clear()
        for i in range(5):
            assert await produce(client, "t", 0, record_batch([b"%d" % i * 40_000])) == (0, i)
        assert written == []
        _, records = await fetch_records(client, "t", 0, 0)
        assert [offset for offset, _ in records] == list(range(5))
        assert len(written) == 1 and written[0] > 200_000
    finally:
        await client.close()
        await node.close()
