"""The controller gRPC service through a real ``grpc.aio`` channel."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from tidegate.core.controller.api import Controller, qualified_segment_name
from tidegate.gateway.admin.grpc_service import ERROR_METADATA_KEY, start_grpc_server
from tidegate.protocol.controller_grpc import pb2, pb2_grpc

from tests.grpc.conftest import Grpc


async def _fails(call: Any, code: grpc.StatusCode, error: str | None = None) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, info.value.details()
    if error is not None:
        trailers = dict(info.value.trailing_metadata() or ())
        assert trailers.get(ERROR_METADATA_KEY) == error
    return str(info.value.details())


def _sr(stream: str = "s") -> Any:
    return pb2.StreamRequest(scope="sc", stream=stream)


async def _create(rpc: Grpc, stream: str = "s", **config: Any) -> Any:
    scopes = (await rpc.stub.ListScopes(pb2.ListScopesRequest())).scopes
    if "sc" not in scopes:
        await rpc.stub.CreateScope(pb2.ScopeRequest(scope="sc"))
    return await rpc.stub.CreateStream(
        pb2.CreateStreamRequest(scope="sc", stream=stream, config=pb2.StreamConfig(**config))
    )


async def test_scopes(rpc: Grpc) -> None:
    s = rpc.stub
    assert (await s.CreateScope(pb2.ScopeRequest(scope="a"))).scope == "a"
    await s.CreateScope(pb2.ScopeRequest(scope="b"))
    await _fails(s.CreateScope(pb2.ScopeRequest(scope="a")), grpc.StatusCode.ALREADY_EXISTS)
    assert list((await s.ListScopes(pb2.ListScopesRequest())).scopes) == ["a", "b"]
    await s.CreateStream(pb2.CreateStreamRequest(scope="a", stream="x"))
    await _fails(
        s.DeleteScope(pb2.ScopeRequest(scope="a")),
        grpc.StatusCode.FAILED_PRECONDITION,
        "ScopeNotEmptyError",
    )
    await s.DeleteScope(pb2.ScopeRequest(scope="b"))
    await _fails(
        s.DeleteScope(pb2.ScopeRequest(scope="b")), grpc.StatusCode.NOT_FOUND, "ScopeNotFoundError"
    )
    await _fails(s.CreateScope(pb2.ScopeRequest(scope="")), grpc.StatusCode.INVALID_ARGUMENT)
    await _fails(s.CreateScope(pb2.ScopeRequest(scope="a/b")), grpc.StatusCode.INVALID_ARGUMENT)


async def test_stream_config_round_trips(rpc: Grpc) -> None:
    info = await _create(
        rpc,
        scaling=pb2.ScalingPolicy(
            type=pb2.BY_RATE_IN_EVENTS_PER_SEC, target_rate=50, scale_factor=3, min_segments=3
        ),
        retention=pb2.RetentionPolicy(type=pb2.SIZE, value=1 << 30),
        tags=["t1", "t2"],
    )
    assert info.scope == "sc" and info.stream == "s" and info.state == pb2.ACTIVE
    assert info.config.scaling.type == pb2.BY_RATE_IN_EVENTS_PER_SEC
    assert (info.config.scaling.target_rate, info.config.scaling.min_segments) == (50, 3)
    assert info.config.retention.type == pb2.SIZE and info.config.retention.value == 1 << 30
    assert list(info.config.tags) == ["t1", "t2"]
    assert await rpc.stub.GetStream(_sr()) == info

    plain = await _create(rpc, "p")
    assert not plain.config.HasField("retention")
    assert plain.config.scaling.min_segments == 1
    listed = await rpc.stub.ListStreams(pb2.ListStreamsRequest(scope="sc"))
    assert list(listed.streams) == ["p", "s"]
    tagged = await rpc.stub.ListStreams(pb2.ListStreamsRequest(scope="sc", tag="t2"))
    assert list(tagged.streams) == ["s"]

    updated = await rpc.stub.UpdateStream(
        pb2.UpdateStreamRequest(scope="sc", stream="p", config=pb2.StreamConfig(tags=["new"]))
    )
    assert list(updated.config.tags) == ["new"]
    await _fails(
        rpc.stub.CreateStream(pb2.CreateStreamRequest(scope="sc", stream="s")),
        grpc.StatusCode.ALREADY_EXISTS,
        "StreamExistsError",
    )
    await _fails(
        rpc.stub.GetStream(_sr("nope")), grpc.StatusCode.NOT_FOUND, "StreamNotFoundError"
    )
    await _fails(
        rpc.stub.CreateStream(pb2.CreateStreamRequest(scope="nope", stream="s")),
        grpc.StatusCode.NOT_FOUND,
        "ScopeNotFoundError",
    )


async def test_create_with_key_ranges_and_key_lookup(rpc: Grpc) -> None:
    await rpc.stub.CreateScope(pb2.ScopeRequest(scope="sc"))
    ranges = [pb2.KeyRange(start=0, end=0.2), pb2.KeyRange(start=0.2, end=1)]
    await rpc.stub.CreateStream(pb2.CreateStreamRequest(scope="sc", stream="s", key_ranges=ranges))
    current = (await rpc.stub.GetCurrentSegments(_sr())).segments
    assert [(x.key_start, x.key_end) for x in current] == [(0, 0.2), (0.2, 1)]
    hit = await rpc.stub.GetSegmentForKey(pb2.SegmentForKeyRequest(scope="sc", stream="s", key=0.5))
    assert (hit.key_start, hit.key_end) == (0.2, 1)
    await _fails(
        rpc.stub.CreateStream(
            pb2.CreateStreamRequest(
                scope="sc", stream="gap", key_ranges=[pb2.KeyRange(start=0, end=0.5)]
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    await _fails(
        rpc.stub.GetSegmentForKey(
            pb2.SegmentForKeyRequest(scope="sc", stream="s", key=float("nan"))
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )


async def test_scale_successors_epochs_truncate(rpc: Grpc) -> None:
    await _create(rpc, scaling=pb2.ScalingPolicy(min_segments=2, scale_factor=2))
    epoch = await rpc.stub.Scale(
        pb2.ScaleRequest(
            scope="sc",
            stream="s",
            sealed_segments=[0],
            new_ranges=[pb2.KeyRange(start=0, end=0.25), pb2.KeyRange(start=0.25, end=0.5)],
        )
    )
    assert epoch.epoch == 1 and len(epoch.segments) == 3
    new = sorted((s for s in epoch.segments if s.epoch == 1), key=lambda s: s.key_start)
    assert [s.id for s in new] == [(1 << 32) | s.number for s in new]

    succ = await rpc.stub.GetSuccessors(pb2.SegmentRequest(scope="sc", stream="s", segment_id=0))
    assert [(e.segment.id, list(e.predecessors)) for e in succ.successors] == [
        (s.id, [0]) for s in new
    ]
    epochs = (await rpc.stub.GetEpochs(_sr())).epochs
    assert [e.epoch for e in epochs] == [0, 1]
    assert epochs[1] == epoch

    await _fails(
        rpc.stub.Scale(
            pb2.ScaleRequest(
                scope="sc", stream="s", sealed_segments=[1], new_ranges=[pb2.KeyRange(start=0.5, end=0.9)]
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )

    await rpc.store.append(qualified_segment_name("sc", "s", 1), b"y" * 64)
    cut = {new[0].id: 0, new[1].id: 0, 1: 32}
    head = await rpc.stub.Truncate(
        pb2.TruncateRequest(scope="sc", stream="s", cut=pb2.StreamCut(cut=cut))
    )
    assert dict(head.cut) == cut
    assert dict((await rpc.stub.GetHeadSegments(_sr())).cut) == cut
    await _fails(
        rpc.stub.Truncate(
            pb2.TruncateRequest(scope="sc", stream="s", cut=pb2.StreamCut(cut={0: 0, 1: 0}))
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
    )


async def test_seal_and_delete(rpc: Grpc) -> None:
    await _create(rpc)
    await _fails(rpc.stub.DeleteStream(_sr()), grpc.StatusCode.FAILED_PRECONDITION, "ConflictError")
    sealed = await rpc.stub.SealStream(_sr())
    assert sealed.state == pb2.SEALED
    await _fails(
        rpc.stub.Scale(
            pb2.ScaleRequest(
                scope="sc", stream="s", sealed_segments=[0], new_ranges=[pb2.KeyRange(start=0, end=1)]
            )
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    await rpc.stub.DeleteStream(_sr())
    await _fails(rpc.stub.GetStream(_sr()), grpc.StatusCode.NOT_FOUND)


async def test_port_in_use_is_an_os_error(rpc: Grpc) -> None:
    with pytest.raises(OSError):
        await start_grpc_server(rpc.controller, "127.0.0.1", rpc.port)


async def test_history_queries(rpc: Grpc) -> None:
    await _create(rpc)
    await rpc.store.append(qualified_segment_name("sc", "s", 0), b"z" * 100)
    epoch = await rpc.stub.Scale(
        pb2.ScaleRequest(
            scope="sc",
            stream="s",
            sealed_segments=[0],
            new_ranges=[pb2.KeyRange(start=0, end=0.5), pb2.KeyRange(start=0.5, end=1)],
        )
    )
    new = sorted(epoch.segments, key=lambda s: s.key_start)
    pred = await rpc.stub.GetPredecessors(
        pb2.SegmentRequest(scope="sc", stream="s", segment_id=new[0].id)
    )
    assert [(e.segment.id, sorted(e.successors)) for e in pred.predecessors] == [
        (0, sorted(s.id for s in new))
    ]
    first = await rpc.stub.GetSegmentsAt(pb2.SegmentsAtRequest(scope="sc", stream="s", time_ms=0))
    assert first.epoch == 0
    now = await rpc.stub.GetSegmentsAt(
        pb2.SegmentsAtRequest(scope="sc", stream="s", time_ms=epoch.creation_time_ms)
    )
    assert now.epoch == 1

    start = pb2.StreamCut(cut={0: 0})
    middle = pb2.StreamCut(cut={0: 60})
    after = pb2.StreamCut(cut={s.id: 0 for s in new})
    pair = pb2.StreamCutPair
    ge = await rpc.stub.IsStreamCutAtOrAfter(pair(scope="sc", stream="s", a=after, b=start))
    assert ge.a_at_or_after_b
    ge = await rpc.stub.IsStreamCutAtOrAfter(pair(scope="sc", stream="s", a=start, b=middle))
    assert not ge.a_at_or_after_b
    between = await rpc.stub.BytesBetween(pair(scope="sc", stream="s", a=after, b=middle))
    assert between.bytes == 40
    await _fails(
        rpc.stub.BytesBetween(pair(scope="sc", stream="s", a=start, b=after)),
        grpc.StatusCode.FAILED_PRECONDITION,
    )


async def test_transactions(rpc: Grpc) -> None:
    await _create(rpc)
    s = rpc.stub
    txn = await s.CreateTransaction(
        pb2.CreateTransactionRequest(scope="sc", stream="s", lease_ms=60_000)
    )
    assert txn.state == "OPEN" and txn.epoch == 0 and [x.parent.id for x in txn.segments] == [0]
    listed = await s.ListTransactions(_sr())
    assert [t.id for t in listed.transactions] == [txn.id]
    await rpc.store.append(txn.segments[0].segment_name, b"committed data")
    pinged = await s.PingTransaction(
        pb2.PingTransactionRequest(scope="sc", stream="s", id=txn.id, lease_ms=120_000)
    )
    assert pinged.lease_expiry_ms > txn.lease_expiry_ms
    done = await s.CommitTransaction(pb2.TransactionRequest(scope="sc", stream="s", id=txn.id))
    assert done.state == "COMMITTED"
    info = await rpc.store.get_info(qualified_segment_name("sc", "s", 0))
    assert info.length == len(b"committed data")
    assert list((await s.ListTransactions(_sr())).transactions) == []

    other = await s.CreateTransaction(pb2.CreateTransactionRequest(scope="sc", stream="s"))
    aborted = await s.AbortTransaction(pb2.TransactionRequest(scope="sc", stream="s", id=other.id))
    assert aborted.state == "ABORTED"
    await _fails(
        s.CommitTransaction(pb2.TransactionRequest(scope="sc", stream="s", id=other.id)),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    await _fails(
        s.GetTransaction(pb2.TransactionRequest(scope="sc", stream="s", id="nope")),
        grpc.StatusCode.NOT_FOUND,
        "TransactionNotFoundError",
    )
    await _fails(
        s.CreateTransaction(pb2.CreateTransactionRequest(scope="sc", stream="s", lease_ms=-5)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )


async def test_transaction_commits_across_a_scale(rpc: Grpc) -> None:
    await _create(rpc)
    s = rpc.stub
    txn = await s.CreateTransaction(pb2.CreateTransactionRequest(scope="sc", stream="s"))
    await rpc.store.append(txn.segments[0].segment_name, b"rolled")
    await s.Scale(
        pb2.ScaleRequest(
            scope="sc",
            stream="s",
            sealed_segments=[0],
            new_ranges=[pb2.KeyRange(start=0, end=0.5), pb2.KeyRange(start=0.5, end=1)],
        )
    )
    done = await s.CommitTransaction(pb2.TransactionRequest(scope="sc", stream="s", id=txn.id))
    assert done.state == "COMMITTED"
    epochs = (await s.GetEpochs(_sr())).epochs
    assert len(epochs) > 2  # the transaction was rolled into epochs of its own
    current = (await s.GetCurrentSegments(_sr())).segments
    assert sorted((x.key_start, x.key_end) for x in current) == [(0, 0.5), (0.5, 1)]


class _ProtocolOnly:
    """The real controller seen through the ``Controller`` protocol alone."""

    def __init__(self, controller: Any) -> None:
        self._c = controller

    def __getattr__(self, name: str) -> Any:
        if name not in Controller.__dict__:
            raise AttributeError(name)
        return getattr(self._c, name)


async def test_optional_capabilities_are_unimplemented_without_them(rpc: Grpc) -> None:
    from tests.conftest import free_port

    port = free_port()
    server = await start_grpc_server(_ProtocolOnly(rpc.controller), "127.0.0.1", port)  # type: ignore[arg-type]
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb2_grpc.ControllerServiceStub(channel)
            await stub.CreateScope(pb2.ScopeRequest(scope="sc"))
            await stub.CreateStream(pb2.CreateStreamRequest(scope="sc", stream="s"))
            await _fails(
                stub.CreateTransaction(pb2.CreateTransactionRequest(scope="sc", stream="s")),
                grpc.StatusCode.UNIMPLEMENTED,
            )
            await _fails(
                stub.GetPredecessors(pb2.SegmentRequest(scope="sc", stream="s", segment_id=0)),
                grpc.StatusCode.UNIMPLEMENTED,
            )
            assert len((await stub.GetCurrentSegments(_sr())).segments) == 1
    finally:
        await server.stop(None)
