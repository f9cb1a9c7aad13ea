"""Kafka transactions that a Spark task opens and the driver ends.

A task writes its rows with librdkafka's transactional producer (confluent-kafka) under a
transactional id of its own and leaves the transaction open; the driver ends it with
EndTxn (commit or abort) once Spark decides the batch, with the producer id and epoch the
task handed back. librdkafka does not return them from a call: they are read from its
statistics (the ``eos`` object: ``producer_id``, ``producer_epoch``, ``txn_state``), which
describe this producer's own state, so a later incarnation that fenced it cannot be
mistaken for it. Opening fences the id's earlier incarnation, which aborts what it left
open. Letting go of the producer without ``close()`` leaves the transaction open
(``close()`` aborts it). Every call has a deadline.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaException, Producer
from kafka.admin import KafkaAdminClient
from kafka.protocol.metadata import CoordinatorType
from kafka.protocol.producer import EndTxnRequest
from tidegate.spark.sink_log import OpenTransaction

log = logging.getLogger(__name__)

# Kafka error codes EndTxn may answer that leave nothing to do.
_NONE = 0
#: How long a task waits for its transaction's records to be acknowledged.
FLUSH_TIMEOUT_S = 120.0


def send_all(producer: Producer, records: Iterable[dict[str, Any]], errors: list[str],
             flush_timeout_s: float) -> int:
    """Every record produced (waiting out a full queue) and flushed; the count, or
    ``KafkaException`` when a delivery failed (``errors`` keeps them) or timed out."""

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    count = 0
    for record in records:
        while True:
            try:
                producer.produce(on_delivery=delivered, **record)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
        if errors:
            break
    left = producer.flush(flush_timeout_s)
    if errors or left:
        raise KafkaException(f"{len(errors) + left} records not delivered; first: {(errors or ['timed out'])[0]}")
    return count
_REQUEST_TIMEOUT_MS = 30_000
#: How long opening (InitProducerId, fencing the earlier incarnation) may take.
_INIT_TIMEOUT_S = 60.0
#: How long a task aborts its own transaction before leaving it to the coordinator.
_ABORT_TIMEOUT_S = 30.0
#: How often librdkafka reports its state while a task writes (the producer id and epoch).
_STATS_INTERVAL_MS = 20
#: How long a task waits for a report after its flush.
_STATS_TIMEOUT_S = 10.0


class TransactionError(RuntimeError):
    pass


class TaskTransaction:
    """One task's transaction: opened (fencing the id's earlier incarnation), written,
    then left open for the driver (``leave_open``) or aborted (``abort``)."""

    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int, client: dict[str, Any]) -> None:
        self.transactional_id = transactional_id
        # The count of reports and the last one (bounded), in a closure rather than a
        # method of self: a cycle through the producer's callback would leave the
        # producer's destruction to the garbage collector.
        reports: list[Any] = [0, ""]

        def on_report(raw: str) -> None:
            reports[0] += 1
            reports[1] = raw

        self._reports = reports
        self._errors: list[str] = []
        config: dict[str, Any] = {
            **client, "bootstrap.servers": bootstrap, "transactional.id": transactional_id,
            "transaction.timeout.ms": timeout_ms, "client.id": f"tidegate-spark-{transactional_id}",
            "statistics.interval.ms": _STATS_INTERVAL_MS, "stats_cb": on_report,
            "socket.timeout.ms": _REQUEST_TIMEOUT_MS,
        }
        self._producer: Producer | None = Producer(config)
        try:
            self._producer.init_transactions(_INIT_TIMEOUT_S)
            self._producer.begin_transaction()
        except BaseException:
            self._let_go()
            raise

    def write(self, records: Iterable[dict[str, Any]]) -> int:
        """Every record sent and acknowledged (or an error); the count."""
        return send_all(self._live(), records, self._errors, FLUSH_TIMEOUT_S)

    def leave_open(self, rows: int) -> OpenTransaction:
        """The transaction's producer id and epoch, from a report made after the flush;
        the producer let go without ending the transaction."""
        producer = self._live()
        seen = self._reports[0]
        deadline = time.monotonic() + _STATS_TIMEOUT_S
        while self._reports[0] <= seen:
            if time.monotonic() > deadline:
                raise TransactionError(f"{self.transactional_id}: librdkafka reported no state in {_STATS_TIMEOUT_S}s")
            producer.poll(_STATS_INTERVAL_MS / 1000)
        eos = json.loads(self._reports[1]).get("eos") or {}
        if eos.get("txn_state") != "InTransaction" or int(eos.get("producer_id", -1)) < 0:
            raise TransactionError(f"{self.transactional_id}: not in a transaction after its flush: {eos}")
        opened = OpenTransaction(self.transactional_id, int(eos["producer_id"]), int(eos["producer_epoch"]), rows)
        self._let_go()
        return opened

    def abort(self) -> None:
        """Aborted now rather than at its timeout: an open transaction holds read_committed
        readers of its partitions at its first record. Bounded: past it the coordinator's
        timeout (or the retried task's fencing) aborts it."""
        try:
            self._live().abort_transaction(_ABORT_TIMEOUT_S)
        except KafkaException as exc:
            log.warning("aborting %s: %s", self.transactional_id, exc)
        finally:
            self._let_go()

    def _live(self) -> Producer:
        if self._producer is None:
            raise TransactionError(f"{self.transactional_id}: the transaction was already handed on")
        return self._producer

    def _let_go(self) -> None:
        # Destroyed without close(): librdkafka's destruction sends no EndTxn.
        self._producer = None
        self._reports[1] = ""


def write_transaction(bootstrap: str, transactional_id: str, timeout_ms: int, client: dict[str, Any],
                      first: dict[str, Any], rest: Iterable[dict[str, Any]]) -> OpenTransaction:
    """Rows in a transaction left open for the driver; aborted at once on any error."""
    txn = TaskTransaction(bootstrap, transactional_id, timeout_ms, client)
    try:
        rows = txn.write(itertools.chain([first], rest))
        return txn.leave_open(rows)
    except BaseException:
        txn.abort()
        raise


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
