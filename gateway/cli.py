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
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, NoReturn

from tidegate.gateway import heap
from tidegate.gateway.admin.servers import AdminServers, enabled, grpc_tls_pem
from tidegate.gateway.config import (
    ENV_PREFIX,
    GatewayConfig,
    load_config,
    parse_host_port,
    unknown_variables,
)
from tidegate.gateway.logging_setup import FORMATS
from tidegate.gateway.logging_setup import configure as configure_logging
from tidegate.gateway.net.limits import parse_ip_overrides, raise_fd_limit
from tidegate.gateway.startup import StartupError, check_address_free, lock_data_dir
from tidegate.gateway.waiting import StartupState, Waiter

log = logging.getLogger("tidegate")


#: Where the help points for more than the flags.
DOCS = ("Every flag is also a config key (--config FILE, --set KEY=VALUE, TIDEGATE_* "
        "variables); every key, the metrics and the data directory: docs/operations.md and "
        "README.md in tidegate's source.")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line (``--help`` shows the usage), exit status 2 as argparse's own."""
        self.exit(2, f"tidegate: {message}\n")


def _parser() -> argparse.ArgumentParser:
    from tidegate import __version__

    parser = _Parser(prog="tidegate", epilog=DOCS)
    parser.add_argument("--version", action="version", version=f"tidegate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    serve = sub.add_parser(
        "serve", help="run a node: embedded (default) or in a cluster (--zookeeper)",
        description="Run a tidegate node: Kafka listener, admin REST, controller gRPC, "
        "segment store and controller in one process.", epilog=DOCS,
    )
    serve.add_argument("--data-dir", metavar="DIR", help="data directory (default ./tidegate-data)")
    serve.add_argument("--listen", metavar="HOST:PORT", help="Kafka listener HOST:PORT (default 127.0.0.1:9092)")
    serve.add_argument("--advertised-listener", metavar="HOST:PORT",
                       help="HOST:PORT given to clients in Metadata (default: --listen)")
    serve.add_argument("--rest", metavar="HOST:PORT|off", help="admin REST API, /metrics and /ui at HOST:PORT "
                       "(default 127.0.0.1:9080; off: no REST server)")
    serve.add_argument("--grpc", metavar="HOST:PORT|off", help="controller gRPC API at HOST:PORT "
                       "(default 127.0.0.1:9090; off: no gRPC server)")
    serve.add_argument("--zookeeper", metavar="HOSTS", help="join a cluster: ZooKeeper HOST:PORT[/chroot] "
                       "(default: none, one embedded node)")
    serve.add_argument("--node-id", metavar="N", type=int, help="this node's id (default 0)")
    serve.add_argument("--segment-store", metavar="HOST:PORT", help="cluster: where the other nodes reach this "
                       "node's segment store, HOST:PORT (default 127.0.0.1:0, any free port)")
    serve.add_argument("--tier1-dir", metavar="DIR", help="Tier-1 logs directory (default: in the data "
                       "directory; cluster: replicated plogs, or a file log shared here)")
    serve.add_argument("--tier2-dir", metavar="DIR", help="Tier-2 directory (default DATA_DIR/segmentstore/"
                       "tier2; cluster: one directory all nodes share)")
    serve.add_argument("--container-count", metavar="N", type=int, help="segment containers in the whole "
                       "cluster, the same on every node (default 4)")
    serve.add_argument("--config", metavar="FILE", type=Path,
                       help="TOML file; every flag is also a key (default: none)")
    serve.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="set a config key (repeatable; a table's key as store.KEY); wins over "
        "TIDEGATE_* variables and the file",
    )
    plog = sub.add_parser("plog-server", help="run a plog server (replicated Tier-1)",
                          epilog=DOCS)
    plog.add_argument("--data-dir", type=Path, required=True, help="where its plogs are kept")
    plog.add_argument("--listen", default="127.0.0.1:9190", help="HOST:PORT (default 127.0.0.1:9190)")
    plog.add_argument("--zookeeper", help="ZooKeeper connect string to register in "
                      "(default: none, not registered)")
    plog.add_argument("--zookeeper-root", default="/tidegate/plog",
                      help="its ZooKeeper path (default /tidegate/plog)")
    plog.add_argument("--server-id", help="id in ZooKeeper (default: made once, kept in the data dir)")
    plog.add_argument("--disk-bytes-max", type=int, help="bytes its plogs may take (default: the disk)")
    plog.add_argument("--sweep-interval-ms", type=int, default=300_000,
                      help="how often plogs that no log records any more are deleted, in ms "
                      "(default 300000; also at start; 0: at start only)")
    for p in (serve, plog):
        p.add_argument(
            "--log-level",
            default=os.environ.get(f"{ENV_PREFIX}LOG_LEVEL", "INFO"),
            type=str.upper,
            choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
            help="least severe log lines printed on stderr (default INFO; TIDEGATE_LOG_LEVEL)",
        )
        p.add_argument(
            "--log-format",
            default=os.environ.get(f"{ENV_PREFIX}LOG_FORMAT", "text"),
            type=str.lower,
            choices=FORMATS,
            help="text lines or one JSON object a line (default text; TIDEGATE_LOG_FORMAT)",
        )
    return parser


async def serve(config: GatewayConfig, grpc_tls: tuple[bytes, bytes] | None = None) -> None:
    from tidegate.core.controller.config import ControllerConfig
    from tidegate.core.controller.controller import StreamController
    from tidegate.core.segmentstore.config import SegmentStoreConfig
    from tidegate.core.segmentstore.service import StreamSegmentStore
    from tidegate.gateway.admin.kafka_scope import KafkaScopeGuard
    from tidegate.gateway.app import Gateway
    from tidegate.gateway.log.traffic import PartitionTraffic

    config.data_dir.mkdir(parents=True, exist_ok=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    from tidegate.gateway.stackdump import install

    install(loop)  # SIGUSR1: thread and task stacks to stderr

    store_settings = dict(config.store)
    for key in ("tier1_dir", "tier2_dir"):
        if getattr(config, key):
            store_settings[key] = getattr(config, key)
    if config.container_count > 0:
        store_settings["container_count"] = config.container_count
    if config.zookeeper:
        from tidegate.gateway.cluster.wiring import cluster_tier1_settings

        cluster_tier1_settings(config.zookeeper, config.segment_store, store_settings)
    store_config = SegmentStoreConfig(**store_settings)
    traffic = PartitionTraffic(config.scope, store_config.traffic_window_ms)
    cluster: Any = None
    # A cluster node waits for ZooKeeper, its peers and their containers (gateway/waiting.py).
    waiter = Waiter(StartupState(), patient=bool(config.zookeeper))
    if config.zookeeper:
        from tidegate.gateway.cluster.wiring import ClusterWiring

        # The container map says which containers this node runs.
        local_config = dataclasses.replace(store_config, owned_containers=())
        if store_config.tier2_dir and store_config.tier2_fence_dir is None:
            # Tier-2 writes fenced by each container's epoch (core/segmentstore/fence.py).
            fences = str(Path(store_config.tier2_dir) / ".fence")
            local_config = dataclasses.replace(local_config, tier2_fence_dir=fences)
        local = StreamSegmentStore(config.data_dir / "segmentstore", local_config)
        cluster = ClusterWiring(config, local)
        store = cluster.routing
        # A node measures only the partitions it leads: the leader's auto-scaler cuts
        # between partition points by the segments' own rates (read from their owners).
        controller = StreamController(
            store, ControllerConfig(**config.controller), key_points=traffic.key_points,
            placement=cluster.routing,  # new segments go to different nodes
        )
        cluster.follow_leadership(controller)
        from tidegate.gateway.cluster.forwarding import LeaderForwarding

        front: Any = LeaderForwarding(
            controller, cluster.leader_grpc, authorization=_forward_authorization(config)
        )
    else:
        store = local = StreamSegmentStore(
            config.data_dir / "segmentstore", store_config
        )
        # The auto-scaler splits topics between partitions, where the gateway's measured
        # per-partition traffic divides (never inside a partition).
        controller = StreamController(
            store, ControllerConfig(**config.controller), key_traffic=traffic
        )
        front = controller
    # Followers' gateway, REST and gRPC writes go to the controller leader; writes
    # another node forwarded here run on this node's own controller (``forwarded``).
    gateway = Gateway(
        config, store, front, traffic=traffic, controller_counts=controller.stats,
        before_listen=cluster.attach if cluster is not None else None, local_store=local,
        waiter=waiter, container_of=cluster.container_of if cluster is not None else None,
        brokers=cluster.brokers if cluster is not None else None,
    )  # fmt: skip
    # The admin APIs may not seal, delete or truncate the streams under Kafka topics;
    # writes a follower's gateway forwards to this node's gRPC are the gateway's own.
    admin = KafkaScopeGuard(front, config.scope)
    admin_servers: AdminServers | None = None

    async def start() -> None:
        if cluster is not None:
            await cluster.start(waiter)
            # The leader's controller start makes it too, but this node may serve first.
            await waiter.until_done("the controller's tables",
                                    lambda: controller.md.ensure_table(controller.md.scopes_table))
        await gateway.load()
        if cluster is None:
            await gateway.serve()
        else:
            await cluster.announce(gateway.server.advertised if gateway.server else None)
        if config.admin_authentication:
            assert admin_servers is not None
            await admin_servers.start()

    if cluster is None:
        await local.start()
        await controller.start()
    try:
        # A cluster node listens at once: until it has what it needs (ZooKeeper, its
        # peers' plog servers, containers) it answers as a starting node. A single node
        # has nothing to wait for: its port opens once it serves everything, as Kafka's.
        host, port = await gateway.listen(serving=cluster is not None)
        admin_servers = AdminServers(config, admin, front, controller, store, gateway, grpc_tls)
        if not config.admin_authentication:
            # Up while the node waits: /health says for what (their auth needs the store).
            await admin_servers.start()
        if not await _until_stopped(start(), stop, gateway.state.waiting_for):
            return
        log.info(
            "tidegate ready: kafka=%s:%d listeners=%s advertised=%s rest=%s grpc=%s data-dir=%s",
            host,
            port,
            ",".join(f"{n}://{h}:{p}" for n, (h, p) in gateway.server.bound.items())
            if gateway.server else "",
            config.advertised_listener,
            config.rest,
            config.grpc,
            config.data_dir,
        )
        # What start-up built lives as long as the process, and so do the survivors of
        # each full collection: frozen, a full collection scans only what came since.
        heap.freeze_long_lived()
        await stop.wait()
        log.info("tidegate stopping")
    finally:
        if admin_servers is not None:
            await admin_servers.close()
        await gateway.close()
        if front is not controller:
            await front.close_channels()
        await controller.close()
        # Containers stop (logs synced) before the node leaves: their next owners then
        # recover them whole instead of fencing them mid-flush.
        await local.close()
        if cluster is not None:
            await cluster.close()
        log.info("tidegate stopped")


async def _until_stopped(
    work: Coroutine[Any, Any, None], stop: asyncio.Event, waiting_for: Callable[[], str]
) -> bool:
    """Run ``work`` unless SIGTERM comes first (a node may wait long for its peers):
    whether it finished."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if task.done():
        task.result()
        return True
    log.info("tidegate stopping before it was ready (waiting for %s)", waiting_for())
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False


def _check_security(config: GatewayConfig) -> None:
    """Security keys that cannot work stop the start (exit status 2)."""
    from tidegate.gateway.security.sasl import SUPPORTED

    extra = set(config.sasl) - {"users"}
    if extra:
        raise ValueError(
            f"[sasl] takes only the users table, not {', '.join(sorted(extra))} "
            '(quote dotted keys: "sasl.enabled.mechanisms" = ...)'
        )
    mechanisms = [m.strip().upper() for m in config.sasl_enabled_mechanisms.split(",") if m.strip()]
    unknown = [m for m in mechanisms if m not in SUPPORTED]
    if unknown:
        raise ValueError(f"sasl.enabled.mechanisms: {', '.join(unknown)} not supported")


def _forward_authorization(config: GatewayConfig) -> str | None:
    if not config.admin_forward_user:
        return None
    import base64

    pair = f"{config.admin_forward_user}:{config.admin_forward_password}".encode()
    return "Basic " + base64.b64encode(pair).decode()


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


def _plog_server(args: argparse.Namespace) -> int:
    from tidegate.core.cluster.zookeeper import ZooKeeperError
    from tidegate.core.plog.server import run_server

    try:
        host, port = parse_host_port(args.listen)
    except ValueError as exc:
        print(f"tidegate: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(run_server(
            args.data_dir, host, port, args.zookeeper, args.server_id, args.zookeeper_root,
            args.disk_bytes_max, args.sweep_interval_ms,
        ))
    except (OSError, ZooKeeperError) as exc:
        print(f"tidegate: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a bare ``tidegate``: what it can do, and where to read more
        parser.print_help(sys.stderr)
        return 2
    configure_logging(args.log_level, args.log_format)
    if args.command == "plog-server":
        return _plog_server(args)
    overrides = {
        "data-dir": args.data_dir,
        "listen": args.listen,
        "advertised-listener": args.advertised_listener,
        "rest": args.rest,
        "grpc": args.grpc,
        "zookeeper": args.zookeeper,
        "node-id": args.node_id,
        "segment-store": args.segment_store,
        "tier1-dir": args.tier1_dir,
        "tier2-dir": args.tier2_dir,
        "container-count": args.container_count,
    }
    try:
        config = load_config(args.config, overrides, env=os.environ, sets=args.set)
        listeners = config.kafka_listeners()
        inter = config.inter_broker_listener_name.upper()
        if inter and inter not in {listener.name for listener in listeners}:
            raise ValueError(f"inter.broker.listener.name: {inter} is not in listeners")
        _check_security(config)
        if any(listener.tls for listener in listeners):
            from tidegate.gateway.security.tls import server_context

            server_context(config)  # unreadable key material fails here, not later
        parse_ip_overrides(config.max_connections_per_ip_overrides)
        grpc_tls = grpc_tls_pem(config)  # an encrypted key is decrypted here, once
    except (ValueError, OSError) as exc:
        print(f"tidegate: {exc}", file=sys.stderr)
        return 2
    try:
        lock = lock_data_dir(config.data_dir)
        for listener in listeners:
            what = f"Kafka listener {listener.name}" if config.listeners else "Kafka listener"
            check_address_free(what, listener.host, listener.port)
        for what, address in (("REST", config.rest), ("gRPC", config.grpc)):
            if enabled(address):
                check_address_free(what, *parse_host_port(address))
    except (StartupError, ValueError) as exc:
        print(f"tidegate: {exc}", file=sys.stderr)
        return 2
    for line in unknown_variables(os.environ):
        log.warning("%s", line)
    _set_malloc_mmap_threshold(config.malloc_mmap_threshold_bytes)
    raise_fd_limit()  # max.connections of 0 is chosen from it
    try:
        asyncio.run(serve(config, grpc_tls))
    except (OSError, StartupError) as exc:
        print(f"tidegate: {exc}", file=sys.stderr)
        return 1
    finally:
        lock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
