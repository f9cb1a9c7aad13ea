"""The campaign's verdict: every partition read back at both isolation levels and held
against what the clients were promised. A violation is anything Kafka's contract or the
design's invariants rule out: an acknowledged record lost or moved, a record stored twice,
a gap or a reorder in a producer's records, an aborted record visible to read_committed, a
committed transaction missing or half visible, a group's committed offset going backwards,
a partition unavailable longer than allowed after a fault, an ERROR or a traceback in a
node's log."""

from __future__ import annotations

import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.cluster.chaos.faults import Fault
from tests.cluster.chaos.workloads import Ack, OffsetsWatch, Seen, Transaction

QUIET = {"log_level": 3}
EXAMPLES = 5


@dataclass
class Stored:
    """One partition as read back: offset -> value, and where the read ended."""

    records: list[tuple[int, bytes]] = field(default_factory=list)
    end: int = 0
    reached_end: bool = False
    #: Why its end could not be read (the partition stayed unavailable).
    error: str = ""


def read_partitions(bootstrap: str, topic: str, partitions: int, isolation: str,
                    timeout_s: float = 90.0) -> dict[int, Stored]:
    """Every record of every partition from offset 0 to the end the isolation level sees
    (the high watermark, or the last stable offset), following the consumer's position past
    control records; bounded by ``timeout_s``."""
    deadline = time.monotonic() + timeout_s

    def connect() -> Consumer:
        return Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"chaos-read-{isolation}",
            "enable.auto.commit": False, "isolation.level": isolation,
            "topic.metadata.refresh.interval.ms": 1000, **QUIET,
        })

    consumer = connect()
    out = {p: Stored() for p in range(partitions)}
    try:
        for p in range(partitions):
            while True:
                try:
                    _, out[p].end = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                    break
                except KafkaException as exc:
                    if time.monotonic() > deadline:  # reported as not read to the end
                        out[p].end = -1
                        out[p].error = str(exc)
                        break
                    consumer.close()  # a new client asks who leads the partition now
                    consumer = connect()
        readable = [p for p, s in out.items() if s.end >= 0]
        consumer.assign([TopicPartition(topic, p, 0) for p in readable])
        # Unreadable partitions may have used up the deadline: the others are still read.
        deadline = max(deadline, time.monotonic() + 30)
        while readable and time.monotonic() < deadline:
            positions = consumer.position([TopicPartition(topic, p) for p in readable])
            for tp in positions:
                out[tp.partition].reached_end = tp.offset >= out[tp.partition].end
            if all(out[p].reached_end for p in readable):
                break
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out[msg.partition()].records.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return out


@dataclass
class Report:
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def violation(self, kind: str, count: int, examples: object) -> None:
        if count:
            self.violations.append(f"{kind}: {count}, e.g. {examples}")

    def text(self) -> str:
        lines = ["chaos campaign report", *self.notes]
        lines.append(f"violations: {len(self.violations)}")
        lines += [f"  VIOLATION {v}" for v in self.violations]
        return "\n".join(lines)


def _dense_and_ordered(report: Report, topic: str, stored: dict[int, Stored], isolation: str,
                       dense: bool) -> None:
    gaps, reorders, unread = [], [], []
    for p, s in stored.items():
        offsets = [o for o, _ in s.records]
        if any(b <= a for a, b in zip(offsets, offsets[1:], strict=False)):
            reorders.append((p, "offsets not increasing"))
        if dense and offsets != list(range(len(offsets))):
            missing = sorted(set(range(s.end)) - set(offsets))
            gaps.append((p, f"{len(missing)} offsets missing below {s.end}: {missing[:5]}"))
        if not s.reached_end:
            unread.append((p, s.error or f"read up to {offsets[-1] if offsets else None} of {s.end}"))
        last: dict[str, int] = {}
        for offset, value in s.records:  # each producer's records in the order it sent them
            name, _, seq = value.decode(errors="replace").rpartition("-")
            if not seq.isdigit():
                continue
            if name in last and int(seq) <= last[name]:
                reorders.append((p, offset, value))
            last[name] = int(seq)
    report.violation(f"{topic} {isolation}: gaps", len(gaps), gaps[:EXAMPLES])
    report.violation(f"{topic} {isolation}: reorders", len(reorders), reorders[:EXAMPLES])
    report.violation(f"{topic} {isolation}: partitions not read to the end", len(unread), unread)


def _duplicates(report: Report, what: str, stored: dict[int, Stored], values: Counter[bytes]) -> None:
    twice = {v for v, c in values.items() if c > 1}
    where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for p, s in stored.items():
        for o, v in s.records:
            if v in twice:
                where[v].append((p, o))
    shown = sorted(where.items(), key=lambda item: item[1])[:EXAMPLES]
    report.violation(f"{what}: duplicates (value, [(partition, offset)])", len(twice), shown)


def check_idempotent(report: Report, topic: str, acks: list[Ack],
                     stored_by_isolation: dict[str, dict[int, Stored]]) -> None:
    for isolation, stored in stored_by_isolation.items():
        where = {(p, o): v for p, s in stored.items() for o, v in s.records}
        values = Counter(v for s in stored.values() for _, v in s.records)
        # librdkafka acknowledges without an offset a batch whose fate it learnt only from a
        # later one's acknowledgement (persisted, offset unknown): found by value instead.
        held = {(p, v) for p, s in stored.items() for _, v in s.records}
        lost = [(a.partition, a.offset, a.value, where.get((a.partition, a.offset)))
                for a in acks
                if (where.get((a.partition, a.offset)) != a.value if a.offset is not None
                    else (a.partition, a.value) not in held)]
        report.violation(f"{topic} {isolation}: acknowledged records lost or moved "
                         "(partition, offset, value, stored there)", len(lost), lost[:EXAMPLES])
        _duplicates(report, f"{topic} {isolation}", stored, values)
        _dense_and_ordered(report, topic, stored, isolation, dense=True)
        report.notes.append(f"{topic} {isolation}: {sum(values.values())} records read back, "
                            f"{len(acks)} acknowledged")


def check_transactions(report: Report, topic: str, transactions: list[Transaction],
                       stored_by_isolation: dict[str, dict[int, Stored]]) -> None:
    outcomes = Counter(t.outcome for t in transactions)
    report.notes.append(f"{topic}: transactions {dict(outcomes)}")
    for isolation, stored in stored_by_isolation.items():
        values = Counter(v for s in stored.values() for _, v in s.records)
        _duplicates(report, f"{topic} {isolation}", stored, values)
        _dense_and_ordered(report, topic, stored, isolation, dense=False)
        report.notes.append(f"{topic} {isolation}: {sum(values.values())} records read back")
    committed_view = stored_by_isolation["read_committed"]
    visible = {v: (p, o) for p, s in committed_view.items() for o, v in s.records}
    aborted = [(v, visible[v]) for t in transactions if t.outcome == "aborted"
               for _, v in t.values if v in visible]
    report.violation(f"{topic} read_committed: aborted records visible (value, (partition, offset))",
                     len(aborted), aborted[:EXAMPLES])
    missing = [(t.number, v) for t in transactions if t.outcome == "committed"
               for _, v in t.values if v not in visible]
    report.violation(f"{topic} read_committed: committed records missing", len(missing), missing[:EXAMPLES])
    partial = [(t.number, t.outcome, sum(v in visible for _, v in t.values))
               for t in transactions if t.outcome in ("unknown", "open")
               and 0 < sum(v in visible for _, v in t.values) < len(t.values)]
    report.violation(f"{topic} read_committed: transactions partly visible (number, outcome, "
                     "records visible)", len(partial), partial[:EXAMPLES])
    started = {v for t in transactions for _, v in t.values}
    stray = [v for v in visible if v not in started]
    report.violation(f"{topic} read_committed: records no transaction sent", len(stray), stray[:EXAMPLES])


def self_explained(backwards: tuple[str, str, int, int, int, int, int],
                   commits: list[tuple[str, int, int]]) -> bool:
    """Whether a member itself committed the lower offset after acknowledged commits at
    least as high as the higher one. librdkafka re-sends an OffsetCommit that was in
    flight when its coordinator died, after newer ones; a coordinator (Kafka's as well)
    stores what it is sent last, so the committed offset goes back without any loss."""
    _, topic, partition, before, _, after, _ = backwards
    high = False
    for t, p, offset in commits:
        if (t, p) != (topic, partition):
            continue
        if offset >= before:
            high = True
        elif offset == after and high:
            return True
    return False


def check_group(report: Report, seen: list[Seen], expected: dict[str, set[bytes]],
                aborted: set[bytes], watch: OffsetsWatch,
                commits: list[tuple[str, int, int]] | None = None) -> None:
    """``commits``: each member's acknowledged commits, in the order answered."""
    got: dict[str, set[bytes]] = defaultdict(set)
    for s in seen:
        got[s.topic].add(s.value)
    shown = [(s.topic, s.partition, s.offset, s.value) for s in seen if s.value in aborted]
    report.violation("group: aborted records consumed (topic, partition, offset, value)",
                     len(shown), shown[:EXAMPLES])
    for topic, values in expected.items():
        missed = values - got[topic]
        report.violation(f"group: {topic} records never consumed", len(missed), sorted(missed)[:EXAMPLES])
    explained = [b for b in watch.backwards if self_explained(b, commits or [])]
    unexplained = [b for b in watch.backwards if b not in explained]
    report.violation("group: committed offsets going backwards (read at UTC, topic, partition, "
                     "before, node that answered, after, node that answered)",
                     len(unexplained), unexplained[:EXAMPLES])
    if explained:
        report.notes.append(f"group: {len(explained)} committed offsets went back as a member "
                            f"re-sent an older commit after newer ones, e.g. {explained[:EXAMPLES]}")
    report.notes.append(f"group: {len(seen)} records consumed ({len(seen) - len({(s.topic, s.value) for s in seen})} "
                        f"again after a rebalance), offsets read {len(watch.last)} partitions, "
                        f"{watch.errors} offset reads failed")


def unavailability(faults: list[Fault], acks: list[Ack], partitions: int, end: float) -> list[dict[int, float]]:
    """Per fault, per partition, the longer of: seconds from the fault's start until the
    partition acknowledged a record sent after it (``inf``: never before ``end``), and the
    longest any record waited for its acknowledgement until the next fault, counted from
    the fault's start at the earliest (a node back from the fault that takes its
    containers again stops their partitions a second time)."""
    by_partition: dict[int, list[Ack]] = defaultdict(list)
    for a in acks:
        by_partition[a.partition].append(a)
    result = []
    for i, fault in enumerate(faults):
        until = faults[i + 1].started_at if i + 1 < len(faults) else end
        gaps = {}
        for p in range(partitions):
            after = [a.acked_at for a in by_partition[p] if a.sent_at >= fault.started_at]
            first = (min(after) if after else end + float("inf")) - fault.started_at
            waits = [min(a.acked_at, until) - max(a.sent_at, fault.started_at)
                     for a in by_partition[p] if a.sent_at < until and a.acked_at > fault.started_at]
            gaps[p] = max([first, *waits])
        result.append(gaps)
    return result


def check_faults(report: Report, faults: list[Fault], gaps: list[dict[int, float]],
                 unavailable_max_s: float | None) -> None:
    worst: dict[str, float] = {}
    for i, (fault, per_partition) in enumerate(zip(faults, gaps, strict=True)):
        longest = max(per_partition.values())
        worst[fault.kind] = max(worst.get(fault.kind, 0.0), longest)
        report.notes.append(
            f"fault {i + 1}: {fault.describe()}: every partition acked again after {longest:.1f}s"
            + (f" (slowest: partition {max(per_partition, key=per_partition.__getitem__)})" if longest > 2 else "")
        )
        report.notes += [f"fault {i + 1}: harness: {note}" for note in fault.notes]
        for problem in fault.problems:
            report.violations.append(f"fault {i + 1} ({fault.describe()}): {problem}")
        if unavailable_max_s is not None and longest > unavailable_max_s:
            slow = {p: round(g, 1) for p, g in per_partition.items() if g > unavailable_max_s}
            report.violations.append(
                f"fault {i + 1} ({fault.describe()}): partitions unavailable over "
                f"{unavailable_max_s:.0f}s: {slow}"
            )
    for kind, longest in sorted(worst.items()):
        report.notes.append(f"longest unavailability after {kind}: {longest:.1f}s")


LOG_PROBLEM = re.compile(rb"\bERROR\b|\bCRITICAL\b|^Traceback \(most recent call last\)")


def check_logs(report: Report, logs: list[Path]) -> None:
    """Every ERROR or CRITICAL line and every traceback (by its exception line) of every
    log, counted by message."""
    for path in logs:
        if not path.exists():
            continue
        found: Counter[str] = Counter()
        first: dict[str, int] = {}
        lines = path.read_bytes().splitlines()
        for number, line in enumerate(lines, 1):
            if not LOG_PROBLEM.search(line):
                continue
            if line.startswith(b"Traceback"):
                raised = next((x for x in lines[number:number + 200] if x[:1] not in (b" ", b"\t")), b"?")
                key = "traceback: " + raised.decode(errors="replace")[:200]
            else:  # the message without its time stamp
                key = re.sub(r"^\S+ \S+ ", "", line.decode(errors="replace"))[:200]
            found[key] += 1
            first.setdefault(key, number)
        for key, count in found.most_common():
            report.violations.append(f"log {path.name}:{first[key]}: {count}x {key}")
