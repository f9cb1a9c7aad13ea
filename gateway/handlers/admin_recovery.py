"""Admin operations a crash interrupted, finished at start (before the listener opens).

DeleteTopics and CreatePartitions store their intent in the topic's record before their
first step (``TopicInfo.deleting``, ``TopicInfo.splitting_from``); every step after it
is repeatable. So whatever point a ``kill -9`` hit, the next start leaves each topic as
it was before the operation (nothing stored yet) or as it is after it.
"""

from __future__ import annotations

import logging

from tidegate.gateway.handlers import HandlerContext
from tidegate.gateway.handlers.create_partitions import finish_split
from tidegate.gateway.handlers.delete_topics import delete_topic

log = logging.getLogger(__name__)


async def finish_admin_operations(ctx: HandlerContext) -> int:
    """Finish every interrupted deletion and partition split; how many there were."""
    unfinished = ctx.topics.unfinished()
    for info in unfinished:
        if info.deleting:
            log.info("finishing the deletion of topic %s", info.name)
            await delete_topic(ctx, info)
        else:
            log.info("finishing the split of topic %s for partitions %d-%d", info.name,
                     info.splitting_from, info.partitions - 1)
            await finish_split(ctx, info)
    return len(unfinished)
