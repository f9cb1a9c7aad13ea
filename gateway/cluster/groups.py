"""Group coordination in cluster mode.

A group coordinator keeps its groups' live state (members, generations) in memory, so
one node must coordinate every group: the owner of the container holding the groups'
table segment (``GroupConfig.table``). FindCoordinator answers that node. When the
container moves here, a coordinator is loaded from the table, as at start-up; when it
moves away, this node's coordinator is closed and group requests sent here close the
connection, after which clients look their coordinator up again.
"""

from __future__ import annotations

import logging
from typing import Any

from tidegate.core.segmentstore.service import container_of
from tidegate.gateway.groups import GroupConfig, GroupCoordinator

log = logging.getLogger(__name__)


class GroupPlacement:
    def __init__(self, ctx: Any, store: Any, container_count: int) -> None:
        self.ctx = ctx
        self.store = store
        self.config = GroupConfig.from_table(ctx.config.groups)
        self.container = container_of(self.config.table, container_count)

    async def follow(self, running: set[int]) -> None:
        """Hold a loaded coordinator exactly while this node runs the groups' container."""
        current = self.ctx.group_coordinator
        if self.container in running:
            if current is None:
                coordinator = GroupCoordinator(self.store, self.config)
                await coordinator.start()
                self.ctx.group_coordinator = coordinator
                log.info("group coordinator moved here (container %d)", self.container)
        elif current is not None:
            self.ctx.group_coordinator = None
            await current.close()
            log.info("group coordinator moved away (container %d)", self.container)
