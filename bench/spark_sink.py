"""One task of the Kafka sink of ``format("tidegate")`` in-process (no Spark): RECORDS
rows of VALUE_BYTES written at-least-once (the idempotent producer) against exactly once
(librdkafka's transactional producer, the decision and the driver's commit), alternating,
ROUNDS times each.

`python -m bench.spark_sink`: one `tidegate serve`; reported records/s per mode, medians,
and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pyspark.sql.types import BinaryType, Row, StructField, StructType
from tidegate.spark.options import write_options
from tidegate.spark.sink import KafkaStreamWriter, _write_idempotent, end_all, write_in_transaction

from bench.systems import tidegate_server

SCHEMA = StructType([StructField("value", BinaryType())])


def _once(bootstrap: str, exactly_once: bool, batch_id: int, records: int, value: bytes) -> float:
    opts = write_options({"kafka.bootstrap.servers": bootstrap, "topic": "bench-sink",
                          "exactly_once": str(exactly_once).lower()})
    rows = (Row(value=value) for _ in range(records))
    start = time.perf_counter()
    if exactly_once:
        written = write_in_transaction(opts, SCHEMA, rows, batch_id, "bench", 0)
        end_all(opts, [written], batch_id, commit=True)
    else:
        _write_idempotent(opts, SCHEMA, rows)
    return records / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    a = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-spark-sink-") as tmp:
        server = tidegate_server(Path(tmp) / "data", Path(tmp), None)
        server.start(ready_timeout_s=60)
        try:
            KafkaStreamWriter(write_options({"kafka.bootstrap.servers": server.bootstrap, "topic": "bench-sink"}),
                              SCHEMA)
            value = b"x" * a.value_bytes
            rates: dict[bool, list[float]] = {False: [], True: []}
            for r in range(a.rounds):
                for mode in (False, True):
                    rates[mode].append(_once(server.bootstrap, mode, r, a.records, value))
            alo, eos = statistics.median(rates[False]), statistics.median(rates[True])
            print(f"at-least-once {alo:,.0f} records/s {[round(x) for x in rates[False]]}")
            print(f"exactly-once  {eos:,.0f} records/s {[round(x) for x in rates[True]]}")
            print(f"ratio {eos / alo:.2f} (goal of issue 37 item 4: >= 0.8)")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
