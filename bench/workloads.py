"""The Kafka workloads, driven by confluent-kafka clients in separate processes.

Clients run in `spawn`ed processes (``bench.workers``). All processes time with `time.monotonic()`, CLOCK_MONOTONIC, which is one clock
for the whole machine, so times taken in different processes can be subtracted.
"""

from __future__ import annotations

import math
import os
import struct
import time
from dataclasses import dataclass
from typing import Any

from bench.workers import SPAWN, Gate, WorkloadError, run_workers


@dataclass(frozen=True)
class ClientTuning:
    """Producer/consumer settings a user tuning for throughput would pick; same for all systems."""

    linger_ms: int = 5
    batch_bytes: int = 1_000_000
    batch_records_max: int = 100_000
    queue_records_max: int = 1_000_000
    fetch_partition_bytes_max: int = 8 * 1024 * 1024
    latency_linger_ms: int = 1
    # librdkafka's default, written out: how long a broker may hold a fetch that has no
    # data yet. A broker that answers as soon as data arrives is not slowed by it.
    fetch_wait_max_ms: int = 500
    # librdkafka stops fetching a partition for this long once its queue holds
    # `queued.min.messages` (100,000); the default, 1000 ms, is what its docs say to lower
    # when consumers see ~1 s pauses. With 100 B records a couple of answers pass that
    # count, and the client, asleep, then sets the pace (bench/RESULTS.md).
    fetch_queue_backoff_ms: int = 10

    def producer(self, bootstrap: str, linger_ms: int | None = None) -> dict[str, Any]:
        return {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "compression.type": "none",
            "linger.ms": self.linger_ms if linger_ms is None else linger_ms,
            "batch.size": self.batch_bytes,
            "batch.num.messages": self.batch_records_max,
            "queue.buffering.max.messages": self.queue_records_max,
            "enable.idempotence": False,
        }

    def consumer(self, bootstrap: str) -> dict[str, Any]:
        # confluent-kafka insists on a group.id; partitions are assigned by hand and no
        # offsets are committed, so no group coordination takes part in the figures.
        return {
            "bootstrap.servers": bootstrap,
            "group.id": "tidegate-bench",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": self.fetch_partition_bytes_max,
            "fetch.wait.max.ms": self.fetch_wait_max_ms,
            "fetch.queue.backoff.ms": self.fetch_queue_backoff_ms,
        }


@dataclass(frozen=True)
class PhaseResult:
    """One measured phase. `server_cpu_s` is the server's CPU time during the phase."""

    records: int
    payload_bytes: int
    wall_s: float
    server_cpu_s: float
    # CPU time the client processes used during the phase.
    client_cpu_s: float = 0.0
    # Consume only: from assigning the partitions to the first record in hand.
    first_record_s: float | None = None
    # Shares of the whole machine's CPU time during the phase: busy (everything, the
    # hypervisor's steal included) and steal alone. Near 1 busy: the machine is the limit.
    machine_busy: float = 0.0
    machine_steal: float = 0.0
    # Bytes the machine's disks read and wrote during the phase (every process: the
    # server's own writes, the kernel's write-back of them, anything else running).
    disk_read_bytes: int = 0
    disk_written_bytes: int = 0

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / self.wall_s / 1e6

    @property
    def records_per_s(self) -> float:
        return self.records / self.wall_s

    @property
    def cpu_s_per_gb(self) -> float:
        return self.server_cpu_s / (self.payload_bytes / 1e9)

    @property
    def client_cpu_s_per_gb(self) -> float:
        return self.client_cpu_s / (self.payload_bytes / 1e9)


# Consumers start at offset 0, not at OFFSET_BEGINNING: every topic here is new, and
# Tansu 0.6.0's ListOffsets(earliest) was seen answering 967 for a fresh topic whose
# records start at 0 (the consumer then missed 967 records); the same run read from 0 in full.
FIRST_OFFSET = 0


def create_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=timeout_s)
    futures[topic].result(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=timeout_s)
        t = meta.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            return
        time.sleep(0.05)
    raise WorkloadError(f"topic {topic} with {partitions} partitions never appeared")


# -- produce -----------------------------------------------------------------------------


def _produce_worker(
    bootstrap: str,
    tuning: ClientTuning,
    topic: str,
    record_bytes: int,
    records: int,
    timeout_s: float,
    gate: Gate,
    txn_commit_ms: int = 0,
    txn_commit_records: int = 0,
) -> None:
    import uuid

    from confluent_kafka import Producer

    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    conf = tuning.producer(bootstrap)
    conf.update({"delivery.report.only.error": True, "on_delivery": on_delivery})
    transactional = bool(txn_commit_ms or txn_commit_records)
    if transactional:
        conf.update({"transactional.id": f"bench-{uuid.uuid4().hex}",
                     "enable.idempotence": True, "acks": "all"})
    producer = Producer(conf)
    producer.list_topics(topic, timeout=timeout_s)  # connect and learn leaders untimed
    if transactional:
        producer.init_transactions(timeout_s)
    value = os.urandom(record_bytes)
    gate.ready_then_wait(timeout_s)
    start, cpu0 = time.monotonic(), time.process_time()
    produce, poll = producer.produce, producer.poll
    commit_s = txn_commit_ms / 1000
    if transactional:
        producer.begin_transaction()
        txn_start = time.monotonic()
    for i in range(records):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                poll(0.001)
        if i & 0x3FFF == 0:
            poll(0)
        # A transaction every `txn_commit_ms` (checked every 64 records: a clock read
        # per record would be a client cost of its own).
        if txn_commit_ms and i & 0x3F == 0 and time.monotonic() - txn_start >= commit_s:
            producer.commit_transaction(timeout_s)
            producer.begin_transaction()
            txn_start = time.monotonic()
        elif txn_commit_records and i % txn_commit_records == txn_commit_records - 1:
            producer.commit_transaction(timeout_s)
            producer.begin_transaction()
    if transactional:
        producer.commit_transaction(timeout_s)
    undelivered = producer.flush(timeout_s)
    end = time.monotonic()
    gate.report(
        {
            "start": start,
            "end": end,
            "cpu_s": time.process_time() - cpu0,
            "failures": len(failures) + undelivered,
            "first_failure": failures[0] if failures else None,
        }
    )


def run_produce(
    bootstrap: str,
    tuning: ClientTuning,
    topic: str,
    record_bytes: int,
    records: int,
    processes: int,
    server_pid: int,
    timeout_s: float,
    txn_commit_ms: int = 0,
    txn_commit_records: int = 0,
) -> PhaseResult:
    """`records` records of `record_bytes` split over `processes` producers, acks=all;
    with `txn_commit_ms` (or `txn_commit_records`), transactional producers committing
    that often (every that many records each)."""
    gate = Gate.new()
    shares = [
        records // processes + (1 if i < records % processes else 0) for i in range(processes)
    ]
    procs = [
        SPAWN.Process(
            target=_produce_worker,
            daemon=True,
            args=(bootstrap, tuning, topic, record_bytes, n, timeout_s, gate, txn_commit_ms,
                  txn_commit_records),
        )
        for n in shares
    ]
    results = run_workers(procs, gate, server_pid, timeout_s)
    reports = results.reports
    failures = sum(r["failures"] for r in reports)
    if failures:
        first = next(r["first_failure"] for r in reports if r["failures"])
        raise WorkloadError(f"{failures} records not acknowledged (first: {first})")
    wall = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    return PhaseResult(
        records,
        records * record_bytes,
        wall,
        results.server_cpu_s,
        client_cpu_s=sum(r["cpu_s"] for r in reports),
        machine_busy=results.machine_busy,
        machine_steal=results.machine_steal,
        disk_read_bytes=results.disk_read_bytes,
        disk_written_bytes=results.disk_written_bytes,
    )


# -- consume -----------------------------------------------------------------------------


def _consume_worker(
    bootstrap: str,
    tuning: ClientTuning,
    topic: str,
    partitions: list[int],
    records: int,
    consumed: Any,
    timeout_s: float,
    idle_timeout_s: float,
    gate: Gate,
) -> None:
    """Read `partitions` until all consumers together (`consumed`, a shared counter)
    hold `records`, no record arrives for `idle_timeout_s`, or `timeout_s` passes."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(tuning.consumer(bootstrap))
    consumer.list_topics(topic, timeout=timeout_s)
    gate.ready_then_wait(timeout_s)
    start, cpu0 = time.monotonic(), time.process_time()
    got = payload = errors = 0
    first_error = first_record = last_record = None
    if partitions:
        consumer.assign([TopicPartition(topic, p, FIRST_OFFSET) for p in partitions])
    deadline = start + timeout_s
    last_progress = start
    while partitions and consumed.value < records and time.monotonic() < deadline:
        # consume() returns only once it has that many records or the timeout passed, so
        # it is never asked for more than remain; the phase ends at the last record in
        # hand (`last_record`), not when the last call returns.
        wanted = max(1, min(_CONSUME_BATCH, records - consumed.value))
        batch = consumer.consume(wanted, 0.1)
        now = time.monotonic()
        if not batch:
            if now - last_progress > idle_timeout_s:
                break
            continue
        last_progress = last_record = now
        first_record = first_record or now
        good = 0
        for m in batch:
            if m.error() is not None:
                errors += 1
                first_error = first_error or str(m.error())
                continue
            good += 1
            payload += len(m)
        got += good
        with consumed.get_lock():
            consumed.value += good
    cpu_s = time.process_time() - cpu0
    consumer.close()
    gate.report(
        {
            "start": start,
            "first_record": first_record,
            "last_record": last_record,
            "records": got,
            "payload": payload,
            "errors": errors,
            "first_error": first_error,
            "cpu_s": cpu_s,
        }
    )


def run_consume(
    bootstrap: str,
    tuning: ClientTuning,
    topic: str,
    partitions: int,
    records: int,
    server_pid: int,
    timeout_s: float,
    idle_timeout_s: float = 20.0,
    consumers: int = 1,
) -> PhaseResult:
    """Read all `records` of `topic` from offset 0, its partitions dealt round-robin to
    `consumers` processes (never more processes than partitions).

    Fails unless exactly `records` arrive within `timeout_s`, or if none arrive for
    `idle_timeout_s` before that.
    """
    gate = Gate.new()
    consumed = SPAWN.Value("q", 0)
    n = max(1, min(consumers, partitions))
    procs = [
        SPAWN.Process(
            target=_consume_worker,
            daemon=True,
            args=(
                bootstrap,
                tuning,
                topic,
                list(range(i, partitions, n)),
                records,
                consumed,
                timeout_s,
                idle_timeout_s,
                gate,
            ),
        )  # fmt: skip
        for i in range(n)
    ]
    results = run_workers(procs, gate, server_pid, timeout_s)
    reports = results.reports
    got = sum(r["records"] for r in reports)
    if got != records:
        errors = sum(r["errors"] for r in reports)
        first = next((r["first_error"] for r in reports if r["first_error"]), None)
        raise WorkloadError(
            f"consumed {got} of {records} records ({errors} errors, first: {first})"
        )
    start = min(r["start"] for r in reports)
    return PhaseResult(
        got,
        sum(r["payload"] for r in reports),
        max(r["last_record"] for r in reports if r["last_record"] is not None) - start,
        results.server_cpu_s,
        client_cpu_s=sum(r["cpu_s"] for r in reports),
        first_record_s=min(r["first_record"] for r in reports if r["first_record"]) - start,
        machine_busy=results.machine_busy,
        machine_steal=results.machine_steal,
        disk_read_bytes=results.disk_read_bytes,
        disk_written_bytes=results.disk_written_bytes,
    )


# -- latency -----------------------------------------------------------------------------

# Records asked of one consume() call in the throughput consumer.
_CONSUME_BATCH = 10_000

# Latency records start with the send time (monotonic ns) and a sequence number.
_STAMP = struct.Struct(">QQ")


def _latency_producer(
    bootstrap: str,
    tuning: ClientTuning,
    topic: str,
    record_bytes: int,
    rate_records_per_s: float,
    records: int,
    timeout_s: float,
    gate: Gate,
) -> None:
    from confluent_kafka import Producer

    producer = Producer(tuning.producer(bootstrap, linger_ms=tuning.latency_linger_ms))
    producer.list_topics(topic, timeout=timeout_s)
    pad = os.urandom(max(0, record_bytes - _STAMP.size))
    acked_ns = [0] * records
    sent_ns = [0] * records
    failures: list[str] = []

    def delivered(seq: int) -> Any:
        def cb(err: Any, _msg: Any) -> None:
            if err is not None:
                failures.append(str(err))
            acked_ns[seq] = time.monotonic_ns()

        return cb

    gate.ready_then_wait(timeout_s)
    start, cpu0 = time.monotonic(), time.process_time()
    for seq in range(records):
        due = start + seq / rate_records_per_s
        while (wait := due - time.monotonic()) > 0:
            # librdkafka takes whole milliseconds: poll(<1 ms) returns at once and would
            # spin a core the server needs, so short waits sleep instead.
            if wait >= 0.001:
                producer.poll(wait)
            else:
                time.sleep(wait)
        now = time.monotonic_ns()
        sent_ns[seq] = now
        producer.produce(
            topic, _STAMP.pack(now, seq) + pad, partition=0, on_delivery=delivered(seq)
        )
        producer.poll(0)
    sent_until = time.monotonic()
    undelivered = producer.flush(timeout_s)
    gate.report(
        {
            "role": "producer",
            "start": start,
            "sent_until": sent_until,
            "cpu_s": time.process_time() - cpu0,
            "produce_latency_ns": [a - s for a, s in zip(acked_ns, sent_ns, strict=True)],
            "failures": len(failures) + undelivered,
            "first_failure": failures[0] if failures else None,
        }
    )


def _latency_consumer(
    bootstrap: str,
    tuning: ClientTuning,
    topic: str,
    records: int,
    timeout_s: float,
    gate: Gate,
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(tuning.consumer(bootstrap))
    consumer.assign([TopicPartition(topic, 0, FIRST_OFFSET)])
    consumer.poll(0.2)  # the fetch loop is running before the producer starts
    e2e_ns = [0] * records
    got = 0
    gate.ready_then_wait(timeout_s)
    cpu0 = time.process_time()
    deadline = time.monotonic() + timeout_s
    while got < records and time.monotonic() < deadline:
        # poll(), not consume(n): consume waits for n records or its whole timeout.
        m = consumer.poll(0.1)
        now = time.monotonic_ns()
        if m is None:
            continue
        value = m.value()
        if m.error() is None and value is not None:
            sent, seq = _STAMP.unpack_from(value)
            e2e_ns[seq] = now - sent
            got += 1
    cpu_s = time.process_time() - cpu0
    consumer.close()
    gate.report({"role": "consumer", "records": got, "e2e_latency_ns": e2e_ns, "cpu_s": cpu_s})


@dataclass(frozen=True)
class LatencyResult:
    """Latencies in ms at a fixed offered rate, after the warm-up records are dropped."""

    offered_mb_per_s: float
    achieved_mb_per_s: float
    produce_ms: dict[str, float]
    end_to_end_ms: dict[str, float]
    server_cpu_s: float
    client_cpu_s: float
    #: Server CPU seconds per second of the phase, and the machine's busy and stolen
    #: shares: at a moderate rate, whether the CPU (not the disk) sets the latency.
    server_cores: float = 0.0
    machine_busy: float = 0.0
    machine_steal: float = 0.0


def percentiles_ms(samples_ns: list[int]) -> dict[str, float]:
    """Nearest-rank p50/p99/p99.9 and max, in milliseconds."""
    s = sorted(samples_ns)
    if not s:
        raise WorkloadError("no latency samples")

    def rank(q: float) -> float:
        return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))] / 1e6

    return {"p50": rank(0.50), "p99": rank(0.99), "p99.9": rank(0.999), "max": s[-1] / 1e6}


def run_latency(
    bootstrap: str,
    tuning: ClientTuning,
    topic: str,
    record_bytes: int,
    rate_bytes_per_s: float,
    seconds: float,
    warmup_s: float,
    server_pid: int,
    timeout_s: float,
) -> LatencyResult:
    """One producer at a fixed rate into partition 0 and one consumer tailing it."""
    rate = rate_bytes_per_s / record_bytes
    records = int(rate * (seconds + warmup_s))
    warmup = int(rate * warmup_s)
    gate = Gate.new()
    procs = [
        SPAWN.Process(
            target=_latency_consumer,
            daemon=True,
            args=(bootstrap, tuning, topic, records, timeout_s, gate),
        ),
        SPAWN.Process(
            target=_latency_producer,
            daemon=True,
            args=(bootstrap, tuning, topic, record_bytes, rate, records, timeout_s, gate),
        ),
    ]
    results = run_workers(procs, gate, server_pid, timeout_s + seconds + warmup_s)
    by_role = {r["role"]: r for r in results.reports}
    prod, cons = by_role["producer"], by_role["consumer"]
    if prod["failures"]:
        raise WorkloadError(
            f"{prod['failures']} latency records not acknowledged (first: {prod['first_failure']})"
        )
    if cons["records"] != records:
        raise WorkloadError(f"latency consumer saw {cons['records']} of {records} records")
    return LatencyResult(
        offered_mb_per_s=rate_bytes_per_s / 1e6,
        achieved_mb_per_s=records * record_bytes / (prod["sent_until"] - prod["start"]) / 1e6,
        produce_ms=percentiles_ms(prod["produce_latency_ns"][warmup:]),
        end_to_end_ms=percentiles_ms(cons["e2e_latency_ns"][warmup:]),
        server_cpu_s=results.server_cpu_s,
        client_cpu_s=prod["cpu_s"] + cons["cpu_s"],
        server_cores=results.server_cpu_s / max(results.wall_s, 1e-9),
        machine_busy=results.machine_busy,
        machine_steal=results.machine_steal,
    )
