"""Kafka transactions that a Spark task opens and the driver ends.

A task writes its rows inside a transaction of its own transactional id and leaves it
open; the driver ends it with EndTxn (commit or abort) once Spark decides the batch, with
the producer id and epoch the task handed back. Opening fences the id's earlier
incarnation, which aborts what it left open. Every call has a deadline: the producer's
``max_block_ms`` and ``request_timeout_ms``, and the flush's.
"""

from __future__ import annotations

from typing import Any

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient
from kafka.protocol.metadata import CoordinatorType
from kafka.protocol.producer import EndTxnRequest
from tidegate.spark.sink_log import OpenTransaction

# Kafka error codes EndTxn may answer that leave nothing to do.
_NONE = 0
#: How long a task waits for its transaction's records to be acknowledged.
FLUSH_TIMEOUT_S = 120.0
_REQUEST_TIMEOUT_MS = 30_000
_MAX_BLOCK_MS = 60_000


class TransactionError(RuntimeError):
    pass


def fenced_producer(bootstrap: str, transactional_id: str, timeout_ms: int) -> Any:
    """A transactional producer whose init fenced (and so aborted) whatever an earlier
    attempt of the same task left open; no transaction begun yet."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap.split(","), transactional_id=transactional_id,
        transaction_timeout_ms=timeout_ms, client_id=f"tidegate-spark-{transactional_id}",
        request_timeout_ms=_REQUEST_TIMEOUT_MS, max_block_ms=_MAX_BLOCK_MS,
        # A missing topic fails the send at its metadata wait rather than being retried.
        allow_auto_create_topics=False,
    )
    try:
        producer.init_transactions()
    except BaseException:
        producer.close(timeout=5)
        raise
    return producer


def leave_open(producer: Any, rows: int) -> OpenTransaction:
    """Flush and let go of the producer without ending its transaction (kafka-python's
    close never aborts)."""
    producer.flush(timeout=FLUSH_TIMEOUT_S)
    pid_epoch = producer._transaction_manager.producer_id_and_epoch  # pinned kafka-python 3.0.12
    opened = OpenTransaction(producer.config["transactional_id"], pid_epoch.producer_id, pid_epoch.epoch, rows)
    producer.close(timeout=5)
    return opened


class TransactionEnder:
    """EndTxn from the driver, to the transaction coordinator of each id."""

    def __init__(self, bootstrap: str) -> None:
        self._admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), client_id="tidegate-spark-driver",
                                       request_timeout_ms=_REQUEST_TIMEOUT_MS)

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
