"""A gateway that listens before it has loaded its state (a cluster node waiting for its
peers, gateway/handlers/starting.py) answers every request: ApiVersions as always,
Metadata with LEADER_NOT_AVAILABLE, the rest with a retriable error naming what it
waits for; once loaded it serves them all."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafka.protocol.metadata import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.sasl import SaslHandshakeRequest
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.app import Gateway
from tidegate.gateway.config import GatewayConfig
from tidegate.protocol.errors import ErrorCode

from tests.clients import requests as kreq
from tests.gateway.conftest import RawClient
from tests.gateway.test_produce_fetch import produce


async def test_a_gateway_answers_while_it_loads_and_serves_once_loaded(tmp_path: Path) -> None:
    store = InMemorySegmentStore()
    controller = StreamController(store)
    await store.start()
    await controller.start()
    gateway = Gateway(GatewayConfig(data_dir=tmp_path, listen="127.0.0.1:0"), store, controller)
    _, port = await gateway.listen()
    try:
        for request in kreq.corpus("t"):  # one frame per API and version: each answered
            answer = await asyncio.to_thread(kreq.exchange, port, request, 10.0)
            assert len(kreq.split_frames(answer)) == 1, request[:16]
        # A SASL login is closed unanswered (any answer would be a failed login, not retried).
        handshake = kreq.frame(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        assert await asyncio.to_thread(kreq.exchange, port, handshake, 10.0) == b""
        client = await RawClient.connect(port)
        found = await client.call(FindCoordinatorRequest(key="g", key_type=0), 2,
                                  FindCoordinatorResponse)
        assert found.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert found.error_message == "node 0 is starting: waiting for its stored state to load"
        assert await produce(client, "t", 0, kreq.record_batch([b"x"])) == (
            ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
        md = await client.call(MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name="t")],
            allow_auto_topic_creation=True), 9, MetadataResponse)
        assert [(t.name, t.error_code) for t in md.topics] == [("t", ErrorCode.LEADER_NOT_AVAILABLE)]
        await gateway.load()
        assert gateway.state.ready
        md = await client.call(MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name="t")],
            allow_auto_topic_creation=True), 9, MetadataResponse)
        assert [(t.name, t.error_code) for t in md.topics] == [("t", 0)]
        assert await produce(client, "t", 0, kreq.record_batch([b"x"])) == (0, 0)
        await client.close()
    finally:
        await gateway.close()
        await controller.close()
        await store.close()


async def test_a_starting_cluster_node_names_every_live_node_in_metadata(tmp_path: Path) -> None:
    """librdkafka drops the brokers a Metadata answer leaves out and fails the produce
    requests in flight to them as never written, though they may have been (an idempotent
    producer then stores them twice after an epoch bump, issue 36): a node still starting
    names the live nodes it knows, itself at its own address."""
    store = InMemorySegmentStore()
    controller = StreamController(store)
    await store.start()
    await controller.start()
    members = [(0, "10.0.0.1", 1), (2, "127.0.0.2", 9092), (3, "127.0.0.3", 9092)]
    gateway = Gateway(GatewayConfig(data_dir=tmp_path, listen="127.0.0.1:0"), store, controller,
                      brokers=lambda listener: list(members))
    _, port = await gateway.listen()
    try:
        client = await RawClient.connect(port)
        md = await client.call(MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name="t")],
            allow_auto_topic_creation=True), 12, MetadataResponse)
        assert [(b.node_id, b.host, b.port) for b in md.brokers] == [
            (0, "127.0.0.1", port), (2, "127.0.0.2", 9092), (3, "127.0.0.3", 9092)]
        assert [(t.name, t.error_code) for t in md.topics] == [("t", ErrorCode.LEADER_NOT_AVAILABLE)]
        assert not gateway.state.ready
        await client.close()
    finally:
        await gateway.close()
        await controller.close()
        await store.close()


async def test_a_batch_after_one_refused_while_starting_is_refused_not_out_of_order(
    tmp_path: Path,
) -> None:
    """An idempotent producer's pipelined batches to a node that starts serving between
    them: the first is refused (not led here yet), the next one's sequence follows it.
    That gap is the node's: the next batch is refused too, not answered
    OUT_OF_ORDER_SEQUENCE_NUMBER (librdkafka bumps its epoch on that and sends batches it
    cannot know the fate of again as new records, issue 36); sent again in order, both
    are stored."""
    store = InMemorySegmentStore()
    controller = StreamController(store)
    await store.start()
    await controller.start()
    config = GatewayConfig(data_dir=tmp_path, listen="127.0.0.1:0")
    pid = 4242

    def batch(seq: int) -> bytes:
        return kreq.record_batch([b"v%d" % seq], producer_id=pid, epoch=0, base_sequence=seq)

    first = Gateway(config, store, controller)
    await first.start()
    client = await RawClient.connect(first.address[1])  # type: ignore[index]
    await client.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")],
                                      allow_auto_topic_creation=True), 9, MetadataResponse)
    assert await produce(client, "t", 0, batch(0)) == (0, 0)
    await client.close()
    await first.close()
    gateway = Gateway(config, store, controller)
    _, port = await gateway.listen()
    try:
        client = await RawClient.connect(port)
        assert await produce(client, "t", 0, batch(1)) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
        await gateway.load()
        assert await produce(client, "t", 0, batch(2)) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
        assert await produce(client, "t", 0, batch(1)) == (0, 1)
        assert await produce(client, "t", 0, batch(2)) == (0, 2)
        # Only the batch right after a refusal: a gap of the producer's own is still one.
        assert await produce(client, "t", 0, batch(9)) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        await client.close()
    finally:
        await gateway.close()
        await controller.close()
        await store.close()
