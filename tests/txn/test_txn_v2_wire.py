"""Transaction version 2 (KIP-890 part 2) on the wire, as kafka-clients 4.x speaks it
(kafka-python's message classes over a socket to ``tidegate serve``): the feature in
ApiVersions, Produce v12 and TxnOffsetCommit v5 adding to the transaction themselves,
EndTxn v5 bumping the epoch (its retry answered with the same bump), markers of the
bumped epoch fencing the ended transaction's zombie, and what read_committed sees."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import (
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kafka.record.default_records import DefaultRecordBatchBuilder
from tidegate.protocol.errors import ErrorCode as E

from tests.clients.requests import Conn
from tests.clients.server import Tidegate
from tests.txn.helpers import create_topic, read_all

TID = "v2"


def _batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=True, producer_id=pid,
        producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20,
    )
    builder.append(0, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return bytes(builder.build())


def _produce(c: Conn, pid: int, epoch: int, seq: int, value: bytes, version: int = 12) -> int:
    part = ProduceRequest.TopicProduceData.PartitionProduceData(
        index=0, records=_batch(pid, epoch, seq, value))
    req = ProduceRequest(transactional_id=TID, acks=-1, timeout_ms=5000,
                         topic_data=[ProduceRequest.TopicProduceData(name="v2t", partition_data=[part])])
    resp = c.call(req, version, ProduceResponse)
    return int(resp.responses[0].partition_responses[0].error_code)


def _end(c: Conn, pid: int, epoch: int, commit: bool, version: int = 5) -> tuple[int, int, int]:
    resp = c.call(EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=epoch,
                                committed=commit), version, EndTxnResponse)
    return int(resp.error_code), int(resp.producer_id), int(resp.producer_epoch)


def _offsets(c: Conn, pid: int, epoch: int, offset: int, version: int = 5) -> int:
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    resp = c.call(TxnOffsetCommitRequest(
        transactional_id=TID, group_id="v2g", producer_id=pid, producer_epoch=epoch,
        generation_id=-1, member_id="", group_instance_id=None,
        topics=[T(name="v2t", partitions=[T.TxnOffsetCommitRequestPartition(
            partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
            committed_metadata="")])],
    ), version, TxnOffsetCommitResponse)
    return int(resp.topics[0].partitions[0].error_code)


def test_features_in_api_versions(tidegate: Tidegate) -> None:
    c = Conn(tidegate.port)
    try:
        v3 = c.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3,
                    ApiVersionsResponse)
        v4 = c.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 4,
                    ApiVersionsResponse)
    finally:
        c.sock.close()
    for answer in (v3, v4):
        assert answer.finalized_features_epoch >= 0
        assert [(f.name, f.min_version_level, f.max_version_level) for f in answer.finalized_features] == [
            ("transaction.version", 2, 2)]
    # Kafka leaves out supported features whose lowest level is 0 before v4 (KAFKA-17492).
    assert v3.supported_features == []
    assert [(f.name, f.min_version, f.max_version) for f in v4.supported_features] == [
        ("transaction.version", 0, 2)]


def test_transaction_version_1_configured(tmp_path: Path) -> None:
    config = tmp_path / "tidegate.toml"
    config.write_text('"transaction.version" = 1\n')
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config=config)
    server.start()
    try:
        c = Conn(server.port)
        try:
            v4 = c.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 4,
                        ApiVersionsResponse)
        finally:
            c.sock.close()
        assert [(f.name, f.max_version_level) for f in v4.finalized_features] == [("transaction.version", 1)]
    finally:
        server.close()


def test_epoch_bumped_by_every_end(tidegate: Tidegate) -> None:
    create_topic(tidegate.bootstrap, "v2t", 1)
    c = Conn(tidegate.port)
    try:
        init = c.call(InitProducerIdRequest(transactional_id=TID, transaction_timeout_ms=60_000),
                      4, InitProducerIdResponse)
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch

        # No AddPartitionsToTxn, no AddOffsetsToTxn: Produce v12 and TxnOffsetCommit v5 add.
        assert _produce(c, pid, epoch, 0, b"committed") == 0
        assert _offsets(c, pid, epoch, 1) == 0
        assert _end(c, pid, epoch, True) == (0, pid, epoch + 1)
        # A retry (the answer was lost) gets the same bump; the opposite decision does not.
        assert _end(c, pid, epoch, True) == (0, pid, epoch + 1)
        assert _end(c, pid, epoch, False)[0] == E.INVALID_TXN_STATE
        # The ended transaction's zombie: its epoch is fenced by the markers' bumped one.
        assert _produce(c, pid, epoch, 1, b"zombie") == E.INVALID_PRODUCER_EPOCH

        # The next transaction with the new epoch, sequences from 0; then aborted.
        assert _produce(c, pid, epoch + 1, 0, b"aborted") == 0
        assert _end(c, pid, epoch + 1, False) == (0, pid, epoch + 2)
        assert _produce(c, pid, epoch + 1, 1, b"zombie") == E.INVALID_PRODUCER_EPOCH
        assert _end(c, pid, epoch, True)[0] == E.PRODUCER_FENCED  # two bumps behind
        # TxnOffsetCommit v4 (transaction version 1) still needs AddOffsetsToTxn.
        assert _offsets(c, pid, epoch + 2, 2, version=4) == E.INVALID_TXN_STATE
        assert _produce(c, pid, epoch + 2, 0, b"last") == 0
        assert _end(c, pid, epoch + 2, True) == (0, pid, epoch + 3)
    finally:
        c.sock.close()
    assert read_all(tidegate.bootstrap, "v2t", 1, committed=True, expect=2) == [b"committed", b"last"]
    assert read_all(tidegate.bootstrap, "v2t", 1, committed=False) == [b"committed", b"aborted", b"last"]
    consumer = Consumer({"bootstrap.servers": tidegate.bootstrap, "group.id": "v2g"})
    try:
        [tp] = consumer.committed([TopicPartition("v2t", 0)], timeout=10)
    finally:
        consumer.close()
    assert tp.offset == 1
