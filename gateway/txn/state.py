"""A transactional id's coordinator state, as Kafka's ``TransactionMetadata`` holds it,
and its durable form (one JSON value per id in the coordinator's table segment).

States and the transitions the coordinator makes (Kafka's ``TransactionState``)::

    Empty ──AddPartitions/AddOffsets──▶ Ongoing ──EndTxn──▶ PrepareCommit ─▶ CompleteCommit
                                          │                 PrepareAbort  ─▶ CompleteAbort
                                          └─timeout / fencing InitProducerId─▶ PrepareAbort
    Complete* ──AddPartitions──▶ Ongoing;  Complete* / Empty ──InitProducerId──▶ Empty

A Prepare* state is written before any marker, so after a crash the decision is known
and the markers are written again (they are idempotent for readers: a second marker for
a transaction already closed in a partition changes nothing).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def complete(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PendingOffset:
    """A TxnOffsetCommit held until the transaction ends (applied on commit only)."""

    offset: int
    leader_epoch: int
    metadata: str


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    #: The id/epoch before the last bump (KIP-360: a retried InitProducerId matches it).
    last_producer_id: int = -1
    last_producer_epoch: int = -1
    partitions: set[TopicPartition] = field(default_factory=set)
    #: group id → partition → offset, from TxnOffsetCommit.
    offsets: dict[str, dict[TopicPartition, PendingOffset]] = field(default_factory=dict)
    #: Groups added with AddOffsetsToTxn.
    groups: set[str] = field(default_factory=set)
    start_ms: int = -1
    updated_ms: int = -1
    #: The transaction (begun by Produce v12 or TxnOffsetCommit v5) or the last EndTxn was
    #: of transaction version 2 (KIP-890, Kafka's ``clientTransactionVersion``): an end
    #: bumped the epoch, so a retry (or, after a timeout, the producer's abort) comes with
    #: the epoch before the bump.
    tv2: bool = False
    #: TV2 only: the producer id the next Complete* state takes, when the bump exhausted
    #: the epoch (-1 otherwise).
    next_producer_id: int = -1

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "pid": self.producer_id, "epoch": self.producer_epoch,
            "last_pid": self.last_producer_id, "last_epoch": self.last_producer_epoch,
            "timeout_ms": self.timeout_ms, "state": self.state.value,
            "partitions": sorted([t, p] for t, p in self.partitions),
            "groups": sorted(self.groups),
            "offsets": {
                g: [[t, p, o.offset, o.leader_epoch, o.metadata] for (t, p), o in offs.items()]
                for g, offs in self.offsets.items()
            },
            "start_ms": self.start_ms, "updated_ms": self.updated_ms,
            "tv": 2 if self.tv2 else 1, "next_pid": self.next_producer_id,
        }
        return json.dumps(doc).encode()

    @staticmethod
    def decode(transactional_id: str, raw: bytes) -> TxnMetadata:
        d = json.loads(raw)
        return TxnMetadata(
            transactional_id, int(d["pid"]), int(d["epoch"]), int(d["timeout_ms"]),
            TxnState(d["state"]), int(d["last_pid"]), int(d["last_epoch"]),
            {(str(t), int(p)) for t, p in d["partitions"]},
            {
                g: {(str(t), int(p)): PendingOffset(int(o), int(e), str(m)) for t, p, o, e, m in rows}
                for g, rows in d["offsets"].items()
            },
            set(d["groups"]), int(d["start_ms"]), int(d["updated_ms"]),
            int(d.get("tv", 1)) == 2, int(d.get("next_pid", -1)),
        )

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for t, p in sorted(self.partitions):
            out.setdefault(t, []).append(p)
        return out
