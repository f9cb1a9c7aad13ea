"""The campaign's clients, each on its own thread, each recording what the cluster
promised it: idempotent acks=all producers (unique values, every acknowledgement with its
partition, offset and send/ack times), a transactional producer that aborts every fifth
transaction (the outcome of each), and a read_committed consumer group (what it saw, and a
watcher of the group's committed offsets). Every call has a deadline; ``stop`` ends each."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from queue import Empty
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
)
from kafka.admin import KafkaAdminClient
from kafka.protocol.metadata import CoordinatorType

QUIET = {"log_level": 3}
JOIN_TIMEOUT_S = 150.0


@dataclass
class Ack:
    partition: int
    #: None: acknowledged with the offset unknown (confluent-kafka's ``offset()``).
    offset: int | None
    value: bytes
    sent_at: float
    acked_at: float


class IdempotentProducer(threading.Thread):
    """Sends ``<name>-<seq>`` to partition ``seq % partitions`` at ``rate_per_s``; a fatal
    error is recorded and the producer replaced (the sequence numbers carry on, so values
    stay unique)."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, rate_per_s: int) -> None:
        super().__init__(daemon=True, name=f"chaos-{name}")
        self.tag, self.bootstrap, self.topic = name, bootstrap, topic
        self.partitions, self.rate_per_s = partitions, rate_per_s
        self.acks: list[Ack] = []
        self.delivery_errors: list[str] = []
        self.fatal_errors: list[str] = []
        self.unflushed = 0
        #: How long the last flush may wait (cleanup after a failure shortens it).
        self.flush_timeout_s = 120.0
        self.stopping = threading.Event()
        self._fatal = threading.Event()

    def _new(self) -> Producer:
        def on_error(err: KafkaError) -> None:
            if err.fatal():
                self.fatal_errors.append(f"{time.monotonic():.1f} {err}")
                self._fatal.set()

        return Producer({
            "bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": 120_000, "error_cb": on_error,
            "topic.metadata.refresh.interval.ms": 2000, **QUIET,
        })

    def _done(self, err: KafkaError | None, msg: object) -> None:
        now = time.monotonic()
        if err is not None:
            self.delivery_errors.append(f"{now:.1f} {msg.partition()} {msg.value()!r}: {err}")  # type: ignore[attr-defined]
            return
        latency = msg.latency()  # type: ignore[attr-defined]
        self.acks.append(Ack(
            msg.partition(), msg.offset(), msg.value(),  # type: ignore[attr-defined]
            now - latency if latency and latency > 0 else now, now,
        ))

    def run(self) -> None:
        producer = self._new()
        seq = 0
        per_tick = max(1, self.rate_per_s // 20)
        while not self.stopping.is_set():
            if self._fatal.is_set():
                with contextlib.suppress(KafkaException):
                    producer.flush(10)  # what it still acknowledges is recorded
                producer = self._new()
                self._fatal.clear()
            tick_end = time.monotonic() + 0.05
            for _ in range(per_tick):
                try:
                    producer.produce(
                        self.topic, value=f"{self.tag}-{seq}".encode(),
                        partition=seq % self.partitions, on_delivery=self._done,
                    )
                except BufferError:
                    break  # the queue is full while a leader is away: send later
                seq += 1
            try:
                producer.poll(max(0.0, tick_end - time.monotonic()))
            except KafkaException as e:  # a fatal error is raised here as well as reported
                self.fatal_errors.append(f"{time.monotonic():.1f} {e.args[0]}")
                self._fatal.set()
        try:
            self.unflushed = producer.flush(self.flush_timeout_s)
        except KafkaException as e:
            self.fatal_errors.append(f"{time.monotonic():.1f} flush: {e.args[0]}")


@dataclass
class Transaction:
    number: int
    values: list[tuple[int, bytes]]
    #: "committed", "aborted" or "unknown" (a failure left the outcome open).
    outcome: str = "open"
    error: str = ""


class _TxnLoop:
    """Transactions of ``size`` values over the partitions; every fifth is aborted. A
    commit that fails retriably is tried again (up to a minute); an abortable error aborts;
    a fatal one replaces the producer, the transaction's outcome left "unknown". Runs in a
    child process (``TransactionalProducer``); ``report`` sends each step to the parent."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, transactional_id: str,
                 size: int, interval_s: float, report: Callable[..., None],
                 stopping: Any) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.transactional_id, self.size, self.interval_s = transactional_id, size, interval_s
        self.report, self.stopping = report, stopping

    def _new(self) -> Producer | None:
        while not self.stopping.is_set():
            producer = Producer({
                "bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
                "transaction.timeout.ms": 30_000, "message.timeout.ms": 30_000,
                "topic.metadata.refresh.interval.ms": 2000, **QUIET,
            })
            try:
                producer.init_transactions(60)
                return producer
            except KafkaException as e:
                self.report("error", f"{time.monotonic():.1f} init: {e.args[0]}")
        return None

    def _one(self, producer: Producer, txn: Transaction, abort: bool) -> bool:
        """Runs ``txn``; False when the producer must be replaced."""
        try:
            producer.begin_transaction()
            for partition, value in txn.values:
                while True:
                    try:
                        producer.produce(self.topic, value=value, partition=partition)
                        break
                    except BufferError:
                        producer.poll(0.1)
            if abort:
                producer.abort_transaction(60)
                txn.outcome = "aborted"
                return True
        except KafkaException as e:
            return self._failed(producer, txn, e.args[0])
        deadline = time.monotonic() + 60
        while True:
            try:
                producer.commit_transaction(60)
                txn.outcome = "committed"
                return True
            except KafkaException as e:
                err = e.args[0]
                if err.retriable() and not err.txn_requires_abort() and time.monotonic() < deadline:
                    self.report("error", f"{time.monotonic():.1f} commit {txn.number} retried: {err}")
                    continue
                return self._failed(producer, txn, err)

    def _failed(self, producer: Producer, txn: Transaction, err: KafkaError) -> bool:
        txn.error = str(err)
        self.report("error", f"{time.monotonic():.1f} txn {txn.number}: {err}")
        if err.txn_requires_abort():
            try:
                producer.abort_transaction(60)
                txn.outcome = "aborted"
                return True
            except KafkaException as e:
                txn.error += f"; abort: {e.args[0]}"
        txn.outcome = "unknown"
        return False

    def run(self, number: int) -> None:
        producer = self._new()
        while producer is not None and not self.stopping.is_set():
            values = [
                (i % self.partitions, f"tx-{number}-{i}".encode()) for i in range(self.size)
            ]
            txn = Transaction(number, values)
            self.report("begin", number, values)
            replace = not self._one(producer, txn, abort=number % 5 == 4)
            self.report("end", number, txn.outcome, txn.error)
            if replace:
                producer = self._new()
            number += 1
            self.stopping.wait(self.interval_s)


def _txn_child(queue: Any, stopping: Any, number: int, *args: Any) -> None:
    parent = os.getppid()

    def orphaned() -> None:  # a killed campaign leaves no client behind
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=orphaned, daemon=True).start()
    _TxnLoop(*args, report=lambda *m: queue.put(m), stopping=stopping).run(number)


class TransactionalProducer(threading.Thread):
    """Runs ``_TxnLoop`` in a child process and records its transactions. librdkafka has
    been seen to abort its process (an assertion in its transaction code) when a
    coordinator dies: the child's death then leaves its open transaction "unknown" and a
    new child carries on with the next number, instead of the campaign dying with it."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, transactional_id: str,
                 size: int = 10, interval_s: float = 0.2) -> None:
        super().__init__(daemon=True, name="chaos-txn")
        self.args = (bootstrap, topic, partitions, transactional_id, size, interval_s)
        self.transactions: list[Transaction] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self._mp = multiprocessing.get_context("spawn")

    def _take(self, message: tuple[Any, ...], by_number: dict[int, Transaction]) -> None:
        kind = message[0]
        if kind == "begin":
            txn = Transaction(message[1], [(p, bytes(v)) for p, v in message[2]])
            by_number[txn.number] = txn
            self.transactions.append(txn)
        elif kind == "end":
            txn = by_number[message[1]]
            txn.outcome, txn.error = message[2], message[3]
        else:
            self.errors.append(message[1])

    def run(self) -> None:
        by_number: dict[int, Transaction] = {}
        while not self.stopping.is_set():
            queue, child_stopping = self._mp.Queue(), self._mp.Event()
            number = self.transactions[-1].number + 1 if self.transactions else 0
            child = self._mp.Process(target=_txn_child, args=(queue, child_stopping, number, *self.args),
                                     daemon=True)
            child.start()
            while child.is_alive() or not queue.empty():
                if self.stopping.is_set():
                    child_stopping.set()
                try:
                    self._take(queue.get(timeout=0.2), by_number)
                except Empty:
                    continue
            child.join(5)
            if child.exitcode != 0:
                self.errors.append(f"{time.monotonic():.1f} client process died ({child.exitcode})")
                for txn in self.transactions:
                    if txn.outcome == "open":
                        txn.outcome, txn.error = "unknown", f"client process died ({child.exitcode})"
            queue.close()


@dataclass
class Seen:
    topic: str
    partition: int
    offset: int
    value: bytes


class GroupMember(threading.Thread):
    """A read_committed member of ``group`` on ``topics``, committing automatically; keeps
    what it saw and every commit the coordinator acknowledged, in the order answered."""

    def __init__(self, bootstrap: str, topics: list[str], group: str, name: str) -> None:
        super().__init__(daemon=True, name=f"chaos-{name}")
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "isolation.level": "read_committed", "session.timeout.ms": 10_000,
            "auto.commit.interval.ms": 1000, "topic.metadata.refresh.interval.ms": 2000,
            "on_commit": self._committed, **QUIET,
        })
        self.consumer.subscribe(topics)
        self.seen: list[Seen] = []
        #: (topic, partition, offset) of each acknowledged commit.
        self.commits: list[tuple[str, int, int]] = []
        self.stopping = threading.Event()

    def _committed(self, err: KafkaError | None, partitions: list[Any]) -> None:
        if err is None:
            self.commits += [(tp.topic, tp.partition, tp.offset) for tp in partitions
                             if tp.error is None and tp.offset >= 0]

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                msg = self.consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    self.seen.append(Seen(msg.topic(), msg.partition(), msg.offset(), msg.value()))
        finally:
            self.consumer.close()


@dataclass
class OffsetsWatch:
    #: (topic, partition) -> the last committed offset read.
    last: dict[tuple[str, int], int] = field(default_factory=dict)
    #: (topic, partition) -> the node that answered it.
    last_node: dict[tuple[str, int], int] = field(default_factory=dict)
    #: Every time a committed offset went backwards: (wall clock time of the read, topic,
    #: partition, before, the node that answered it, after, the node that answered it).
    backwards: list[tuple[str, str, int, int, int, int, int]] = field(default_factory=list)
    errors: int = 0


def wall_clock() -> str:
    """The time of day as the nodes' logs print it (UTC), to find a read in them."""
    now = time.time()
    return time.strftime("%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}"


class GroupOffsetsWatcher(threading.Thread):
    """Reads the group's committed offsets every ``interval_s``; records any going back,
    with the node that answered each read. kafka-python's admin client: librdkafka's
    aborted the campaign's process on an assertion in its admin request code after a
    kill -9."""

    def __init__(self, bootstrap: str, group: str, interval_s: float = 2.0) -> None:
        super().__init__(daemon=True, name="chaos-offsets")
        self.bootstrap = bootstrap.split(",")
        self.admin: KafkaAdminClient | None = None
        self.group, self.interval_s = group, interval_s
        self.watch = OffsetsWatch()
        self.stopping = threading.Event()

    def _read(self) -> tuple[int, dict[Any, Any]]:
        """(the node that answered, the group's offsets)."""
        if self.admin is None:
            self.admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10_000)
        found = self.admin.list_group_offsets(self.group)[self.group]
        # The coordinator kafka-python sent the OffsetFetch to, as it cached it.
        node = self.admin._manager.cluster.get_coordinator(self.group, CoordinatorType.GROUP)
        return (-1 if node is None else int(node)), found

    def read_once(self) -> None:
        try:
            node, found = self._read()
        except Exception:  # a coordinator away during a fault: read again later
            self.watch.errors += 1
            self.close()
            return
        when = wall_clock()
        for tp, committed in found.items():
            if committed.offset < 0:
                continue
            key = (tp.topic, tp.partition)
            before = self.watch.last.get(key)
            if before is not None and committed.offset < before:
                self.watch.backwards.append((
                    when, tp.topic, tp.partition, before, self.watch.last_node.get(key, -1),
                    committed.offset, node,
                ))
            self.watch.last[key] = committed.offset
            self.watch.last_node[key] = node

    def run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            self.read_once()

    def close(self) -> None:
        if self.admin is not None:
            self.admin.close()
            self.admin = None
