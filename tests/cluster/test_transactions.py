"""Kafka transactions against three nodes: one node coordinates every transactional id
(and every group), the others answer NOT_COORDINATOR on a connection that stays open;
the coordinator writes markers into partitions other nodes lead; after a ``kill -9`` of
the coordinator node another takes over, aborts the transaction left open and serves the
same transactional id. A read_committed consumer sees exactly the committed records."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
)
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse
from tidegate.core.segmentstore.service import container_of
from tidegate.gateway.groups import GroupConfig
from tidegate.protocol.errors import ErrorCode as E

from tests.cluster.clients import QUIET, coordinator, leaders, wait_for
from tests.cluster.nodes import start_nodes
from tests.cluster.test_leader_scale import CONTAINERS, _zk_state
from tests.cluster.zk import ZooKeeperServer
from tests.txn.test_raw_requests import Conn

TOPIC = "tx-orders"
PARTITIONS = 6




def _transaction(producer: Producer, tag: str, *, commit: bool) -> set[bytes]:
    producer.begin_transaction()
    values = {f"{tag}-{i}".encode() for i in range(60)}
    for i, value in enumerate(sorted(values)):
        producer.produce(TOPIC, value=value, partition=i % PARTITIONS)
    if commit:
        producer.commit_transaction(60)
    else:
        producer.abort_transaction(60)
    return values


def _committed(bootstrap: str, expected: int) -> list[bytes]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "tx-check", "auto.offset.reset": "earliest",
        "isolation.level": "read_committed", "enable.auto.commit": False, **QUIET,
    })
    consumer.subscribe([TOPIC])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    quiet_until = None
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
        if len(got) >= expected:  # and a little longer: nothing aborted may follow
            quiet_until = quiet_until or time.monotonic() + 3
            if time.monotonic() > quiet_until:
                break
    consumer.close()
    return got


def test_transactions_on_one_coordinator_survive_its_kill9(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=CONTAINERS)
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        owners, _ = _zk_state(zookeeper.hosts)
        coord_id = owners[container_of(GroupConfig().table, CONTAINERS)]
        coord = next(n for n in nodes if n.node_id == coord_id)
        other = next(n for n in nodes if n.node_id != coord_id)
        assert {coordinator(n.port, "tx-a", 1) for n in nodes} == {coord_id}

        # A node that does not coordinate answers NOT_COORDINATOR and keeps the connection.
        conn = Conn(other.port)
        init = conn.call(InitProducerIdRequest(transactional_id="tx-a", transaction_timeout_ms=10_000),
                         1, InitProducerIdResponse)
        assert init.error_code == E.NOT_COORDINATOR
        beat = conn.call(HeartbeatRequest(group_id="g", generation_id=1, member_id="m"),
                         1, HeartbeatResponse)
        assert beat.error_code == E.NOT_COORDINATOR
        assert conn.call(ApiVersionsRequest(), 0, ApiVersionsResponse).error_code == E.NONE
        conn.sock.close()

        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        spread = wait_for("every partition led", lambda: (lead := leaders(bootstrap, TOPIC))
                           and len(lead) == PARTITIONS and lead)
        assert len(set(spread.values())) >= 2, f"leaders not spread: {spread}"

        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-a", **QUIET})
        producer.init_transactions(60)
        committed = _transaction(producer, "c0", commit=True)
        committed |= _transaction(producer, "c1", commit=True)
        _transaction(producer, "a0", commit=False)
        # Left open on the coordinator when it dies: the next incarnation aborts it.
        producer.begin_transaction()
        for i in range(30):
            producer.produce(TOPIC, value=f"open-{i}".encode(), partition=i % PARTITIONS)
        assert producer.flush(30) == 0

        coord.kill9()
        survivors = [n for n in nodes if n is not coord]
        new_id = wait_for("another coordinator", lambda: (c := coordinator(survivors[0].port, "tx-a", 1)) > 0
                           and c != coord_id and c)
        assert coordinator(survivors[1].port, "tx-a", 1) == new_id
        again = Producer({
            "bootstrap.servers": ",".join(n.bootstrap for n in survivors), "transactional.id": "tx-a",
            **QUIET,
        })
        again.init_transactions(90)
        committed |= _transaction(again, "c2", commit=True)

        got = _committed(",".join(n.bootstrap for n in survivors), len(committed))
        assert len(got) == len(set(got)), "a committed record was read twice"
        assert set(got) == committed, (
            f"missing {sorted(committed - set(got))[:5]}, unexpected {sorted(set(got) - committed)[:5]}"
        )
    finally:
        for node in nodes:
            node.close()
