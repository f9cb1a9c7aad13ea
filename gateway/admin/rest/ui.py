"""``/ui``: one page over the admin REST API showing the node's health, the Kafka topics,
consumer groups with their lag, and every stream's segments over time (key ranges
against time, the picture of scaling Pravega's documentation draws).

The page (``ui.html``, no external assets) polls ``/ui/overview.json``, built here from
the controller (scopes, streams, epochs) and the gateway's Kafka view
(``KafkaExporterMetrics.overview``, refreshed first).
"""

from __future__ import annotations

import bisect
import re
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse
from tidegate.core.controller.api import Controller, EpochRecord, StreamNotFoundError

#: Streams drawn per scope, and epochs per stream (the newest): the page stays small.
STREAMS_PER_SCOPE_MAX = 100
EPOCHS_PER_STREAM_MAX = 200
#: Topics of more partitions have their bands unlabelled (the answer stays small).
PARTITIONS_LABELLED_MAX = 256

KafkaOverview = Callable[[], Awaitable[dict[str, Any]]]


def install_ui(
    app: FastAPI, controller: Controller, ready: Callable[[], bool], kafka: KafkaOverview | None
) -> None:
    page = resources.files(__package__).joinpath("ui.html").read_text(encoding="utf-8")

    @app.get("/ui", response_class=HTMLResponse, include_in_schema=False)
    async def ui_page() -> HTMLResponse:
        return HTMLResponse(page)

    @app.get("/ui/overview.json", include_in_schema=False)
    async def ui_overview() -> JSONResponse:
        """What the ``/ui`` page shows, as JSON."""
        now_ms = int(time.time() * 1000)
        body: dict[str, Any] = {"time_ms": now_ms, "status": "ready" if ready() else "starting"}
        if not ready():
            return JSONResponse(body, status_code=503)
        partitions: dict[tuple[str, str], int] = {}
        if kafka is not None:
            overview = await kafka()
            overview["groups"] = sorted(overview.get("groups", []), key=lambda g: natural(g["group"]))
            body["kafka"] = overview
            scope = str(overview.get("scope", ""))
            partitions = {(scope, t["name"]): t["partition_count"] for t in overview["topics"]}
        body["scopes"] = [
            {"scope": scope, "streams": await _streams(controller, scope, partitions)}
            for scope in sorted(await controller.list_scopes())
        ]
        return JSONResponse(body)


def natural(name: str) -> list[Any]:
    """Sort key ordering ``sink.2`` before ``sink.10`` (digit runs compared as numbers)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.split(r"(\d+)", name) if part]


async def _streams(
    controller: Controller, scope: str, partitions: dict[tuple[str, str], int]
) -> list[dict[str, Any]]:
    out = []
    for name in sorted(await controller.list_streams(scope))[:STREAMS_PER_SCOPE_MAX]:
        try:
            info = await controller.get_stream(scope, name)
            epochs = await controller.get_epochs(scope, name)
        except StreamNotFoundError:
            continue  # deleted since it was listed
        out.append({
            "stream": name,
            "state": info.state.value,
            "epochs": [_epoch(e, partitions.get((scope, name), 0))
                       for e in epochs[-EPOCHS_PER_STREAM_MAX:]],
        })
    return out


def _epoch(e: EpochRecord, partition_count: int) -> dict[str, Any]:
    """An epoch's segments; a Kafka topic's with the partitions whose points each holds
    (the topic's partitions now: a point never moves, so earlier epochs held the same)."""
    # Imported here: the Kafka log modules load the group coordinator and kafka.protocol,
    # which the REST app (also served without a gateway) does not otherwise need.
    from tidegate.gateway.log.topics import partition_point

    labelled = 0 < partition_count <= PARTITIONS_LABELLED_MAX
    points = sorted((partition_point(p), p) for p in range(partition_count if labelled else 0))
    keys = [x for x, _ in points]
    segments = []
    for s in e.segments:
        segment: dict[str, Any] = {"number": s.number, "key_start": s.key_start,
                                   "key_end": s.key_end}
        if labelled:
            held = points[bisect.bisect_left(keys, s.key_start):bisect.bisect_left(keys, s.key_end)]
            segment["partitions"] = sorted(p for _, p in held)
        segments.append(segment)
    return {"epoch": e.epoch, "time_ms": e.creation_time_ms, "segments": segments}
