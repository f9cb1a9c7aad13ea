"""Bytes and records each topic took in (appends) and gave out (fetch reads) since the
node started: Kafka's per-topic BytesIn/MessagesIn/BytesOut counters, for ``/metrics``
(``gateway/admin/kafka_exporter.py``).

It sits in front of the auto-scaler's traffic meters as the partition logs' one
``TrafficSink``, so an append is counted once for both.
"""

from __future__ import annotations

from tidegate.gateway.log.log_services import TrafficSink

#: Positions in a topic's totals.
BYTES_IN, RECORDS_IN, BYTES_OUT, RECORDS_OUT = range(4)


class TopicIO:
    def __init__(self, traffic: TrafficSink | None = None) -> None:
        self._traffic = traffic
        #: topic -> [bytes in, records in, bytes out, records out].
        self.totals: dict[str, list[int]] = {}

    def record(self, topic: str, partition: int, nbytes: int, events: int) -> None:
        totals = self.totals.get(topic)
        if totals is None:
            totals = self.totals[topic] = [0, 0, 0, 0]
        totals[BYTES_IN] += nbytes
        totals[RECORDS_IN] += events
        if self._traffic is not None:
            self._traffic.record(topic, partition, nbytes, events)

    def sent(self, topic: str, nbytes: int, records: int) -> None:
        totals = self.totals.get(topic)
        if totals is None:
            totals = self.totals[topic] = [0, 0, 0, 0]
        totals[BYTES_OUT] += nbytes
        totals[RECORDS_OUT] += records

    def forget_topic(self, topic: str) -> None:
        self.totals.pop(topic, None)
        if self._traffic is not None:
            self._traffic.forget_topic(topic)
