"""A controller process for the REST and gRPC tests: ``StreamController`` over the
in-memory segment store, served by ``create_app``/``serve_rest`` and
``start_grpc_server`` exactly as ``tidegate serve`` wires them, without the Kafka side.

    python -m tests.rest.harness --rest 127.0.0.1:PORT --grpc 127.0.0.1:PORT

Prints ``READY`` on stdout once both listen; stops cleanly on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from core.controller.config import ControllerConfig
from core.controller.controller import StreamController
from core.segmentstore.inmemory import InMemorySegmentStore
from gateway.grpc_service import start_grpc_server
from gateway.rest import RestLimits, create_app, serve_rest, stop_rest

#: Background policies off: the tests drive every workflow themselves.
QUIET = ControllerConfig(
    autoscale_period_ms=0,
    retention_period_ms=0,
    txn_timeout_check_period_ms=0,
    watermark_period_ms=0,
)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def run(rest: tuple[str, int], grpc_address: tuple[str, int], segments_max: int) -> None:
    controller = StreamController(InMemorySegmentStore(), QUIET)
    await controller.start()
    app = create_app(controller, limits=RestLimits(segments_max=segments_max))
    server, task = await serve_rest(app, *rest)
    grpc_server = await start_grpc_server(controller, *grpc_address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("READY", flush=True)
    await stop.wait()
    await grpc_server.stop(1)
    await stop_rest(server, task)
    await controller.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rest", type=_address, required=True)
    parser.add_argument("--grpc", type=_address, required=True)
    parser.add_argument("--segments-max", type=int, default=64)
    args = parser.parse_args()
    asyncio.run(run(args.rest, args.grpc, args.segments_max))
    return 0


if __name__ == "__main__":
    sys.exit(main())
