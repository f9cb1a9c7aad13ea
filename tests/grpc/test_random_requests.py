"""Seeded random requests through gRPC: every one succeeds or is refused with a user
error code (never INTERNAL or UNKNOWN), and the stream stays a cover of [0, 1)."""

from __future__ import annotations

import random
from typing import Any

import grpc
from tidegate.protocol.controller_grpc import pb2

from tests.grpc.conftest import Grpc

REQUESTS = 300
USER_ERRORS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.NOT_FOUND,
}


def _random_ranges(rng: random.Random, start: float, end: float) -> list[Any]:
    """Usually an exact split of [start, end); sometimes a gap, overlap or overshoot."""
    cuts = sorted(rng.uniform(start, end) for _ in range(rng.randint(0, 3)))
    points = [start, *cuts, end]
    mangle = rng.random()
    if mangle < 0.15:
        points[-1] = end - (end - start) / 3  # short of the end
    elif mangle < 0.25:
        points[0] = max(0.0, start - 0.1)  # beyond the start
    elif mangle < 0.3:
        points.insert(1, points[1] + 0.01)  # out of order
    return [pb2.KeyRange(start=a, end=b) for a, b in zip(points, points[1:], strict=False)]


async def test_random_scales_and_truncates(rpc: Grpc) -> None:
    rng = random.Random(20261122)
    await rpc.stub.CreateScope(pb2.ScopeRequest(scope="sc"))
    await rpc.stub.CreateStream(
        pb2.CreateStreamRequest(
            scope="sc", stream="s", config=pb2.StreamConfig(scaling=pb2.ScalingPolicy(min_segments=3))
        )
    )
    stream = pb2.StreamRequest(scope="sc", stream="s")
    outcomes: dict[str, int] = {}
    known: set[int] = set()
    for _ in range(REQUESTS):
        current = sorted((await rpc.stub.GetCurrentSegments(stream)).segments, key=lambda s: s.key_start)
        known |= {s.id for s in current}
        kind = rng.random()
        try:
            if kind < 0.6:
                i = rng.randrange(len(current))
                j = min(len(current), i + rng.randint(1, 2))
                chosen = current[i:j]
                if rng.random() < 0.1:
                    chosen = [*chosen, rng.choice(current)]  # a duplicate or non-adjacent one
                ranges = _random_ranges(rng, chosen[0].key_start, chosen[-1].key_end)
                await rpc.stub.Scale(
                    pb2.ScaleRequest(
                        scope="sc",
                        stream="s",
                        sealed_segments=[s.id for s in chosen],
                        new_ranges=ranges,
                    )
                )
            elif kind < 0.8:
                cut = {s.id: 0 for s in current}
                if rng.random() < 0.3:
                    cut[rng.choice(sorted(known))] = rng.choice([0, 1, -1])
                await rpc.stub.Truncate(
                    pb2.TruncateRequest(scope="sc", stream="s", cut=pb2.StreamCut(cut=cut))
                )
            else:
                key = rng.choice([rng.random(), 1.0, -0.5, 2.0])
                hit = await rpc.stub.GetSegmentForKey(
                    pb2.SegmentForKeyRequest(scope="sc", stream="s", key=key)
                )
                assert hit.key_start <= key < hit.key_end
            outcomes["OK"] = outcomes.get("OK", 0) + 1
        except grpc.aio.AioRpcError as e:
            assert e.code() in USER_ERRORS, (e.code(), e.details())
            outcomes[e.code().name] = outcomes.get(e.code().name, 0) + 1
        after = sorted((await rpc.stub.GetCurrentSegments(stream)).segments, key=lambda s: s.key_start)
        assert after[0].key_start == 0.0 and after[-1].key_end == 1.0
        for a, b in zip(after, after[1:], strict=False):
            assert a.key_end == b.key_start
    assert outcomes.get("OK", 0) > REQUESTS // 5 and outcomes.get("INVALID_ARGUMENT", 0) > 0, outcomes
