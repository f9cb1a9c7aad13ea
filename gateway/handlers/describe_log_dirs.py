"""DescribeLogDirs (key 35), v1-5: where this node keeps partitions and how large each is
(``kafka-log-dirs.sh``; admin UIs show topic sizes from it).

Two log directories are reported: the Tier-1 directory, whose partitions' sizes are the
bytes not yet moved to Tier-2, and the Tier-2 directory, with the bytes that have moved
(``gateway.log.sizes``). A tool summing a partition over directories gets its whole
size. ``offset_lag`` is 0 (there are no follower replicas); the volume's total and usable
bytes are those of the filesystem each directory is on.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from kafka.protocol.admin import DescribeLogDirsRequest, DescribeLogDirsResponse
from tidegate.core.controller.api import StreamNotFoundError
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.log.compaction.checkpoint import Checkpoint
from tidegate.gateway.log.compaction.cleaner import clean_segment_id
from tidegate.gateway.log.sizes import PartitionSize, partition_sizes
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(DescribeLogDirsRequest, DescribeLogDirsResponse, 1, 5)

_Result = DescribeLogDirsResponse.DescribeLogDirsResult
_Topic = _Result.DescribeLogDirsTopic
_Partition = _Topic.DescribeLogDirsPartition


def tier_dirs(ctx: HandlerContext) -> tuple[Path, Path]:
    """The Tier-1 and Tier-2 directories as the segment store resolves them."""
    cfg = ctx.config
    base = cfg.data_dir / "segmentstore"
    tier1 = cfg.tier1_dir or cfg.store.get("tier1_dir") or base
    tier2 = cfg.tier2_dir or cfg.store.get("tier2_dir") or base / "tier2"
    return Path(tier1).resolve(), Path(tier2).resolve()


def _volume(path: Path) -> tuple[int, int]:
    for p in (path, *path.parents):
        try:
            usage = shutil.disk_usage(p)
        except OSError:
            continue
        return usage.total, usage.free
    return -1, -1


def _clean_segments(ctx: HandlerContext, topic: str, partitions: int) -> dict[int, str]:
    """The clean segment of each compacted partition (its checkpoint names it)."""
    out = {}
    for p in range(partitions):
        raw = ctx.index.clean_checkpoint(topic, p)
        if raw is not None:
            generation = Checkpoint.decode(raw).generation
            out[p] = ctx.topics.segment_name(topic, clean_segment_id(p, generation))
    return out


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    wanted: dict[str, set[int] | None]
    if request.topics is None:
        wanted = {name: None for name in ctx.topics.names()}
    else:
        wanted = {t.topic: set(t.partitions) for t in request.topics}
    sizes: dict[str, list[tuple[int, PartitionSize]]] = {}
    for name, parts in wanted.items():
        info = ctx.topics.get(name)
        if info is None:
            continue  # Kafka leaves out partitions this broker does not host
        try:
            all_sizes = await partition_sizes(ctx.topics, ctx.store, name, info.partitions,
                                              _clean_segments(ctx, name, info.partitions))
        except StreamNotFoundError:
            continue  # deleted while being described: hosted no more

        sizes[name] = [
            (p, s) for p, s in enumerate(all_sizes) if parts is None or p in parts
        ]
    results = []
    for path, tier in zip(tier_dirs(ctx), (1, 2), strict=True):
        total, usable = _volume(path)
        topics = [
            _Topic(name=name, partitions=[
                _Partition(
                    partition_index=p,
                    partition_size=s.tier1_bytes if tier == 1 else s.tier2_bytes,
                    offset_lag=0, is_future_key=False,
                )
                for p, s in parts
            ])
            for name, parts in sizes.items()
        ]
        results.append(_Result(
            error_code=ErrorCode.NONE, log_dir=str(path), topics=topics,
            total_bytes=total, usable_bytes=usable, is_cordoned=False,
        ))
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)
