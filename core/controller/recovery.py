"""Finishing what a crash interrupted. Run by ``StreamController.start()`` before it
serves: every stream whose create or delete is recorded in its scope's index, and every
stream with a recorded workflow, has that workflow's remaining (idempotent) steps run
again from the recorded input; then transactions marked for commit are committed.

A stream whose workflow fails again (say its segments' container is unavailable) is
logged and left recorded; the controller still starts, and the next workflow call on
that stream retries it first (``StreamController.workflow_lock``)."""

from __future__ import annotations

import logging

from tidegate.core.controller.metadata import StreamMeta
from tidegate.core.controller.records import Json
from tidegate.core.controller.workflows import commit, create, delete, scale, seal, truncate, update
from tidegate.core.controller.workflows.base import Context

log = logging.getLogger(__name__)


async def resume_all(ctx: Context) -> None:
    md = ctx.md
    for scope, _ in await md.entries(md.scopes_table):
        table = md.scope_table(scope)
        await md.ensure_table(table)
        for key, v in await md.entries(table, "stream/"):
            stream = key[len("stream/") :]
            try:
                await resume_stream(ctx, scope, stream, v.value)
            except Exception:
                log.exception("resuming %s/%s failed; retried on its next workflow", scope, stream)


async def resume_stream(ctx: Context, scope: str, stream: str, entry: Json) -> None:
    """Finish the recorded workflow of one stream; ``entry`` is the stream's value in its
    scope's index (read here when ``None``)."""
    if entry is None:
        v = await ctx.md.get(ctx.md.scope_table(scope), f"stream/{stream}")
        entry = None if v is None else v.value
    if entry is not None and "create" in entry:
        log.info("resuming create of %s/%s", scope, stream)
        await create.steps(ctx, scope, stream, entry["create"])
        return
    if entry is not None and "delete" in entry:
        log.info("resuming delete of %s/%s", scope, stream)
        await delete.steps(ctx, scope, stream)
        return
    meta = StreamMeta(ctx.md, scope, stream)
    record = (await meta.workflow()).value
    if record is not None:
        kind = record["type"]
        log.info("resuming %s of %s/%s", kind, scope, stream)
        if kind == "update":
            await update.steps(ctx, meta, record)
        elif kind == "scale":
            await scale.steps(ctx, meta, record)
        elif kind == "truncate":
            await truncate.steps(ctx, meta, record)
        elif kind == "seal":
            await seal.steps(ctx, meta)
        elif kind == "delete":
            await delete.steps(ctx, scope, stream)
            return
        elif kind == "commit":
            await commit.steps(ctx, meta, record)
        else:
            raise ValueError(f"{scope}/{stream}: unknown workflow {kind!r}")
    await commit.commit_marked(ctx, meta)
