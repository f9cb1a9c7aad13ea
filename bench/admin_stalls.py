"""The event loop's worst stall during admin operations (issue 22, finding 4): an
in-process node (real segment store on disk, controller, gateway) and a ticker that
wakes every ``TICK_S``; each admin request's stall is the longest a tick came late
while it ran, beside the same figure over 2 s with nothing to do (on a shared machine
that floor is not zero). Last line: ``RESULT {json}``.

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
from kafka.protocol.admin import CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.service import StreamSegmentStore
from tidegate.gateway import heap
from tidegate.gateway.app import Gateway
from tidegate.gateway.config import GatewayConfig

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


async def _call(port: int, request: Any, version: int) -> Any:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request.API_VERSION = version
    request.with_header(correlation_id=1, client_id="stalls")
    writer.write(bytes(request.encode(version=version, header=True, framed=True)))
    size = int.from_bytes(await reader.readexactly(4), "big")
    body = await reader.readexactly(size)
    writer.close()
    response_class = getattr(kafka.protocol.admin, type(request).__name__.replace(
        "Request", "Response"))
    flexible = response_class.flexible_version_q(version)
    return response_class.decode(body[5 if flexible else 4 :], version=version)


async def run(partitions: int, to: int, data_dir: Path, freeze: bool = True) -> dict[str, float]:
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
        steps = [
            (f"create_topics_{partitions}", CreateTopicsRequest(topics=[
                CreateTopicsRequest.CreatableTopic(name="t", num_partitions=partitions,
                                                   replication_factor=1, assignments=[],
                                                   configs=[])],
                timeout_ms=600_000, validate_only=False), 5),
            (f"create_partitions_{partitions}_to_{to}", CreatePartitionsRequest(topics=[
                CreatePartitionsRequest.CreatePartitionsTopic(name="t", count=to,
                                                              assignments=None)],
                timeout_ms=600_000, validate_only=False), 3),
            (f"delete_topics_{to}", DeleteTopicsRequest(topic_names=["t"], timeout_ms=600_000), 4),
        ]
        with meter:  # the floor: what the machine alone costs (other load, GC)
            await asyncio.sleep(2.0)
        out["idle_2s_worst_stall_ms"] = round(meter.worst_s * 1000, 1)
        for name, request, version in steps:
            started = time.monotonic()
            with meter:
                response = await _call(port, request, version)
            errors = [r.error_code for r in getattr(response, "topics", None)
                      or getattr(response, "results", None) or getattr(response, "responses", [])]
            if any(errors):
                raise SystemExit(f"{name}: {response}")
            out[f"{name}_s"] = round(time.monotonic() - started, 3)
            out[f"{name}_worst_stall_ms"] = round(meter.worst_s * 1000, 1)
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidegate-stalls-") as tmp:
        result = asyncio.run(run(args.partitions, args.to, Path(tmp), not args.no_freeze))
    for key, value in result.items():
        print(f"{key}: {value}")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
