"""The event loop's worst stall during admin operations (issue 22, finding 4): an
in-process node (real segment store on disk, controller, gateway) and a ticker that
wakes every ``TICK_S``; each admin request's stall is the longest a tick came late
while it ran, beside the same figure over 2 s with nothing to do (on a shared machine
that floor is not zero), and over as long as all requests took once they are done
(``idle_after_*``). Topic ``t`` is created with ``--partitions``, grown to
``--to`` and deleted; topic ``u`` is created with ``--to`` partitions, gets a record in
each, then DeleteRecords over all of them, AlterConfigs and IncrementalAlterConfigs,
and is deleted. ``*_worst_step_cpu_ms`` and ``*_worst_iteration_cpu_ms``: the most CPU
the loop thread used in one step and in one loop iteration (the part of a stall the
machine's other load does not add to); ``*_latest_wake_ms``: the longest the loop thread
woke late from waiting for I/O or a timer (not run by the OS, or waiting for the GIL);
``*_longest_busy_ms``: the longest wall time between two such waits. ``--steps-over-ms N``
prints every loop step longer than N ms with stack samples (``bench.loop_steps``).
Last line: ``RESULT {json}``.

    python -m bench.admin_stalls --partitions 2000 --to 10000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import kafka.protocol.admin
import kafka.protocol.producer
import tidegate.protocol  # noqa: F401  (loads kafka-python's schemas, warning silenced)
from kafka.protocol.admin import (
    AlterConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.service import StreamSegmentStore
from tidegate.gateway import heap
from tidegate.gateway.app import Gateway
from tidegate.gateway.config import GatewayConfig

from bench.loop_steps import LoopSteps

TICK_S = 0.005


class StallMeter:
    def __init__(self) -> None:
        self.worst_s = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(TICK_S)
            self.worst_s = max(self.worst_s, time.monotonic() - before - TICK_S)

    def __enter__(self) -> StallMeter:
        self.worst_s = 0.0
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


def _frame(request: Any, version: int) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=1, client_id="stalls")
    return bytes(request.encode(version=version, header=True, framed=True))


async def _call(port: int, frame: bytes) -> bytes:
    """Send one framed request, return the response body (encoding and decoding are
    left to the caller, outside the measured time: the client shares the loop)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(frame)
    size = int.from_bytes(await reader.readexactly(4), "big")
    body = await reader.readexactly(size)
    writer.close()
    return body


def _decode(request: Any, version: int, body: bytes) -> Any:
    module = kafka.protocol.producer if isinstance(request, ProduceRequest) else kafka.protocol.admin
    response_class = getattr(module, type(request).__name__.replace("Request", "Response"))
    flexible = response_class.flexible_version_q(version)
    return response_class.decode(body[5 if flexible else 4 :], version=version)


def _errors(response: Any) -> list[int]:
    """Every error code in an admin or produce response (top level and per partition)."""
    out = []
    for item in (getattr(response, "topics", None) or getattr(response, "results", None)
                 or getattr(response, "responses", None) or []):
        if hasattr(item, "error_code"):
            out.append(item.error_code)
        for p in (getattr(item, "partitions", None) or getattr(item, "partition_responses", None)
                  or []):
            out.append(p.error_code)
    return out


def _batch() -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000), key=b"k", value=b"x" * 100, headers=[])
    return bytes(b.build())


def _steps(partitions: int, to: int) -> list[tuple[str, Any, int]]:
    topic = CreateTopicsRequest.CreatableTopic
    ac = AlterConfigsRequest.AlterConfigsResource
    iac = IncrementalAlterConfigsRequest.AlterConfigsResource
    dr = DeleteRecordsRequest.DeleteRecordsTopic
    record = _batch()
    return [
        (f"create_topics_{partitions}", CreateTopicsRequest(topics=[
            topic(name="t", num_partitions=partitions, replication_factor=1, assignments=[],
                  configs=[])], timeout_ms=600_000, validate_only=False), 5),
        (f"create_partitions_{partitions}_to_{to}", CreatePartitionsRequest(topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(name="t", count=to, assignments=None)],
            timeout_ms=600_000, validate_only=False), 3),
        (f"delete_topics_{to}", DeleteTopicsRequest(topic_names=["t"], timeout_ms=600_000), 4),
        (f"create_topics_{to}", CreateTopicsRequest(topics=[
            topic(name="u", num_partitions=to, replication_factor=1, assignments=[],
                  configs=[])], timeout_ms=600_000, validate_only=False), 5),
        (f"produce_{to}", ProduceRequest(transactional_id=None, acks=-1, timeout_ms=600_000,
            topic_data=[ProduceRequest.TopicProduceData(name="u", partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=p, records=record)
                for p in range(to)])]), 9),
        (f"delete_records_{to}", DeleteRecordsRequest(topics=[dr(name="u", partitions=[
            dr.DeleteRecordsPartition(partition_index=p, offset=-1) for p in range(to)])],
            timeout_ms=600_000), 2),
        (f"alter_configs_{to}", AlterConfigsRequest(resources=[ac(
            resource_type=2, resource_name="u", configs=[
                ac.AlterableConfig(name="retention.ms", value="3600000")])],
            validate_only=False), 2),
        (f"incremental_alter_configs_{to}", IncrementalAlterConfigsRequest(resources=[iac(
            resource_type=2, resource_name="u", configs=[
                iac.AlterableConfig(name="cleanup.policy", config_operation=0,
                                    value="compact")])],
            validate_only=False), 1),
        (f"delete_topics_{to}_compacted", DeleteTopicsRequest(topic_names=["u"],
                                                              timeout_ms=600_000), 4),
    ]


async def run(partitions: int, to: int, data_dir: Path, freeze: bool = True,
              steps_over_ms: float = 0.0) -> dict[str, float]:
    store = StreamSegmentStore(data_dir / "segmentstore", SegmentStoreConfig())
    await store.start()
    controller = StreamController(store)
    await controller.start()
    gateway = Gateway(GatewayConfig(data_dir=data_dir, listen="127.0.0.1:0"), store, controller)
    _, port = await gateway.start()
    if freeze:  # as ``tidegate serve`` does once it listens
        heap.freeze_long_lived()
    out: dict[str, float] = {}
    meter = StallMeter()
    try:
        with meter:  # the floor: what the machine alone costs (other load, GC)
            await asyncio.sleep(2.0)
        out["idle_2s_worst_stall_ms"] = round(meter.worst_s * 1000, 1)
        for name, request, version in _steps(partitions, to):
            frame = _frame(request, version)
            started = time.monotonic()
            with meter:
                with LoopSteps((steps_over_ms or 1e6) / 1000) as steps:
                    body = await _call(port, frame)
            elapsed_s = time.monotonic() - started
            response = _decode(request, version, body)
            if steps_over_ms:
                print(f"--- {name}\n{steps.report()}", flush=True)
            if any(_errors(response)):
                raise SystemExit(f"{name}: {str(response)[:2000]}")
            out[f"{name}_s"] = round(elapsed_s, 3)
            out[f"{name}_worst_stall_ms"] = round(meter.worst_s * 1000, 1)
            if steps.worst_cpu is not None and steps.worst_iteration is not None:
                out[f"{name}_worst_step_cpu_ms"] = steps.worst_cpu.cpu_ms
                out[f"{name}_worst_iteration_cpu_ms"] = steps.worst_iteration.cpu_ms
            out[f"{name}_latest_wake_ms"] = round(steps.worst_wake[0] * 1000, 1)
            out[f"{name}_longest_busy_ms"] = round(steps.worst_busy[0] * 1000, 1)
            out[f"{name}_longest_gc_ms"] = round(steps.worst_gc[0] * 1000, 1)
            out[f"{name}_gc_cpu_ms"] = round(steps.worst_gc_cpu * 1000, 1)
        busy_s = sum(v for k, v in out.items() if k.endswith("_s"))
        with meter:  # the floor again, over as long as all the requests took
            await asyncio.sleep(busy_s)
        out["idle_after_worst_stall_ms"] = round(meter.worst_s * 1000, 1)
        out["idle_after_s"] = round(busy_s, 3)
    finally:
        await gateway.close()
        await controller.close()
        await store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--to", type=int, default=10_000)
    parser.add_argument("--no-freeze", action="store_true",
                        help="leave the garbage collector as Python sets it (no gateway.heap)")
    parser.add_argument("--steps-over-ms", type=float, default=0.0,
                        help="print every event-loop step longer than this, with stack samples")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidegate-stalls-") as tmp:
        result = asyncio.run(run(args.partitions, args.to, Path(tmp), not args.no_freeze,
                                 args.steps_over_ms))
    for key, value in result.items():
        print(f"{key}: {value}")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
