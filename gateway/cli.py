"""``tidegate serve``: the embedded node (segment store, controller, Kafka gateway,
admin REST, controller gRPC) in one process.

Start order: segment store → controller → gateway (offset index rebuilt) → REST →
gRPC; one ``tidegate ready`` log line when everything listens. SIGTERM/SIGINT stop in
reverse order: listeners stop reading, accepted requests are answered, appends drain,
then the controller and the segment store close (logs synced).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from tidegate.gateway.config import GatewayConfig, load_config, parse_host_port

log = logging.getLogger("tidegate")


def _parser() -> argparse.ArgumentParser:
    from tidegate import __version__

    parser = argparse.ArgumentParser(prog="tidegate")
    parser.add_argument("--version", action="version", version=f"tidegate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the embedded node")
    serve.add_argument("--data-dir", help="data directory (default ./tidegate-data)")
    serve.add_argument("--listen", help="Kafka listener HOST:PORT (default 127.0.0.1:9092)")
    serve.add_argument("--advertised-listener", help="HOST:PORT given to clients in Metadata")
    serve.add_argument("--rest", help="admin REST HOST:PORT (default 127.0.0.1:9080; off)")
    serve.add_argument("--grpc", help="controller gRPC HOST:PORT (default 127.0.0.1:9090; off)")
    serve.add_argument("--config", type=Path, help="TOML file; every flag is also a key")
    serve.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        help="least severe log lines printed on stderr (default INFO)",
    )
    return parser


def _enabled(address: str) -> bool:
    return address not in ("", "off", "none")


async def serve(config: GatewayConfig) -> None:
    from tidegate.core.controller.config import ControllerConfig
    from tidegate.core.controller.controller import StreamController
    from tidegate.core.segmentstore.config import SegmentStoreConfig
    from tidegate.core.segmentstore.service import StreamSegmentStore
    from tidegate.gateway.app import Gateway
    from tidegate.gateway.log.traffic import PartitionTraffic

    config.data_dir.mkdir(parents=True, exist_ok=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    store_config = SegmentStoreConfig(**config.store)
    store = StreamSegmentStore(config.data_dir / "segmentstore", store_config)
    await store.start()
    # The auto-scaler splits topics between partitions, where the gateway's measured
    # per-partition traffic divides (never inside a partition).
    traffic = PartitionTraffic(config.scope, store_config.traffic_window_ms)
    controller = StreamController(
        store, ControllerConfig(**config.controller), key_traffic=traffic
    )
    await controller.start()
    gateway = Gateway(
        config, store, controller, traffic=traffic, controller_counts=controller.stats
    )
    rest: tuple[Any, Any] | None = None
    grpc_server: Any = None
    try:
        host, port = await gateway.start()
        if _enabled(config.rest):
            from tidegate.gateway.admin.rest import create_app, serve_rest

            rhost, rport = parse_host_port(config.rest)
            rest = await serve_rest(create_app(controller, metrics=gateway.metrics), rhost, rport)
        if _enabled(config.grpc):
            from tidegate.gateway.admin.grpc_service import start_grpc_server

            ghost, gport = parse_host_port(config.grpc)
            grpc_server = await start_grpc_server(controller, ghost, gport)
        log.info(
            "tidegate ready: kafka=%s:%d advertised=%s rest=%s grpc=%s data-dir=%s",
            host,
            port,
            config.advertised_listener,
            config.rest,
            config.grpc,
            config.data_dir,
        )
        # What start-up built (modules, protocol schemas, controller and store state)
        # lives as long as the process: moved out of the collector's generations, a full
        # collection later scans only what came since, and pauses the loop far less.
        gc.collect()
        gc.freeze()
        await stop.wait()
        log.info("tidegate stopping")
    finally:
        if grpc_server is not None:
            await grpc_server.stop(2)
        if rest is not None:
            from tidegate.gateway.admin.rest import stop_rest

            with contextlib.suppress(Exception):
                await stop_rest(*rest)
        await gateway.close()
        await controller.close()
        await store.close()
        log.info("tidegate stopped")


def _set_malloc_mmap_threshold(threshold_bytes: int) -> None:
    """Fix glibc's mmap threshold (see ``GatewayConfig.malloc_mmap_threshold_bytes``);
    a libc without ``mallopt`` is left alone."""
    if threshold_bytes <= 0:
        return
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None) if name else None
    m_mmap_threshold = -3  # glibc <malloc.h>
    if mallopt is None or mallopt(m_mmap_threshold, threshold_bytes) != 1:
        log.warning("malloc mmap threshold not set (no glibc mallopt)")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    overrides = {
        "data-dir": args.data_dir,
        "listen": args.listen,
        "advertised-listener": args.advertised_listener,
        "rest": args.rest,
        "grpc": args.grpc,
    }
    try:
        config = load_config(args.config, overrides)
        _ = (config.listen_address, config.advertised_address)  # validate early
    except (ValueError, OSError) as exc:
        print(f"tidegate: {exc}", file=sys.stderr)
        return 2
    _set_malloc_mmap_threshold(config.malloc_mmap_threshold_bytes)
    try:
        asyncio.run(serve(config))
    except OSError as exc:
        print(f"tidegate: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
