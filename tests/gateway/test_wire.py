"""``gateway.net.wire.KafkaWire`` over a real loopback socket: frames cut anywhere by the
network come out whole and in order, large ones included; an oversized prefix stops
reading after the frames before it; back-pressure pauses and resumes reading."""

from __future__ import annotations

import asyncio
import random
import struct
from typing import Any

import pytest
from tidegate.gateway.net.framepool import FramePool
from tidegate.gateway.net.wire import FrameTooLargeError, KafkaWire


async def _pair(
    frame_bytes_max: int = 1 << 24, **kw: Any
) -> tuple[asyncio.Future[KafkaWire], asyncio.StreamWriter, asyncio.AbstractServer]:
    loop = asyncio.get_running_loop()
    got: asyncio.Future[KafkaWire] = loop.create_future()
    server = await loop.create_server(
        lambda: KafkaWire(lambda: frame_bytes_max, got.set_result, **kw), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    return got, writer, server


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def test_frames_cut_anywhere_come_out_whole() -> None:
    rng = random.Random(7)
    bodies = [
        rng.randbytes(rng.choice([0, 1, 5, 300, 70_000, 100_000, 300_000, 2_000_000]))
        for _ in range(60)
    ]
    stream = b"".join(_frame(b) for b in bodies)
    pool = FramePool()
    got, writer, server = await _pair(staging_bytes=128 * 1024, pool=pool)
    wire = await got

    async def send() -> None:
        pos = 0
        while pos < len(stream):
            n = rng.choice([1, 3, 4, 7, 1000, 65_536, 500_000])
            writer.write(stream[pos : pos + n])
            pos += n
            if rng.random() < 0.3:
                await writer.drain()  # the reader below keeps the server reading
        await writer.drain()

    sender = asyncio.ensure_future(send())
    held = []
    for i, body in enumerate(bodies):
        frame = await asyncio.wait_for(wire.read_frame(), 10)
        assert bytes(frame) == body
        if i % 3 == 0:
            held.append((frame, body))  # its buffer must not be reused while held
    await sender
    for frame, body in held:
        assert bytes(frame) == body
    assert pool.reused > 0
    writer.close()
    with pytest.raises(asyncio.IncompleteReadError):
        await asyncio.wait_for(wire.read_frame(), 10)
    wire.close()
    server.close()


async def test_oversized_prefix_stops_after_earlier_frames() -> None:
    got, writer, server = await _pair(frame_bytes_max=100)
    wire = await got
    writer.write(_frame(b"a" * 100) + struct.pack(">i", 101) + b"x" * 101 + _frame(b"late"))
    await writer.drain()
    assert await asyncio.wait_for(wire.read_frame(), 10) == b"a" * 100
    with pytest.raises(FrameTooLargeError):
        await asyncio.wait_for(wire.read_frame(), 10)
    writer.close()
    wire.close()
    server.close()


async def test_reading_pauses_while_frames_wait_and_resumes() -> None:
    got, writer, server = await _pair(buffered_bytes_max=10_000)
    wire = await got
    bodies = [bytes([i]) * 4000 for i in range(50)]
    writer.write(b"".join(_frame(b) for b in bodies))
    await asyncio.sleep(0.2)
    assert wire._reading_paused  # 3 frames (12,000 bytes) were enough to pause
    for body in bodies:
        assert await asyncio.wait_for(wire.read_frame(), 10) == body
    assert not wire._reading_paused
    writer.close()
    wire.close()
    server.close()


def test_request_header_parsed_from_a_prefix_or_the_whole_frame() -> None:
    from tidegate.protocol.framing import parse_request_header

    def header(client_id: bytes) -> bytes:
        # v1 header: api key 0 (Produce), version 9, correlation id 42, client id.
        return struct.pack(">hhih", 0, 9, 42, len(client_id)) + client_id

    body = b"\x01" * 100_000
    for client_id in (b"c", b"x" * 5000, b"y" * 32_000):
        frame = bytearray(header(client_id) + body)
        parsed = parse_request_header(frame, flexible=False)
        assert (parsed.api_key, parsed.api_version, parsed.correlation_id) == (0, 9, 42)
        assert parsed.client_id == client_id.decode()
        assert parsed.body_offset == 10 + len(client_id)
