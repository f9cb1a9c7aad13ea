"""A stream sink task that writes longer than its transaction's lease renews it: the
driver's commit still finds the transaction open (against a real ``tidegate serve``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from pyspark.sql.types import BinaryType, Row, StructField, StructType
from tidegate.protocol.controller_grpc import pb2, pb2_grpc
from tidegate.spark import stream_sink
from tidegate.spark.stream_options import stream_write_options

from tests.clients.server import Tidegate

LEASE_MS = 2_000


def _slow_rows(n: int, pause_s: float) -> Iterator[Row]:
    for i in range(n):
        time.sleep(pause_s)
        yield Row(event=f"e{i}".encode())


def test_a_long_task_keeps_its_transaction_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", grpc=True)
    server.start()
    try:
        address = f"127.0.0.1:{server.grpc_port}"
        with grpc.insecure_channel(address) as channel:
            ctl = pb2_grpc.ControllerServiceStub(channel)
            ctl.CreateScope(pb2.ScopeRequest(scope="jobs"), timeout=30)
            ctl.CreateStream(pb2.CreateStreamRequest(scope="jobs", stream="out"), timeout=30)
            opts = stream_write_options({"controller": address, "scope": "jobs", "stream": "out",
                                         "exactly_once": "true", "transactionalIdPrefix": "lease",
                                         "transactionTimeoutMs": str(LEASE_MS)})
            monkeypatch.setattr(stream_sink, "_REQUEST_BYTES", 1)  # one append per row
            schema = StructType([StructField("event", BinaryType())])
            # Three leases long: without renewal the controller aborts it meanwhile.
            written = stream_sink._write(opts, schema, _slow_rows(12, LEASE_MS * 3 / 12 / 1000), True)
            assert written.events == 12 and written.txn is not None
            stream_sink._commit(opts, [written], 0)
            txn = ctl.GetTransaction(pb2.TransactionRequest(scope="jobs", stream="out", id=written.txn), timeout=30)
            assert txn.state == "COMMITTED"
    finally:
        server.close()
