"""What a partition leader knows of the transactions writing to it (KIP-890 part 1's
verification guard), wherever their coordinator runs (DESIGN.md invariant 7).

A transactional batch is appended only while its producer's transaction is known to be
ongoing and to hold the partition. A leader that does not coordinate the transaction
asks the coordinator (AddPartitionsToTxn ``verify_only``) and notes the answer here as a
guard of (partition, producer id, epoch); a marker for that producer in that partition
drops the guard in the step that assigns the marker's offset, so a batch whose check
began before the marker (a delayed or zombie request) finds its guard gone and is
refused, and a batch arriving after it must be verified again (the coordinator then
answers that no ongoing transaction holds the partition). A lost guard (evicted, the
node restarted, leadership moved) only costs one more verification.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(eq=False, slots=True)
class Guard:
    epoch: int
    #: Set once the coordinator answered that the transaction holds the partition.
    verified: bool = False


class TxnGuards:
    def __init__(self, entries_max: int = 100_000) -> None:
        self._guards: OrderedDict[tuple[str, int, int], Guard] = OrderedDict()
        self._entries_max = entries_max

    def __len__(self) -> int:
        return len(self._guards)

    def guard(self, topic: str, partition: int, producer_id: int, epoch: int) -> Guard:
        """The guard of this producer's transaction in the partition: the one already
        there for ``epoch``, else a new, unverified one."""
        key = (topic, partition, producer_id)
        found = self._guards.get(key)
        if found is not None and found.epoch == epoch:
            self._guards.move_to_end(key)
            return found
        found = self._guards[key] = Guard(epoch)
        self._guards.move_to_end(key)
        while len(self._guards) > self._entries_max:
            self._guards.popitem(last=False)
        return found

    def holds(self, topic: str, partition: int, producer_id: int, guard: Guard) -> bool:
        """Whether ``guard`` is still the verified guard of the producer here (no marker
        for it was appended since it was taken)."""
        return guard.verified and self._guards.get((topic, partition, producer_id)) is guard

    def clear(self, topic: str, partition: int, producer_id: int) -> None:
        """A marker of the producer is appended here: its transaction here is over."""
        self._guards.pop((topic, partition, producer_id), None)

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._guards if k[0] == topic]:
            del self._guards[key]
