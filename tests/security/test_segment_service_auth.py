"""``SegmentService`` under ``admin.authentication`` and ACLs: anonymous calls refused,
reads checked as READ and appends as WRITE on the stream (``scope/stream`` as a topic
resource), and ``tidegate.spark``'s gRPC client with credentials over TLS."""

from __future__ import annotations

import base64

import grpc
import pytest
from tidegate.protocol import events
from tidegate.protocol.controller_grpc import pb2, pb2_grpc
from tidegate.spark.stream_client import StreamClient
from tidegate.spark.stream_options import stream_read_options

from tests.security.conftest import USERS, Secure


def _basic(user: str) -> tuple[tuple[str, str], ...]:
    token = base64.b64encode(f"{user}:{USERS[user]}".encode()).decode()
    return (("authorization", f"Basic {token}"),)


def test_reads_and_appends_need_credentials_and_acls(secure: Secure) -> None:
    credentials = grpc.ssl_channel_credentials(secure.certs.ca.read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{secure.server.grpc_port}", credentials) as channel:
        ctl = pb2_grpc.ControllerServiceStub(channel)
        seg = pb2_grpc.SegmentServiceStub(channel)
        admin = _basic("admin")
        ctl.CreateScope(pb2.ScopeRequest(scope="plant"), metadata=admin, timeout=10)
        ctl.CreateStream(pb2.CreateStreamRequest(scope="plant", stream="temps"), metadata=admin, timeout=10)
        append = pb2.AppendEventsRequest(scope="plant", stream="temps",
                                         events=[pb2.Event(routing_key="d1", data=b"21.5")])
        read = pb2.ReadSegmentRequest(scope="plant", stream="temps", segment_id=0, offset=0, max_bytes=100)
        for call, request in ((seg.AppendEvents, append), (seg.ReadSegment, read)):
            with pytest.raises(grpc.RpcError) as info:
                call(request, timeout=10)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        alice = _basic("alice")
        for call, request, what in ((seg.AppendEvents, append, "WRITE"), (seg.ReadSegment, read, "READ")):
            with pytest.raises(grpc.RpcError) as info:
                call(request, metadata=alice, timeout=10)
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert f"may not {what} plant/temps" in (info.value.details() or "")
        seg.AppendEvents(append, metadata=admin, timeout=10)

    opts = stream_read_options({
        "controller": f"127.0.0.1:{secure.server.grpc_port}", "scope": "plant", "stream": "temps",
        "controller.username": "admin", "controller.password": USERS["admin"],
        "controller.tls.ca.location": str(secure.certs.ca),
    }, streaming=False)
    client = StreamClient(opts)
    try:
        tail = client.cut(tail=True)
        [(segment, length)] = tail.items()
        page = client.read(segment, 0, 1 << 20)
        assert [(e.routing_key, e.data) for e in events.parse(page.data, 0)] == [("d1", b"21.5")]
        assert page.next_offset == length
    finally:
        client.close()
