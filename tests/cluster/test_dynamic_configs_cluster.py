"""A dynamic broker config set as the cluster default through one node reaches every node
of the cluster (the table segment each node rereads), and a node's own value stays its own."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)

from tests.cluster.clients import QUIET
from tests.cluster.nodes import Node, start_nodes
from tests.cluster.zk import ZooKeeperServer
from tests.java.conftest import Java, java  # noqa: F401  (the compiled Java programs)

#: Generous against the nodes' 5 s reload on a loaded machine.
SEEN_DEADLINE_S = 60.0


def _described(node: Node) -> tuple[str, ConfigSource]:
    admin = AdminClient({"bootstrap.servers": node.bootstrap, **QUIET})
    resource = ConfigResource(ConfigResource.Type.BROKER, str(node.node_id))
    (entries,) = {k: f.result(timeout=30) for k, f in admin.describe_configs([resource]).items()}.values()
    entry = entries["message.max.bytes"]
    return entry.value, ConfigSource(entry.source)


def _wait_for(node: Node, expected: tuple[str, ConfigSource]) -> None:
    deadline = time.monotonic() + SEEN_DEADLINE_S
    while _described(node) != expected:
        assert time.monotonic() < deadline, (node.node_id, _described(node), expected)
        time.sleep(0.5)


def test_cluster_default_reaches_every_node(
    tmp_path: Path, zookeeper: ZooKeeperServer, java: Java,  # noqa: F811
) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 2, container_count=4)
    try:
        first, second = nodes
        out = java.run("BrokerConfigs", first.bootstrap, "", "message.max.bytes", "100000")
        assert "OK" in out.splitlines(), out
        for node in nodes:
            _wait_for(node, ("100000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        # The default resource holds the dynamic defaults alone, as Kafka describes it.
        out = java.run("BrokerConfigs", second.bootstrap, "", "--describe")
        described = [line for line in out.splitlines() if line.startswith("CONFIG ")]
        assert described == ["CONFIG message.max.bytes=100000 DYNAMIC_DEFAULT_BROKER_CONFIG"], out
        # The second node's own value: the first keeps the cluster default.
        admin = AdminClient({"bootstrap.servers": second.bootstrap, **QUIET})
        resource = ConfigResource(ConfigResource.Type.BROKER, str(second.node_id), incremental_configs=[
            ConfigEntry("message.max.bytes", "4000", incremental_operation=AlterConfigOpType.SET)])
        (future,) = admin.incremental_alter_configs([resource]).values()
        future.result(timeout=30)
        _wait_for(second, ("4000", ConfigSource.DYNAMIC_BROKER_CONFIG))
        assert _described(first) == ("100000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    finally:
        for node in nodes:
            node.close()
