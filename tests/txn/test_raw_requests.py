"""The transaction APIs' error answers on the wire (kafka-python's message classes over
a socket to ``tidegate serve``): what a misbehaving or hostile client gets."""

from __future__ import annotations

import time

from kafka.protocol.admin import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka.record.default_records import DefaultRecordBatchBuilder
from tidegate.protocol.errors import ErrorCode as E

from tests.clients.requests import Conn
from tests.clients.server import Tidegate
from tests.txn.helpers import create_topic

_Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic


def _txn_batch(pid: int, epoch: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=True, producer_id=pid,
        producer_epoch=epoch, base_sequence=0, batch_size=1 << 20,
    )
    builder.append(0, timestamp=1_700_000_000_000, key=None, value=b"v", headers=[])
    return bytes(builder.build())


def _produce(c: Conn, pid: int, epoch: int) -> int:
    part = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=_txn_batch(pid, epoch))
    req = ProduceRequest(transactional_id="raw", acks=-1, timeout_ms=5000,
                         topic_data=[ProduceRequest.TopicProduceData(name="raw", partition_data=[part])])
    resp = c.call(req, 9, ProduceResponse)
    return int(resp.responses[0].partition_responses[0].error_code)


def test_errors_on_the_wire(tidegate: Tidegate) -> None:
    create_topic(tidegate.bootstrap, "raw", 1)
    c = Conn(tidegate.port)
    try:
        _scenario(c)
    finally:
        c.sock.close()


def _scenario(c: Conn) -> None:
    versions = {a.api_key: (a.min_version, a.max_version)
                for a in c.call(ApiVersionsRequest(), 0, ApiVersionsResponse).api_keys}
    assert versions[24] == (0, 5) and versions[26] == (0, 5) and versions[22] == (0, 5)
    assert versions[61] == (0, 0) and versions[65] == (0, 0) and versions[66] == (0, 2)

    init = c.call(InitProducerIdRequest(transactional_id="raw", transaction_timeout_ms=60 * 60_000),
                  4, InitProducerIdResponse)
    assert init.error_code == E.INVALID_TRANSACTION_TIMEOUT
    init = c.call(InitProducerIdRequest(transactional_id="raw", transaction_timeout_ms=60_000),
                  4, InitProducerIdResponse)
    assert init.error_code == 0
    pid, epoch = init.producer_id, init.producer_epoch

    # A transactional batch outside the transaction is refused.
    assert _produce(c, pid, epoch) == E.INVALID_TXN_STATE
    add = c.call(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="raw", v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[_Topic(name="raw", partitions=[0]), _Topic(name="nope", partitions=[0])],
    ), 3, AddPartitionsToTxnResponse)
    errors = {(t.name, p.partition_index): p.partition_error_code
              for t in add.results_by_topic_v3_and_below for p in t.results_by_partition}
    assert errors == {("raw", 0): E.OPERATION_NOT_ATTEMPTED, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    add = c.call(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="raw", v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=[_Topic(name="raw", partitions=[0])],
    ), 3, AddPartitionsToTxnResponse)
    assert add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert _produce(c, pid, epoch) == 0
    assert _produce(c, pid, epoch + 1) == E.INVALID_PRODUCER_EPOCH

    # v4: batched, verify only.
    Txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
    verify = c.call(AddPartitionsToTxnRequest(transactions=[
        Txn(transactional_id="raw", producer_id=pid, producer_epoch=epoch, verify_only=True,
            topics=[_Topic(name="raw", partitions=[0])]),
        Txn(transactional_id="ghost", producer_id=pid, producer_epoch=epoch, verify_only=True,
            topics=[_Topic(name="raw", partitions=[0])]),
    ]), 4, AddPartitionsToTxnResponse)
    codes = [r.topic_results[0].results_by_partition[0].partition_error_code
             for r in verify.results_by_transaction]
    assert codes == [E.NONE, E.INVALID_PRODUCER_ID_MAPPING]

    # Fencing answers by version (KIP-588), and unknown ids.
    for version, code in ((1, E.INVALID_PRODUCER_EPOCH), (3, E.PRODUCER_FENCED)):
        end = c.call(EndTxnRequest(transactional_id="raw", producer_id=pid,
                                   producer_epoch=epoch - 1, committed=True), version, EndTxnResponse)
        assert end.error_code == code
    end = c.call(EndTxnRequest(transactional_id="ghost", producer_id=1, producer_epoch=0,
                               committed=True), 3, EndTxnResponse)
    assert end.error_code == E.INVALID_PRODUCER_ID_MAPPING
    offs = c.call(AddOffsetsToTxnRequest(transactional_id="raw", producer_id=pid,
                                         producer_epoch=epoch, group_id=""), 3, AddOffsetsToTxnResponse)
    assert offs.error_code == E.INVALID_GROUP_ID
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    commit = c.call(TxnOffsetCommitRequest(
        transactional_id="raw", group_id="g", producer_id=pid, producer_epoch=epoch,
        generation_id=-1, member_id="", group_instance_id=None,
        topics=[T(name="raw", partitions=[T.TxnOffsetCommitRequestPartition(
            partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])],
    ), 3, TxnOffsetCommitResponse)
    assert commit.topics[0].partitions[0].error_code == E.INVALID_TXN_STATE  # no AddOffsetsToTxn
    big = c.call(TxnOffsetCommitRequest(
        transactional_id="raw", group_id="g", producer_id=pid, producer_epoch=epoch,
        generation_id=-1, member_id="", group_instance_id=None,
        topics=[T(name="raw", partitions=[T.TxnOffsetCommitRequestPartition(
            partition_index=0, committed_offset=1, committed_leader_epoch=-1,
            committed_metadata="x" * 5000)])],
    ), 3, TxnOffsetCommitResponse)
    assert big.topics[0].partitions[0].error_code == 12  # OFFSET_METADATA_TOO_LARGE

    # The admin views while the transaction is open.
    desc = c.call(DescribeTransactionsRequest(transactional_ids=["raw", "ghost"]), 0,
                  DescribeTransactionsResponse)
    states = {s.transactional_id: (s.error_code, s.transaction_state) for s in desc.transaction_states}
    assert states == {"raw": (0, "Ongoing"), "ghost": (E.TRANSACTIONAL_ID_NOT_FOUND, "")}
    listed = c.call(ListTransactionsRequest(state_filters=["Ongoing", "Bogus"], producer_id_filters=[],
                                            duration_filter=-1, transactional_id_pattern="ra.*"),
                    2, ListTransactionsResponse)
    assert [s.transactional_id for s in listed.transaction_states] == ["raw"]
    assert listed.unknown_state_filters == ["Bogus"]
    # A pattern that backtracks exponentially in Python's re is linear in RE2.
    evil_id = "a" * 40 + "!"
    assert c.call(InitProducerIdRequest(transactional_id=evil_id, transaction_timeout_ms=60_000),
                  4, InitProducerIdResponse).error_code == 0
    started = time.monotonic()
    evil = c.call(ListTransactionsRequest(state_filters=[], producer_id_filters=[], duration_filter=-1,
                                          transactional_id_pattern="(a+)+"), 2, ListTransactionsResponse)
    assert evil.error_code == 0 and evil.transaction_states == []
    assert time.monotonic() - started < 10  # backtracking would take hours
    bad = c.call(ListTransactionsRequest(state_filters=[], producer_id_filters=[], duration_filter=-1,
                                         transactional_id_pattern="("), 2, ListTransactionsResponse)
    assert bad.error_code == E.INVALID_REQUEST
    R = DescribeProducersRequest.TopicRequest
    prod = c.call(DescribeProducersRequest(topics=[R(name="raw", partition_indexes=[0, 5])]), 0,
                  DescribeProducersResponse)
    p0, p5 = prod.topics[0].partitions
    assert [(s.producer_id, s.current_txn_start_offset) for s in p0.active_producers] == [(pid, 0)]
    assert p5.error_code == E.UNKNOWN_TOPIC_OR_PARTITION

    # WriteTxnMarkers (the Admin's abortTransaction): aborts only, never a partition the
    # coordinator's open transaction holds.
    M = WriteTxnMarkersRequest.WritableTxnMarker
    def markers(commit: bool, partitions: list[int]) -> dict[int, int]:
        resp = c.call(WriteTxnMarkersRequest(markers=[M(
            producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=0,
            topics=[M.WritableTxnMarkerTopic(name="raw", partition_indexes=partitions)],
        )]), 1, WriteTxnMarkersResponse)
        return {p.partition_index: p.error_code for p in resp.markers[0].topics[0].partitions}
    assert markers(False, [0, 3]) == {0: E.INVALID_TXN_STATE, 3: E.UNKNOWN_TOPIC_OR_PARTITION}
    assert markers(True, [0]) == {0: E.INVALID_REQUEST}

    end = c.call(EndTxnRequest(transactional_id="raw", producer_id=pid, producer_epoch=epoch,
                               committed=False), 3, EndTxnResponse)
    assert end.error_code == 0
    end = c.call(EndTxnRequest(transactional_id="raw", producer_id=pid, producer_epoch=epoch,
                               committed=True), 3, EndTxnResponse)
    assert end.error_code == E.INVALID_TXN_STATE
    assert markers(False, [0]) == {0: E.NONE}  # nothing open any more: a harmless abort
