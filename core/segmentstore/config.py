"""Configuration of the segment store: every bound, named with its unit."""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SegmentStoreConfig:
    #: Containers in the cluster; a segment lives in container ``crc32c(name) % count``.
    container_count: int = 4
    #: Containers this node runs (``None``: all of them). Others raise
    #: ``ContainerNotOwnedError``.
    owned_containers: tuple[int, ...] | None = None
    #: Bytes of segment data the read-index caches hold, all containers together
    #: (payload plus a fixed per-entry overhead).
    cache_bytes_max: int = 256 * MiB
    #: Largest data frame (one Tier-1 entry), header included.
    frame_bytes_max: int = 1 * MiB
    #: Data frames handed to the Tier-1 log and not yet durable, per container.
    frames_in_flight_max: int = 64
    #: Tier-1 log files are rolled at this size (passed to the file log).
    tier1_file_bytes_max: int = 64 * MiB
    #: Tier-1 log files kept for reuse once truncated away, per container (syncs into a
    #: reused file skip the filesystem's journal commit; ``tier1/fileformat.py``).
    tier1_spare_files: int = 2
    #: Tier-1 asks the kernel to drop its log's synced bytes from the page cache each
    #: time this many have gathered (``POSIX_FADV_DONTNEED``; 0: never). They are read
    #: back only at recovery and for data the cache evicted before Tier-2 had it.
    tier1_drop_written_bytes: int = 4 * MiB
    #: Replicated Tier-1 (plog servers, ``tier1/replicated/``): the ZooKeeper connect
    #: string where plog servers register and each container's plog chain is kept.
    #: ``None`` (the embedded node): each container's Tier-1 is the local file log.
    tier1_plog_zookeeper: str | None = None
    tier1_plog_zookeeper_root: str = "/tidegate/plog"
    #: Servers each plog is written to (a persistence group).
    tier1_replication_factor: int = 3
    #: While fewer servers than the replication factor are healthy, new plogs go on as
    #: few as this many (Kafka's ``min.insync.replicas``); fewer is an error.
    tier1_min_replicas: int = 2
    #: A plog is switched for the next one at this size.
    tier1_plog_bytes_max: int = 64 * MiB
    #: A plog server that leaves a call unanswered this long is given up on: the plog
    #: is sealed and appends go on in a new one on other servers. A dead server is
    #: noticed at once (its connection closes); this is for one that stalls, and a plog
    #: server inside a node shares the node's event loop, which a busy start can stall
    #: for seconds.
    tier1_plog_timeout_ms: int = 10_000
    #: How often a log's owner looks for plogs on fewer live servers than the
    #: replication factor and copies them to more (``replicated/repair.py``); 0: never.
    tier1_plog_repair_interval_ms: int = 5_000
    #: Run a plog server inside this node too, listening here (``HOST:PORT``), its plogs
    #: under ``plog/`` in the store's data directory; ``None`` or ``"off"``: none.
    tier1_plog_server_listen: str | None = None
    #: Bytes the embedded plog server's plogs may take, written and reserved (``None``:
    #: what its disk has free).
    tier1_plog_server_disk_bytes_max: int | None = None
    #: Container ``N``'s log is named ``<prefix>container-N`` in ZooKeeper.
    tier1_plog_log_prefix: str = "tidegate-"
    #: Largest single append.
    append_bytes_max: int = 8 * MiB
    #: Largest table key and value.
    table_key_bytes_max: int = 8 * 1024
    table_value_bytes_max: int = 1 * MiB
    #: Storage writer: flush a segment's aggregated appends to Tier-2 once they reach
    #: this many bytes, or once the oldest is this old.
    flush_bytes: int = 4 * MiB
    flush_interval_ms: int = 1000
    #: Between flushes, a segment's new bytes go to Tier-2 unsynced once this many have
    #: gathered and ``flush_trickle_interval_ms`` passed since the last such write (the
    #: flush then syncs them all at once). On one disk a whole flush written and synced
    #: at once holds up the Tier-1 syncs behind it, and with them every acknowledgement;
    #: written back a few hundred KiB at a time it stalls them far less. 0: off.
    flush_trickle_bytes: int = 512 * 1024
    flush_trickle_interval_ms: int = 100
    #: Per container: bytes committed but not yet in Tier-2 (plus ~400 bytes per
    #: operation). Past it, mutating calls are acknowledged only once the storage writer
    #: has caught up below it again: the memory and Tier-1 space behind a slow Tier-2
    #: stay bounded.
    writer_lag_bytes_max: int = 256 * MiB
    #: Node-wide: while data not yet in Tier-2 fills more than this share of
    #: ``cache_bytes_max``, mutating calls are acknowledged only once the storage
    #: writers have flushed it back below (the lag bound above is per container, the
    #: cache is shared). Without it the cache evicts that data and the writers read it
    #: back from Tier-1. 1.0 or more: never wait for the cache.
    writer_cache_share_max: float = 0.75
    #: Node-wide: blocks read from Tier-2 (readers catching up through older data) keep
    #: at most this share of a full cache; beyond it they are evicted first, so they do
    #: not push out the recent data tail readers are served from.
    cache_tier2_share_max: float = 0.125
    #: Where filesystem Tier-2 keeps segment files (``None``: ``tier2/`` in the store's
    #: data directory). Tier-2 is the long-term store (the seed's NFS or HDFS mount):
    #: on another device than Tier-1, the two copies of each byte (log, then chunk) no
    #: longer share one disk's bandwidth.
    tier2_dir: str | None = None
    #: Where the containers' Tier-1 logs and inactive-segment records live (``None``: the
    #: store's data directory). Cluster mode shares it between nodes, so a container can
    #: be recovered on another node (fenced by the Tier-1 epoch).
    tier1_dir: str | None = None
    #: Where each container's Tier-2 fence file lives (``fence.py``; ``None``: no fence,
    #: one process owns every container). Cluster mode: beside the shared Tier-2.
    tier2_fence_dir: str | None = None
    #: Where the inactive-segment records live when they are not beside a shared Tier-1
    #: directory (``None``: ``tier1_dir``, else the store's data directory). Cluster mode
    #: on the replicated Tier-1 keeps them in the shared Tier-2 directory.
    metadata_dir: str | None = None
    #: Largest single Tier-2 write.
    tier2_write_bytes_max: int = 16 * MiB
    #: Tier-2 (filesystem) chunk files are rolled at this size; truncation frees whole
    #: chunks.
    tier2_chunk_bytes_max: int = 64 * MiB
    #: Tier-2 reads for cache misses fetch at least this many bytes (read-ahead).
    tier2_read_block_bytes: int = 1 * MiB
    #: Filesystem Tier-2: written (and synced) pages leave the page cache. Recent data
    #: is read from the read index's cache; the page cache would hold a second copy, and
    #: growing it is costly kernel work on every produced byte. Catch-up reads of older
    #: data then come from the disk.
    tier2_drop_written_pages: bool = True
    #: Filesystem Tier-2: after each read the kernel is asked to read this many bytes
    #: ahead (``POSIX_FADV_WILLNEED``): a chunk is opened per read, so the kernel's own
    #: sequential read-ahead never starts.
    tier2_read_ahead_bytes: int = 4 * MiB
    #: Attempts of a Tier-2 read that fails with a transient error, before the read
    #: fails with ``DataCorruptionError``.
    tier2_read_attempts: int = 4
    #: Delay before the storage writer retries a failed Tier-2 call; it doubles after
    #: each failure up to ``writer_retry_delay_max_ms``.
    writer_retry_delay_ms: int = 50
    writer_retry_delay_max_ms: int = 5000
    #: A container whose Tier-1 log failed or whose storage writer stopped is restarted
    #: (recovered from Tier-1, reconciled with Tier-2) after this delay; the delay
    #: doubles after each failed start, up to ``container_restart_delay_max_ms``.
    #: 0 turns restarts off (the container stays failed until the process restarts).
    container_restart_delay_ms: int = 1000
    container_restart_delay_max_ms: int = 30_000
    #: A metadata checkpoint is written after this many logged bytes or operations.
    checkpoint_interval_bytes: int = 64 * MiB
    checkpoint_interval_ops: int = 100_000
    #: Table segments are compacted once their retained bytes exceed both this and twice
    #: their live entries' bytes.
    table_compact_bytes_min: int = 4 * MiB
    #: Traffic figures are exponentially smoothed over this window.
    traffic_window_ms: int = 10_000
    #: A segment with no append or read for this long leaves memory once all of it is
    #: in Tier-2 (its record goes to the container's RocksDB store, ``metastore.py``);
    #: the next call naming it brings it back. 0 keeps idle segments in memory.
    segment_idle_ms: int = 10 * 60 * 1000
    #: Per container: past this many segments in memory, the least recently used that
    #: can leave do so, idle or not (tables always stay).
    active_segments_max: int = 10_000
    #: How often the storage writer looks for segments to make inactive.
    segment_evict_interval_ms: int = 5_000

    def retry_delay_s(self, attempt: int) -> float:
        """Seconds to wait before retrying a failed Tier-2 call after ``attempt`` (from 0)
        failures: ``writer_retry_delay_ms`` doubling, capped at ``writer_retry_delay_max_ms``."""
        ms: int = min(self.writer_retry_delay_ms << min(attempt, 16), self.writer_retry_delay_max_ms)
        return ms / 1000
