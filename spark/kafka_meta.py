"""Driver-side facts about Kafka topics: which partitions a query reads and their
offsets (earliest, latest, by timestamp), from confluent-kafka's AdminClient."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]
from tidegate.spark.options import EARLIEST, LATEST, Offsets, OptionError, ReadOptions

TopicPartitionKey = tuple[str, int]
_TIMEOUT_S = 30.0


class KafkaSourceError(RuntimeError):
    """The cluster said no (a missing topic, data lost, an offset out of range)."""


def _isolation(client: dict[str, str]) -> IsolationLevel:
    if client.get("isolation.level", "read_uncommitted") == "read_committed":
        return IsolationLevel.READ_COMMITTED
    return IsolationLevel.READ_UNCOMMITTED


class KafkaMetadata:
    def __init__(self, opts: ReadOptions) -> None:
        self._opts = opts
        config: dict[str, Any] = {"bootstrap.servers": opts.bootstrap}
        config.update({k: v for k, v in opts.client.items() if k != "isolation.level"})
        self._admin = AdminClient(config)
        self._isolation = _isolation(opts.client)

    def partitions(self) -> list[TopicPartitionKey]:
        """The partitions the query reads now, sorted (topics created since included)."""
        if self._opts.assign is not None:
            return sorted((t, p) for t, ps in self._opts.assign.items() for p in ps)
        meta = self._admin.list_topics(timeout=_TIMEOUT_S)
        out = []
        for name, topic in meta.topics.items():
            if topic.error is not None or not self._opts.matches(name):
                continue
            out += [(name, p) for p in topic.partitions]
        return sorted(out)

    def _list(self, specs: dict[TopicPartitionKey, Any]) -> dict[TopicPartitionKey, int]:
        if not specs:
            return {}
        futures = self._admin.list_offsets(
            {TopicPartition(t, p): s for (t, p), s in specs.items()},
            isolation_level=self._isolation, request_timeout=_TIMEOUT_S,
        )
        out = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = int(fut.result().offset)
            except KafkaException as exc:
                raise KafkaSourceError(f"ListOffsets of {tp.topic}-{tp.partition}: {exc}") from None
        return out

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        return self._list({tp: OffsetSpec.earliest() for tp in tps})  # type: ignore[no-untyped-call]

    def latest(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        return self._list({tp: OffsetSpec.latest() for tp in tps})  # type: ignore[no-untyped-call]

    def by_timestamp(self, wanted: dict[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """The first offset at or after each timestamp; past the end: latest, or an error
        (Spark's ``startingOffsetsByTimestampStrategy``)."""
        found = self._list({tp: OffsetSpec.for_timestamp(ts) for tp, ts in wanted.items()})
        missing = [tp for tp, off in found.items() if off < 0]
        if missing and not self._opts.starting_timestamp_strategy_latest:
            raise KafkaSourceError(
                f"no offset at or after the starting timestamp for {missing} (set "
                "startingOffsetsByTimestampStrategy=latest to start from the end)")
        latest = self.latest(missing)
        return {tp: (off if off >= 0 else latest[tp]) for tp, off in found.items()}

    def resolve_start(self, tps: list[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """startingOffsetsByTimestamp, else startingOffsets, as concrete offsets."""
        by_ts = self._opts.starting_by_timestamp
        if by_ts is not None:
            wanted = {}
            for t, p in tps:
                ts = by_ts.get(t, by_ts.get("*", {}))
                value = ts.get(str(p), ts.get("*"))
                if value is None:
                    raise OptionError(f"startingOffsetsByTimestamp has no timestamp for {t}-{p}")
                wanted[(t, p)] = value
            return self.by_timestamp(wanted)
        return self._resolve(self._opts.starting.default, self._opts.starting.explicit, tps, "startingOffsets")

    def resolve_end(self, tps: list[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        return self._resolve(self._opts.ending.default, self._opts.ending.explicit, tps, "endingOffsets")

    def _resolve(self, default: int, explicit: Offsets, tps: list[TopicPartitionKey], name: str) -> dict[TopicPartitionKey, int]:
        for topic, parts in explicit.items():
            for part in parts:
                if (topic, int(part)) not in tps:
                    raise OptionError(f"option {name} names {topic}-{part}, which the query does not read")
        want = {tp: explicit.get(tp[0], {}).get(str(tp[1]), default) for tp in tps}
        earliest = self.earliest([tp for tp, o in want.items() if o == EARLIEST])
        latest = self.latest([tp for tp, o in want.items() if o == LATEST])
        return {tp: earliest.get(tp, latest.get(tp, o)) if o < 0 else o for tp, o in want.items()}


def to_json_offsets(offsets: dict[TopicPartitionKey, int]) -> Offsets:
    out: Offsets = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = o
    return out


def from_json_offsets(offsets: Offsets) -> dict[TopicPartitionKey, int]:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


__all__ = ["EARLIEST", "LATEST", "KafkaMetadata", "KafkaSourceError", "from_json_offsets", "to_json_offsets"]
