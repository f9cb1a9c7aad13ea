"""``StreamSegmentStore``: every container of one node behind the ``SegmentStore`` API.

Layout under ``data_dir``: ``tier1/container-N/`` (each container's Tier-1 log),
``tier1-index/container-N/<epoch>/`` (its ``Tier1Index``, RocksDB, rebuilt at every
start), ``metadata/container-N/`` (records of its inactive segments, RocksDB, kept),
``tier2/`` (Tier-2 segment files, shared by all containers; ``tier2_dir`` puts them
elsewhere).

A segment belongs to container ``crc32c(primary name) % container_count`` (stable
across processes and nodes; see ``container_of``). Every mutating call queues its operation into its container's
durable log before its first ``await``: the order of calls is the order in the log, and
a call rejected at validation (typed error) affects nothing queued before or after it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tidegate.core.cluster.zookeeper import ZooKeeper
from tidegate.core.plog.server import PlogServer, PlogServerThread
from tidegate.core.segmentstore.api import (
    AttributeUpdate,
    ContainerNotOwnedError,
    ReadResult,
    SegmentProperties,
    SegmentStore,
    SegmentStoreError,
    SegmentTraffic,
    StoreShutdownError,
    TableEntry,
    TableRemoval,
    TableUpdate,
)
from tidegate.core.segmentstore.callbacks import DoneCallback, when_done
from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.container import RUNNING, SegmentContainer
from tidegate.core.segmentstore.placement import container_of as container_of  # re-exported
from tidegate.core.segmentstore.reading.cache import Cache
from tidegate.core.segmentstore.tier1.api import DurableDataLog
from tidegate.core.segmentstore.tier1.replicated.replicas import Suspicions
from tidegate.core.segmentstore.traffic import Traffic
from tidegate.core.segmentstore.writer.writer import StorageWriter
from tidegate.tier2.api import Storage

Tier1Factory = Callable[[int], DurableDataLog]

log = logging.getLogger(__name__)


class StreamSegmentStore:
    def __init__(
        self,
        data_dir: Path,
        config: SegmentStoreConfig = SegmentStoreConfig(),  # noqa: B008 - frozen
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        tier1_factory: Tier1Factory | None = None,
        tier2: Storage | None = None,
    ) -> None:
        """``tier1_factory(container_id)`` and ``tier2`` replace the on-disk Tier-1
        logs and Tier-2 store (tests inject in-memory or fault-injecting ones)."""
        self.data_dir = Path(data_dir)
        self.config = config
        self._clock = clock
        self._wall_clock = wall_clock
        self._zookeeper: ZooKeeper | None = None
        self.plog_server: PlogServerThread | None = None
        #: Plog servers given up on, shared by this node's replicated logs.
        self.plog_suspicions = Suspicions()
        if tier1_factory is None and config.tier1_plog_zookeeper:
            self._zookeeper = ZooKeeper(config.tier1_plog_zookeeper)
        self._tier1_factory = tier1_factory or (self._plog_log if self._zookeeper else self._file_log)
        # A container's Tier-1 log and its inactive-segment records move with it between
        # nodes: in cluster mode both live in directories every node shares.
        self._shared_dir = Path(config.tier1_dir) if config.tier1_dir else self.data_dir
        self._metadata_root = Path(config.metadata_dir) if config.metadata_dir else self._shared_dir
        if tier2 is None:
            from tidegate.tier2.filesystem import FileSystemStorage

            tier2 = FileSystemStorage(
                Path(config.tier2_dir) if config.tier2_dir else self.data_dir / "tier2",
                chunk_bytes_max=config.tier2_chunk_bytes_max,
                drop_written_pages=config.tier2_drop_written_pages,
                read_ahead_bytes=config.tier2_read_ahead_bytes,
            )
        self.storage: Storage = tier2
        self.cache = Cache(config.cache_bytes_max, config.writer_cache_share_max, config.cache_tier2_share_max)
        self.traffic_meters = Traffic(clock, config.traffic_window_ms)
        owned = config.owned_containers
        self.owned = frozenset(range(config.container_count) if owned is None else owned)
        self.containers: dict[int, SegmentContainer] = {}
        self._watchers: dict[int, asyncio.Task[None]] = {}
        self.restarts = 0  # containers restarted after a failure, for tests and metrics
        self._closed = False
        self._cids: dict[str, int] = {}  # memo of container_of

    def _file_log(self, container_id: int) -> DurableDataLog:
        from tidegate.core.segmentstore.tier1.filelog import FileDurableDataLog

        directory = self._shared_dir / "tier1" / f"container-{container_id}"
        log: DurableDataLog = FileDurableDataLog(
            directory,
            file_bytes_max=self.config.tier1_file_bytes_max,
            spare_files=self.config.tier1_spare_files,
            drop_written_bytes=self.config.tier1_drop_written_bytes,
        )
        return log

    def _plog_log(self, container_id: int) -> DurableDataLog:
        from tidegate.core.segmentstore.tier1.replicated.cluster import ZooKeeperPlogCoordinator
        from tidegate.core.segmentstore.tier1.replicated.log import ReplicatedDurableDataLog

        assert self._zookeeper is not None
        c = self.config
        log: DurableDataLog = ReplicatedDurableDataLog(
            f"{c.tier1_plog_log_prefix}container-{container_id}",
            ZooKeeperPlogCoordinator(self._zookeeper, c.tier1_plog_zookeeper_root),
            replication_factor=c.tier1_replication_factor,
            min_replicas=c.tier1_min_replicas,
            plog_bytes_max=c.tier1_plog_bytes_max,
            entry_bytes_max=max(c.frame_bytes_max, c.append_bytes_max) + 64 * 1024,
            timeout_ms=c.tier1_plog_timeout_ms,
            repair_interval_ms=c.tier1_plog_repair_interval_ms,
            suspicions=self.plog_suspicions,
        )
        return log

    def plog_server_gone(self, server_id: str, reason: str) -> None:
        """Give up on a plog server at once in every log here (its node's session ended:
        a frozen node's server keeps its socket open and would be waited for)."""
        if self.plog_server is None or server_id != self.plog_server.server_id:
            self.plog_suspicions.suspect(server_id, reason, until_back=True)

    def plog_server_back(self, server_id: str) -> None:
        """Its node joined again: the server is chosen and asked again."""
        if server_id in self.plog_suspicions.gone:
            log.info("plog server %s is back with its node", server_id)
            self.plog_suspicions.clear(server_id)

    def _new_container(self, cid: int) -> SegmentContainer:
        return SegmentContainer(
            cid,
            self.config,
            self._tier1_factory(cid),
            self.storage,
            self.cache,
            self.traffic_meters,
            index_dir=self.data_dir / "tier1-index" / f"container-{cid}",
            metadata_dir=self._metadata_root / "metadata" / f"container-{cid}",
            clock=self._clock,
            wall_clock=self._wall_clock,
        )

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Start (recover) every owned container, all at once: one's Tier-1 reads and
        Tier-2 calls overlap the others' replay. The first failure is raised once every
        start has ended."""
        self._closed = False
        await self._start_plog_server()
        results = await asyncio.gather(
            *(self.start_container(cid) for cid in sorted(self.owned)), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _start_plog_server(self) -> None:
        """The embedded plog server (``tier1_plog_server_listen``), registered in the
        ZooKeeper the replicated Tier-1 logs use, before any container opens its log."""
        listen = self.config.tier1_plog_server_listen
        if not listen or listen in ("off", "none") or self.plog_server is not None:
            return
        host, _, port = listen.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"tier1_plog_server_listen: expected HOST:PORT, got {listen!r}")
        server = PlogServer(
            self.data_dir / "plog", host.strip("[]"), int(port),
            zookeeper=self.config.tier1_plog_zookeeper,
            root=self.config.tier1_plog_zookeeper_root,
            disk_bytes_max=self.config.tier1_plog_server_disk_bytes_max,
        )
        threaded = PlogServerThread(server)
        await threaded.start()  # on failure nothing is left open: a later start tries again
        self.plog_server = threaded

    async def start_container(self, cid: int) -> None:
        """Start (recover) one container; a stopped or failed one is replaced. Once
        started, a failure of the container restarts it (``container_restart_delay_ms``)."""
        self.owned = self.owned | {cid}
        await self._restart(cid)
        if self.config.container_restart_delay_ms > 0:
            watcher = self._watchers.get(cid)
            if watcher is None or watcher.done():
                self._watchers[cid] = asyncio.get_running_loop().create_task(self._watch(cid))

    async def _watch(self, cid: int) -> None:
        """Restart container ``cid`` whenever it fails, as the seed's container manager
        does: recovery rebuilds it from Tier-1 and reconciles it with Tier-2. Failed
        starts are retried with a doubling delay; calls meanwhile get
        ``StoreShutdownError``."""
        first = self.config.container_restart_delay_ms / 1000
        most = max(first, self.config.container_restart_delay_max_ms / 1000)
        while not self._closed:
            c = self.containers.get(cid)
            if c is None or cid not in self.owned:
                return
            await c.needs_restart.wait()
            delay = first
            while not self._closed:
                log.warning(
                    "container %d failed (%r); restarting in %d ms", cid, c.failure, delay * 1000
                )
                await asyncio.sleep(delay)
                if self._closed or cid not in self.owned:
                    return  # closed, or moved to another node (which fenced this one)
                try:
                    await self._restart(cid)
                    self.restarts += 1
                    log.info("container %d restarted", cid)
                    break
                except Exception as exc:  # noqa: BLE001 - logged, retried with backoff
                    c = self.containers.get(cid, c)
                    c.failure = exc
                    delay = min(delay * 2, most)

    async def _restart(self, cid: int) -> None:
        old = self.containers.get(cid)
        if old is not None:
            await old.stop()
        c = self.containers[cid] = self._new_container(cid)
        await c.start()

    def release(self, cid: int) -> None:
        """Another node owns ``cid`` now: a failure of it is no longer restarted here (the
        restart would fence the new owner); ``stop_container`` stops it later."""
        self.owned = self.owned - {cid}

    async def stop_container(self, cid: int) -> None:
        """Stop one container and give up its ownership (it moves to another node)."""
        self.owned = self.owned - {cid}
        watcher = self._watchers.pop(cid, None)
        if watcher is not None:
            watcher.cancel()
        c = self.containers.pop(cid, None)
        if c is not None:
            await c.stop()

    async def close(self) -> None:
        self._closed = True
        for watcher in self._watchers.values():
            watcher.cancel()
        self._watchers.clear()
        await asyncio.gather(*(c.stop() for c in self.containers.values()))
        if self._zookeeper is not None:
            await self._zookeeper.stop()
        if self.plog_server is not None:
            await self.plog_server.close()
            self.plog_server = None

    async def flush_to_storage(self) -> None:
        """Checkpoint every container, move everything durable to Tier-2 and truncate
        Tier-1 up to the checkpoint (tests, benchmarks, orderly shutdown)."""
        for c in self.containers.values():
            if c.state == RUNNING:
                await c.queue_checkpoint()
                await c.writer.flush_all()

    def stats(self) -> dict[str, object]:
        """Figures for metrics and tests: cache use and, per container, its state,
        epoch, last durable sequence number, segment count, writer lag and retries."""
        return {
            "cache_bytes": self.cache.used_bytes,
            "cache_bytes_max": self.cache.bytes_max,
            "cache_unflushed_bytes": self.cache.unflushed_bytes,
            "cache_spilled_bytes": self.cache.spilled_bytes,
            "cache_tier2_block_bytes": self.cache.blocks_bytes,
            "containers": {
                cid: {
                    "state": c.state,
                    "epoch": c.epoch,
                    "committed_seq": c.committed_seq,
                    "segments": len(c.md.by_name),
                    "segments_made_inactive": c.writer.evicted,
                    "segment_activations": c.activations,
                    "writer_lag_bytes": c.writer.lag_bytes,
                    "tier2_writes": c.writer.tier2_writes,
                    "tier2_trickles": c.writer.tier2_trickles,
                    "tier2_retries": c.writer.retries,
                    "writer_error": None if c.writer.error is None else repr(c.writer.error),
                }
                for cid, c in sorted(self.containers.items())
            },
        }

    def _c(self, name: str) -> SegmentContainer:
        cid = self._cids.get(name)
        if cid is None:
            if len(self._cids) >= 100_000:
                self._cids.clear()
            cid = self._cids[name] = container_of(name, self.config.container_count)
        c = self.containers.get(cid)
        if c is None:
            if cid not in self.owned:
                raise ContainerNotOwnedError(name, f"container {cid} is not owned here")
            raise StoreShutdownError(name, f"container {cid} is not started")
        return c

    def container_for(self, name: str) -> SegmentContainer:
        return self._c(name)

    # -- segments -----------------------------------------------------------------------

    async def create_segment(self, name: str, attributes: Mapping[str, int] | None = None) -> None:
        await self._c(name).queue_create(name, attributes, False)

    async def append(
        self,
        name: str,
        data: bytes | memoryview,
        *,
        expected_offset: int | None = None,
        attribute_updates: Sequence[AttributeUpdate] = (),
        event_count: int = 1,
    ) -> int:
        c = self._c(name)
        offset: int = await c.queue_append(name, data, expected_offset, attribute_updates, event_count)
        writer = c.writer
        if writer.behind:
            await writer.wait_lag()
        return offset

    def append_future(
        self,
        name: str,
        data: bytes | memoryview,
        *,
        expected_offset: int | None = None,
        attribute_updates: Sequence[AttributeUpdate] = (),
        event_count: int = 1,
        on_done: DoneCallback | None = None,
    ) -> asyncio.Future[int]:
        """The container's own future when the storage writer is within its lag bound
        (checked now, not at completion as ``append`` does: the bound is approximate
        either way), with ``on_done`` called by the durable log as it completes it;
        otherwise a task that also waits for the writer to catch up, with ``on_done`` as
        its done callback."""
        try:
            c = self._c(name)
            behind = c.writer.behind
            fut: asyncio.Future[int] = c.queue_append(
                name, data, expected_offset, attribute_updates, event_count,
                None if behind else on_done,
            )
        except SegmentStoreError as exc:
            failed: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            when_done(failed, on_done)
            return failed
        if behind:
            lagged = asyncio.ensure_future(_after_lag(fut, c.writer))
            when_done(lagged, on_done)
            return lagged
        return fut

    async def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> None:
        await self._c(name).queue_update_attributes(name, updates)

    async def read(self, name: str, offset: int, max_length: int, timeout_ms: int = 0) -> ReadResult:
        return await self._c(name).read(name, offset, max_length, timeout_ms)

    async def get_info(self, name: str) -> SegmentProperties:
        return self._c(name).info(name)

    async def seal(self, name: str) -> int:
        return int(await self._c(name).queue_seal(name))

    async def truncate(self, name: str, offset: int) -> None:
        await self._c(name).queue_truncate(name, offset)

    async def merge(self, target: str, source: str) -> int:
        """Both segments must live in the same container (transaction segments are
        named after their parent so they hash alike); otherwise
        ``ContainerNotOwnedError`` for the source."""
        c = self._c(target)
        other = self._c(source)
        if other is not c:
            c.md.mutable(target)
            other.md.mutable(source)
            raise ContainerNotOwnedError(source, "merge source lives in another container")
        return int(await c.queue_merge(target, source))

    async def delete_segment(self, name: str) -> None:
        await self._c(name).queue_delete(name, False)

    def traffic(self, name: str) -> SegmentTraffic:
        b, e = self.traffic_meters.rates(name)
        return SegmentTraffic(b, e)

    # -- tables -------------------------------------------------------------------------

    async def create_table(self, name: str) -> None:
        await self._c(name).queue_create(name, None, True)

    async def delete_table(self, name: str, must_be_empty: bool = False) -> None:
        await self._c(name).queue_delete(name, True, must_be_empty)

    async def table_put(self, name: str, updates: Sequence[TableUpdate]) -> list[int]:
        c = self._c(name)
        res = c.queue_table_put(name, updates)
        if isinstance(res, list):
            return res
        versions = list(await res)
        if c.writer.behind:
            await c.writer.wait_lag()
        return versions

    async def table_remove(self, name: str, removals: Sequence[TableRemoval]) -> None:
        fut = self._c(name).queue_table_remove(name, removals)
        if fut is not None:
            await fut

    async def table_get(self, name: str, keys: Sequence[bytes]) -> list[TableEntry | None]:
        return self._c(name).table_get(name, keys)

    async def table_entries(self, name: str, prefix: bytes = b"") -> list[TableEntry]:
        return self._c(name).table(name).items(prefix)


def _conforms(store: StreamSegmentStore) -> SegmentStore:
    """Never called: makes mypy check that the class implements the protocol."""
    return store


async def _after_lag(fut: asyncio.Future[int], writer: StorageWriter) -> int:
    offset = await fut
    if writer.behind:
        await writer.wait_lag()
    return offset
