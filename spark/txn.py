"""Kafka transactions that a Spark task opens and the driver ends.

A task writes its rows inside a transaction of its own transactional id and leaves it
open; the driver ends it with EndTxn (commit or abort) once Spark decides the batch, with
the producer id and epoch the task handed back. Each transaction also commits, through
TxnOffsetCommit, ``batch id + 1`` as the offset of partition 0 of the output topic in a
marker group of its own (``<prefix>.sink.<task partition>``). A task first fences its
id's earlier incarnation (which aborts what it left open), then reads its marker: a batch
already there was committed by an earlier run of the query and is not written again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient
from kafka.protocol.metadata import CoordinatorType
from kafka.protocol.producer import EndTxnRequest
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KafkaPythonTopicPartition

# Kafka error codes EndTxn may answer that leave nothing to do.
_NONE = 0


class TransactionError(RuntimeError):
    pass


@dataclass
class OpenTransaction:
    """What a task hands the driver: enough to end its transaction (a commit message)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    marker_group: str
    marker_topic: str
    rows: int


def marker_group(prefix: str, task_partition: int) -> str:
    return f"{prefix}.sink.{task_partition}"


def fenced_producer(bootstrap: str, transactional_id: str, timeout_ms: int) -> Any:
    """A transactional producer whose init fenced (and so aborted) whatever an earlier
    attempt of the same task left open; no transaction begun yet."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap.split(","), transactional_id=transactional_id,
        transaction_timeout_ms=timeout_ms, client_id=f"tidegate-spark-{transactional_id}",
    )
    producer.init_transactions()
    return producer


def leave_open(producer: Any, marker: str, topic: str, batch_id: int, rows: int) -> OpenTransaction:
    """Commit the marker inside the transaction, flush, and let go of the producer without
    ending it (kafka-python's close never aborts)."""
    producer.send_offsets_to_transaction(
        {KafkaPythonTopicPartition(topic, 0): OffsetAndMetadata(batch_id + 1, f"batch {batch_id}", -1)},
        marker,
    )
    producer.flush()
    pid_epoch = producer._transaction_manager.producer_id_and_epoch  # pinned kafka-python 3.0.12
    opened = OpenTransaction(
        producer.config["transactional_id"], pid_epoch.producer_id, pid_epoch.epoch, marker, topic, rows,
    )
    producer.close()
    return opened


def committed_batch(bootstrap: str, group: str, topic: str) -> int:
    """The last batch id a committed transaction of this marker group wrote (-1: none).
    librdkafka asks for stable offsets: this waits while a transaction holds the group's."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "client.id": f"tidegate-spark-{uuid.uuid4().hex}"})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=30.0)
        return int(tp.offset) - 1 if tp.offset >= 0 else -1
    finally:
        consumer.close()


class TransactionEnder:
    """EndTxn from the driver, to the transaction coordinator of each id."""

    def __init__(self, bootstrap: str) -> None:
        self._admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), client_id="tidegate-spark-driver")

    def end(self, txn: OpenTransaction, commit: bool) -> None:
        async def run() -> Any:
            # kafka-python 3.0.12 (pinned) routes by coordinator with these helpers.
            node = await self._admin._find_coordinator_id(txn.transactional_id, CoordinatorType.TRANSACTION)
            request = EndTxnRequest(
                transactional_id=txn.transactional_id, producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch, committed=commit, max_version=3,
            )
            return await self._admin._manager.send(request, node_id=node)

        response = self._admin._manager.run(run)
        if response.error_code != _NONE:
            raise TransactionError(
                f"EndTxn({'commit' if commit else 'abort'}) of {txn.transactional_id} "
                f"(producer {txn.producer_id} epoch {txn.producer_epoch}): error {response.error_code}")

    def close(self) -> None:
        self._admin.close()
