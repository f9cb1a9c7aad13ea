"""Update a stream's configuration: ``ACTIVE -> UPDATING``, rewrite the scope's tag index
for added and removed tags, store the config, ``-> ACTIVE``."""

from __future__ import annotations

from tidegate.core.controller.api import StreamConfig, StreamState
from tidegate.core.controller.metadata import StreamMeta
from tidegate.core.controller.records import Json, config_to_json
from tidegate.core.controller.workflows.base import Context, begin, finish


async def start(ctx: Context, meta: StreamMeta, config: StreamConfig) -> None:
    old = await meta.config()
    record = {"type": "update", "config": config_to_json(config), "old_tags": list(old.tags)}
    await begin(meta, StreamState.UPDATING, record)
    await steps(ctx, meta, record)


async def steps(ctx: Context, meta: StreamMeta, record: Json) -> None:
    scope_table = ctx.md.scope_table(meta.scope)
    old, new = set(record["old_tags"]), set(record["config"]["tags"])
    if new - old:
        await ctx.md.put(scope_table, {f"tag/{t}/{meta.stream}": None for t in new - old})
    await ctx.md.remove(scope_table, [f"tag/{t}/{meta.stream}" for t in sorted(old - new)])
    await finish(meta, StreamState.ACTIVE, {"config": record["config"]})
