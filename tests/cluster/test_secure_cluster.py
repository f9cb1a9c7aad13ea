"""Three nodes with two listeners (PLAINTEXT and SASL_PLAINTEXT) and the authorizer on:
a client on either listener is told every node's address on that listener (Kafka
registers all of a broker's listeners), and a transaction across partitions led by
different nodes commits, the coordinator writing markers to the other leaders over the
SASL inter-node listener as the node's super user (WriteTxnMarkers needs CLUSTER_ACTION).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.cluster.clients import QUIET, wait_for
from tests.cluster.nodes import Node, start_together
from tests.cluster.test_leader_scale import CONTAINERS
from tests.cluster.zk import ZooKeeperServer
from tests.conftest import free_port

TOPIC = "sec-orders"
PARTITIONS = 6
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}


def _start(root: Path, zookeeper: str) -> tuple[list[Node], dict[int, int]]:
    nodes, sasl_ports = [], {}
    for node_id in (1, 2, 3):
        node = Node(root, node_id, zookeeper, CONTAINERS)
        sasl_ports[node_id] = free_port()
        config = root / f"node-{node_id}.toml"
        users = "\n".join(f'{u} = "{p}"' for u, p in PASSWORDS.items())
        config.write_text(
            f'listeners = "PLAINTEXT://127.0.0.1:{node.port},'
            f'SASL_PLAINTEXT://127.0.0.1:{sasl_ports[node_id]}"\n'
            '"inter.broker.listener.name" = "SASL_PLAINTEXT"\n'
            '"authorizer.class.name" = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"\n'
            '"super.users" = "User:admin"\n'
            '"admin.forward.user" = "admin"\n"admin.forward.password" = "admin-secret"\n'
            "[groups]\ninitial_rebalance_delay_ms = 0\n"
            f"[sasl.users]\n{users}\n"
        )
        node.extra_args += ["--config", str(config)]
        nodes.append(node)
    return start_together(nodes), sasl_ports


def _sasl(ports: dict[int, int], user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in ports.values()),
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user, "sasl.password": PASSWORDS[user], **QUIET,
    }



def test_each_listener_sees_every_node_and_markers_cross_nodes_with_the_authorizer_on(
    tmp_path: Path, zookeeper: ZooKeeperServer,
) -> None:
    nodes, sasl_ports = _start(tmp_path, zookeeper.hosts)
    try:
        plain = {n.node_id: n.port for n in nodes}

        def brokers(conf: dict[str, Any]) -> dict[int, tuple[str, int]]:
            md = AdminClient(conf).list_topics(timeout=10)
            return {b.id: (b.host, b.port) for b in md.brokers.values()}

        admin = AdminClient(_sasl(sasl_ports, "admin"))
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        alice = "User:alice"

        def allow(kind: ResourceType, name: str, op: AclOperation) -> AclBinding:
            return AclBinding(kind, name, ResourcePatternType.LITERAL, alice, "*", op,
                              AclPermissionType.ALLOW)

        grants = [allow(ResourceType.TOPIC, TOPIC, AclOperation.WRITE),
                  allow(ResourceType.TOPIC, TOPIC, AclOperation.READ),
                  allow(ResourceType.TRANSACTIONAL_ID, "sec-tx", AclOperation.WRITE),
                  allow(ResourceType.GROUP, "sec-check", AclOperation.READ)]
        for f in admin.create_acls(grants).values():
            f.result(15)
        granted_at = time.monotonic()

        for node in nodes:  # through each node, on each listener
            on_plain = brokers({"bootstrap.servers": node.bootstrap, **QUIET})
            assert on_plain == {i: ("127.0.0.1", p) for i, p in plain.items()}, on_plain
            one = {node.node_id: sasl_ports[node.node_id]}
            on_sasl = brokers(_sasl(one, "admin"))
            assert on_sasl == {i: ("127.0.0.1", p) for i, p in sasl_ports.items()}, on_sasl

        # The other nodes reload ACLs every 5 s.
        time.sleep(max(0.0, granted_at + 6 - time.monotonic()))
        def led() -> dict[int, int]:
            md = admin.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
            if md is None or md.error is not None:
                return {}
            found = {p: m.leader for p, m in md.partitions.items() if m.error is None}
            return found if len(found) == PARTITIONS else {}

        spread = wait_for("every partition led", led)
        assert len(set(spread.values())) >= 2, f"leaders not spread: {spread}"

        # alice needs no CLUSTER_ACTION: the nodes write the markers as their super user.
        producer = Producer({**_sasl(sasl_ports, "alice"), "transactional.id": "sec-tx"})
        producer.init_transactions(30)
        values = {f"c-{i}".encode() for i in range(60)}
        producer.begin_transaction()
        for i, value in enumerate(sorted(values)):
            producer.produce(TOPIC, value=value, partition=i % PARTITIONS)
        producer.commit_transaction(60)
        producer.begin_transaction()
        for i in range(12):
            producer.produce(TOPIC, value=b"aborted", partition=i % PARTITIONS)
        producer.abort_transaction(60)

        consumer = Consumer({**_sasl(sasl_ports, "alice"), "group.id": "sec-check",
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                             "enable.auto.commit": False})
        consumer.subscribe([TOPIC])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        consumer.close()
        assert sorted(got) == sorted(values)
    finally:
        for node in nodes:
            node.close()
