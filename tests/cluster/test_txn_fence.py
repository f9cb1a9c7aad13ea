"""Issue 36, item 1: a partition leader on a node that does not coordinate the
transaction enforces it (DESIGN.md invariant 7). A transactional batch that reaches the
leader after its transaction's abort marker (a delayed or zombie producer's request) is
refused, so a later commit of the same producer cannot make it visible to read_committed.
The late batch is sent raw (kafka-python's protocol classes), as such a producer would."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.record.default_records import DefaultRecordBatchBuilder
from tidegate.core.segmentstore.service import container_of
from tidegate.gateway.groups import GroupConfig
from tidegate.protocol.errors import ErrorCode as E

from tests.clients.requests import Conn
from tests.cluster.clients import QUIET, leaders
from tests.cluster.nodes import start_nodes
from tests.cluster.test_leader_scale import CONTAINERS, _zk_state
from tests.cluster.zk import ZooKeeperServer

TOPIC = "fence"
PARTITIONS = 6
TID = "fence-tx"
_Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
#: Answers a client retries (the coordinator busy completing, or moving; a leader that
#: has not yet seen the new topic).
_RETRIED = (E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR,
            E.COORDINATOR_NOT_AVAILABLE, E.NOT_ENOUGH_REPLICAS, E.NOT_LEADER_OR_FOLLOWER,
            E.UNKNOWN_TOPIC_OR_PARTITION)


def _until(what: str, call: Any, timeout_s: float = 60) -> Any:
    """``call()`` (an error code, or (code, value)) again until it is not retriable."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = call()
        code = found[0] if isinstance(found, tuple) else found
        if code not in _RETRIED or time.monotonic() > deadline:
            assert code == E.NONE, f"{what}: {E(code).name}"
            return found
        time.sleep(0.2)


def _batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=True, producer_id=pid,
        producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20,
    )
    builder.append(0, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    return bytes(builder.build())


def _produce(conn: Conn, partition: int, pid: int, epoch: int, seq: int, value: bytes,
             version: int = 9) -> int:
    part = ProduceRequest.TopicProduceData.PartitionProduceData(
        index=partition, records=_batch(pid, epoch, seq, value))
    req = ProduceRequest(transactional_id=TID, acks=-1, timeout_ms=10_000,
                         topic_data=[ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[part])])
    return int(conn.call(req, version, ProduceResponse).responses[0].partition_responses[0].error_code)


def _add(conn: Conn, pid: int, epoch: int, partition: int) -> int:
    add = conn.call(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TID, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[_Topic(name=TOPIC, partitions=[partition])],
    ), 3, AddPartitionsToTxnResponse)
    return int(add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


def _end(conn: Conn, pid: int, epoch: int, *, commit: bool) -> int:
    end = conn.call(EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=epoch,
                                  committed=commit), 3, EndTxnResponse)
    return int(end.error_code)


def _end_v5(conn: Conn, pid: int, epoch: int, *, commit: bool) -> tuple[int, tuple[int, int]]:
    """EndTxn v5 (transaction version 2): the error and the producer id and epoch to go on with."""
    end = conn.call(EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=epoch,
                                  committed=commit), 5, EndTxnResponse)
    return int(end.error_code), (int(end.producer_id), int(end.producer_epoch))


def _high_watermark(conn: Conn, partition: int) -> int:
    """The partition's high watermark, asked of its leader (ListOffsets, latest)."""
    T = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[T(name=TOPIC, partitions=[
        T.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=-1)])])
    found = conn.call(req, 4, ListOffsetsResponse).topics[0].partitions[0]
    assert found.error_code == E.NONE, E(found.error_code).name
    return int(found.offset)


def _read_committed(bootstrap: str, partition: int, end_offset: int) -> list[bytes]:
    """Every record read_committed returns from the partition, up to ``end_offset``."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "fence-check", "isolation.level": "read_committed",
        "enable.auto.commit": False, "enable.partition.eof": True, **QUIET,
    })
    consumer.assign([TopicPartition(TOPIC, partition, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is None:
                got.append(msg.value())
            position = consumer.position([TopicPartition(TOPIC, partition)])[0].offset
            if position >= end_offset:
                return got
        raise AssertionError(f"read_committed did not reach offset {end_offset}; got {got}")
    finally:
        consumer.close()


@contextlib.contextmanager
def _cluster(tmp_path: Path, hosts: str) -> Iterator[tuple[str, Conn, Conn, int, int, int]]:
    """Three nodes, the topic, connections to the transaction coordinator and to the
    leader of a partition on another node; the producer id and epoch of ``TID``."""
    nodes = start_nodes(tmp_path, hosts, 3, container_count=CONTAINERS)
    conns: list[Conn] = []
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        owners, _ = _zk_state(hosts)
        coord_id = owners[container_of(GroupConfig().table, CONTAINERS)]
        coord = next(n for n in nodes if n.node_id == coord_id)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        deadline = time.monotonic() + 60
        while len(spread := leaders(bootstrap, TOPIC)) < PARTITIONS:
            assert time.monotonic() < deadline, f"partitions not all led: {spread}"
            time.sleep(0.2)
        partition, leader_id = next((p, n) for p, n in sorted(spread.items()) if n != coord_id)
        leader = next(n for n in nodes if n.node_id == leader_id)
        to_coord, to_leader = Conn(coord.port), Conn(leader.port)
        conns += [to_coord, to_leader]

        def init() -> tuple[int, Any]:
            got = to_coord.call(InitProducerIdRequest(transactional_id=TID, transaction_timeout_ms=60_000),
                                1, InitProducerIdResponse)
            return int(got.error_code), got

        found = _until("InitProducerId", init)[1]
        yield bootstrap, to_coord, to_leader, partition, found.producer_id, found.producer_epoch
    finally:
        for conn in conns:
            conn.close()
        for node in nodes:
            node.close()


def test_a_late_batch_after_the_abort_marker_is_refused_by_a_leader_elsewhere(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    with _cluster(tmp_path, zookeeper.hosts) as (bootstrap, to_coord, to_leader, partition, pid, epoch):
        # Transaction 1 on a partition led away from its coordinator: verified there.
        _until("AddPartitionsToTxn", lambda: _add(to_coord, pid, epoch, partition))
        _until("produce t1-0", lambda: _produce(to_leader, partition, pid, epoch, 0, b"t1-0"))
        _until("produce t1-1", lambda: _produce(to_leader, partition, pid, epoch, 1, b"t1-1"))
        _until("abort", lambda: _end(to_coord, pid, epoch, commit=False))
        deadline = time.monotonic() + 60
        while _high_watermark(to_leader, partition) < 3:  # two records and the abort marker
            assert time.monotonic() < deadline, "the abort marker was not written"
            time.sleep(0.2)

        # The zombie: a batch of the aborted transaction arriving after its marker.
        late = _produce(to_leader, partition, pid, epoch, 2, b"late")
        assert late == E.INVALID_TXN_STATE, E(late).name
        assert _high_watermark(to_leader, partition) == 3

        # Transaction 2 of the same producer adds the partition again and commits: only
        # its own record becomes visible.
        _until("AddPartitionsToTxn 2", lambda: _add(to_coord, pid, epoch, partition))
        _until("produce t2-0", lambda: _produce(to_leader, partition, pid, epoch, 2, b"t2-0"))
        _until("commit", lambda: _end(to_coord, pid, epoch, commit=True))
        deadline = time.monotonic() + 60
        while (end := _high_watermark(to_leader, partition)) < 5:
            assert time.monotonic() < deadline, "the commit marker was not written"
            time.sleep(0.2)
        assert _read_committed(bootstrap, partition, end) == [b"t2-0"]


def test_tv2_leader_elsewhere_adds_the_partition_and_fences_the_old_epoch(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    """Transaction version 2 (KIP-890): Produce v12 to a leader on another node than the
    coordinator, with no AddPartitionsToTxn: the leader has the coordinator add the
    partition (AddPartitionsToTxn v4 without ``verify_only``); EndTxn v5 bumps the epoch
    and the markers carry it, so a late batch of the ended transaction is fenced."""
    with _cluster(tmp_path, zookeeper.hosts) as (bootstrap, to_coord, to_leader, partition, pid, epoch):
        _until("produce t1-0", lambda: _produce(to_leader, partition, pid, epoch, 0, b"t1-0", 12))
        _until("produce t1-1", lambda: _produce(to_leader, partition, pid, epoch, 1, b"t1-1", 12))
        ended = _until("commit", lambda: _end_v5(to_coord, pid, epoch, commit=True))
        assert ended[1] == (pid, epoch + 1)
        deadline = time.monotonic() + 60
        while _high_watermark(to_leader, partition) < 3:  # two records and the commit marker
            assert time.monotonic() < deadline, "the commit marker was not written"
            time.sleep(0.2)

        late = _produce(to_leader, partition, pid, epoch, 2, b"late", 12)
        assert late == E.INVALID_PRODUCER_EPOCH, E(late).name
        assert _high_watermark(to_leader, partition) == 3

        # The next transaction with the bumped epoch (sequences from 0), aborted.
        _until("produce t2-0", lambda: _produce(to_leader, partition, pid, epoch + 1, 0, b"t2-0", 12))
        ended = _until("abort", lambda: _end_v5(to_coord, pid, epoch + 1, commit=False))
        assert ended[1] == (pid, epoch + 2)
        deadline = time.monotonic() + 60
        while (end := _high_watermark(to_leader, partition)) < 5:
            assert time.monotonic() < deadline, "the abort marker was not written"
            time.sleep(0.2)
        assert _read_committed(bootstrap, partition, end) == [b"t1-0", b"t1-1"]
