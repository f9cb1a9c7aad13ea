"""Group and transaction coordination in cluster mode.

A group coordinator keeps its groups' live state (members, generations) in memory, so
one node must coordinate every group: the owner of the container holding the groups'
table segment (``GroupConfig.table``). FindCoordinator answers that node, for groups and
for transactional ids alike. The transaction coordinator runs on the same node: a
committed transaction's offsets go straight into the group coordinator (there is no
``__consumer_offsets`` partition to send them to), so the two are never apart. Its table
is reached through the routing store wherever it lives; the group coordinator's only
through this node's containers (a write after the container left fails, never lands in
the next coordinator's table). The share group coordinator
(``gateway/share``) runs there too: share consumers heartbeat to the node FindCoordinator
names for their group, and its table is reached the same way.

When the container moves here, all three are loaded from their tables, as at start-up (the
transaction coordinator completes what a dead coordinator left in Prepare*); when it
moves away, they close, and group, share group and transactional requests sent here answer
``NOT_COORDINATOR`` (stand-ins that never start), after which clients look their
coordinator up again. Markers for partitions other nodes lead are sent to them
(``gateway/cluster/txn_markers.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from tidegate.core.segmentstore.service import container_of
from tidegate.gateway.groups import GroupConfig, GroupCoordinator
from tidegate.gateway.groups.coordinator import NotCoordinator
from tidegate.gateway.share.config import ShareConfig
from tidegate.gateway.share.coordinator import ShareCoordinator
from tidegate.gateway.txn.coordinator import MarkerWriter
from tidegate.gateway.txn.standby import NotTxnCoordinator
from tidegate.gateway.txn.wiring import GroupOffsetsAdapter, build_coordinator

log = logging.getLogger(__name__)


class GroupPlacement:
    def __init__(self, ctx: Any, store: Any, container_count: int, markers: MarkerWriter,
                 local: Any = None) -> None:
        """``store`` reaches any container; ``local`` only this node's: the group
        coordinator writes through it, so a write still on its way when the container
        moved fails (as Kafka's coordinator no longer leading its offsets partition
        answers NOT_COORDINATOR) instead of landing in the new coordinator's table."""
        self.ctx = ctx
        self.store = store
        self.local = store if local is None else local
        self.markers = markers
        self.config = GroupConfig.from_table(ctx.config.groups)
        self.share_config = ShareConfig.from_table(ctx.config.share)
        self.container = container_of(self.config.table, container_count)
        self._following = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()
        ctx.not_coordinator = NotCoordinator(store, self.config)
        ctx.not_txn_coordinator = NotTxnCoordinator(
            store, ctx.producer_ids, markers, GroupOffsetsAdapter(lambda: ctx.groups), ctx.clock_ms,
        )

    def interrupted(self, cids: set[int]) -> None:
        """The map gave the groups' container to another node (called as the change is
        seen, before the container stops): the coordinators stop answering at once, as
        the container's partitions do, so no group, offset or transaction is answered
        from state the new coordinator moves past; they close in the background."""
        if self.container not in cids:
            return
        held = (self.ctx.share_groups, self.ctx.transactions, self.ctx.group_coordinator)
        self.ctx.share_groups = self.ctx.transactions = self.ctx.group_coordinator = None
        if any(c is not None for c in held):
            log.info("group, transaction and share group coordinators stop: container %d "
                     "is given to another node", self.container)
            task = asyncio.get_running_loop().create_task(self._close(*held))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _close(self, share: Any, txns: Any, groups: Any) -> None:
        async with self._following:
            for coordinator in (share, txns, groups):
                if coordinator is None:
                    continue
                try:
                    await coordinator.close()
                except Exception as exc:  # noqa: BLE001 - its container is gone anyway
                    log.warning("closing a coordinator that moved away: %r", exc)

    async def follow(self, running: set[int]) -> None:
        """Hold loaded coordinators exactly while this node runs the groups' container."""
        async with self._following:
            await self._follow(running)

    async def follow_until_done(self, running: Callable[[], set[int]], retry_ms: int = 500) -> None:
        """``follow``, tried again until it succeeds (a coordinator's table may not exist
        yet on a new cluster, or its container be moving)."""
        while True:
            try:
                await self.follow(running())
                return
            except Exception as exc:  # noqa: BLE001 - retried: the next map change may be far
                log.warning("group coordination not followed (%r); retrying", exc)
                await asyncio.sleep(retry_ms / 1000)

    async def _follow(self, running: set[int]) -> None:
        current = self.ctx.group_coordinator
        if self.container in running:
            if current is None:
                coordinator = GroupCoordinator(self.local, self.config)
                await coordinator.start()
                self.ctx.group_coordinator = coordinator
                log.info("group coordinator moved here (container %d)", self.container)
            if self.ctx.transactions is None:
                txns = build_coordinator(self.ctx, self.markers)
                await txns.start()  # in-doubt transactions completed before serving
                self.ctx.transactions = txns
                log.info("transaction coordinator moved here (container %d)", self.container)
            if self.ctx.share_groups is None:
                share = ShareCoordinator(self.store, self.share_config)
                share.shared_table = True  # the partition leaders write share-partitions
                await share.start()
                self.ctx.share_groups = share
                log.info("share group coordinator moved here (container %d)", self.container)
            return
        share, self.ctx.share_groups = self.ctx.share_groups, None
        if share is not None:
            await share.close()
            log.info("share group coordinator moved away (container %d)", self.container)
        txns, self.ctx.transactions = self.ctx.transactions, None
        if txns is not None:
            await txns.close()
            log.info("transaction coordinator moved away (container %d)", self.container)
        if current is not None:
            self.ctx.group_coordinator = None
            await current.close()
            log.info("group coordinator moved away (container %d)", self.container)
