"""The controller's admin REST service (FastAPI); OpenAPI at ``/openapi.json``.

Each route is a thin adapter: request body -> one or two ``Controller`` calls -> response
body. Status codes come from ``errors`` only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from tidegate.core.controller.api import (
    Controller,
    KeyRange,
    ScopeNotFoundError,
    StreamNotFoundError,
)
from tidegate.gateway.admin.metrics import CONTENT_TYPE, Metrics
from tidegate.gateway.admin.rest import errors
from tidegate.gateway.admin.rest.auth import Auth, RestAuthentication
from tidegate.gateway.admin.rest.errors import BadRequest, NotReady
from tidegate.gateway.admin.rest.models import (
    INT64_MAX,
    NAME_PATTERN,
    CreateStreamRequest,
    Health,
    ScaleMetadata,
    ScaleRequest,
    ScalingEventList,
    ScopeProperty,
    ScopesList,
    Segment,
    SegmentsList,
    StreamCutBody,
    StreamProperty,
    StreamsList,
    StreamStateBody,
    Successor,
    SuccessorsList,
    TruncateRequest,
    UpdateStreamRequest,
)
from tidegate.gateway.admin.rest.models import (
    Message as MessageBody,
)
from tidegate.gateway.admin.rest.ui import KafkaOverview, install_ui


@dataclass(frozen=True, slots=True)
class RestLimits:
    #: Largest segment count a request may ask for (``minSegments``, ``newKeyRanges``).
    segments_max: int = 1024
    #: Largest request body accepted; larger ones get 413.
    request_bytes_max: int = 1 << 20


ScopeName = Annotated[str, Path(min_length=1, max_length=255, pattern=NAME_PATTERN)]
StreamName = Annotated[str, Path(min_length=1, max_length=255, pattern=NAME_PATTERN)]
SegmentIdParam = Annotated[int, Path(ge=0, le=INT64_MAX)]


def _responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": MessageBody} for code in (400, 503, *codes)}


def create_app(
    controller: Controller,
    *,
    ready: Callable[[], bool] = lambda: True,
    limits: RestLimits = RestLimits(),
    metrics: Metrics | None = None,
    kafka_overview: KafkaOverview | None = None,
    auth: Auth | None = None,
    waiting_for: Callable[[], str] | None = None,
) -> FastAPI:
    """The admin REST app over ``controller``. ``ready()`` is false until the controller
    has started: ``/health`` answers 503 and every ``/v1`` call 503 until then, the
    health saying what the node waits for (``waiting_for()``). With
    ``metrics``, ``/metrics`` serves them in Prometheus' text format."""
    app = FastAPI(
        title="tidegate controller admin API",
        version="1",
        description="Scopes, streams, segments and stream workflows of the tidegate controller.",
    )
    errors.install(app)
    app.add_middleware(_BodyLimit, bytes_max=limits.request_bytes_max)
    if auth is not None:  # outermost: nothing runs for an unauthenticated call
        app.add_middleware(RestAuthentication, auth=auth)

    @app.get(
        "/health",
        response_model=Health,
        response_model_exclude_none=True,
        responses={503: {"model": Health}},
        tags=["health"],
    )
    async def health() -> Any:
        if ready():
            return Health(status="ready")
        body = Health(status="starting", waiting_for=waiting_for() if waiting_for else None)
        return JSONResponse(body.model_dump(exclude_none=True), status_code=503)

    if metrics is not None:

        @app.get("/metrics", response_class=PlainTextResponse, tags=["health"])
        async def metrics_text() -> Response:
            """The node's Prometheus metrics (``gateway/admin/metrics.py`` names them)."""
            await metrics.refresh()
            return Response(metrics.render(), media_type=CONTENT_TYPE)

    install_ui(app, controller, ready, kafka_overview)

    async def _require_ready() -> None:
        if not ready():
            raise NotReady()

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(_require_ready)])

    def _check_segment_count(n: int, what: str) -> None:
        if n > limits.segments_max:
            raise BadRequest(f"{what} is {n}, above the limit of {limits.segments_max} segments")

    # -- scopes --------------------------------------------------------------------------

    @v1.get("/scopes", response_model=ScopesList, responses=_responses(), tags=["scopes"])
    async def list_scopes() -> ScopesList:
        names = await controller.list_scopes()
        return ScopesList(scopes=[ScopeProperty(scopeName=n) for n in sorted(names)])

    @v1.post(
        "/scopes",
        status_code=201,
        response_model=ScopeProperty,
        responses=_responses(409),
        tags=["scopes"],
    )
    async def create_scope(body: ScopeProperty) -> ScopeProperty:
        await controller.create_scope(body.scopeName)
        return body

    @v1.get(
        "/scopes/{scope}", response_model=ScopeProperty, responses=_responses(404), tags=["scopes"]
    )
    async def get_scope(scope: ScopeName) -> ScopeProperty:
        # The Controller API has no single-scope lookup; scopes are few.
        if scope not in await controller.list_scopes():
            raise ScopeNotFoundError(f"scope {scope} not found")
        return ScopeProperty(scopeName=scope)

    @v1.delete(
        "/scopes/{scope}", status_code=204, responses=_responses(404, 409), tags=["scopes"]
    )
    async def delete_scope(scope: ScopeName) -> Response:
        await controller.delete_scope(scope)
        return Response(status_code=204)

    # -- streams -------------------------------------------------------------------------

    @v1.get(
        "/scopes/{scope}/streams",
        response_model=StreamsList,
        responses=_responses(404),
        tags=["streams"],
    )
    async def list_streams(
        scope: ScopeName,
        tag: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
    ) -> StreamsList:
        props = []
        for name in sorted(await controller.list_streams(scope, tag)):
            try:
                props.append(StreamProperty.of(await controller.get_stream(scope, name)))
            except StreamNotFoundError:
                continue  # deleted since it was listed
        return StreamsList(streams=props)

    @v1.post(
        "/scopes/{scope}/streams",
        status_code=201,
        response_model=StreamProperty,
        responses=_responses(404, 409),
        tags=["streams"],
    )
    async def create_stream(scope: ScopeName, body: CreateStreamRequest) -> StreamProperty:
        config = body.to_model()
        _check_segment_count(config.scaling.min_segments, "minSegments")
        info = await controller.create_stream(scope, body.streamName, config)
        return StreamProperty.of(info)

    @v1.get(
        "/scopes/{scope}/streams/{stream}",
        response_model=StreamProperty,
        responses=_responses(404),
        tags=["streams"],
    )
    async def get_stream(scope: ScopeName, stream: StreamName) -> StreamProperty:
        return StreamProperty.of(await controller.get_stream(scope, stream))

    @v1.put(
        "/scopes/{scope}/streams/{stream}",
        response_model=StreamProperty,
        responses=_responses(404, 409),
        tags=["streams"],
    )
    async def update_stream(
        scope: ScopeName, stream: StreamName, body: UpdateStreamRequest
    ) -> StreamProperty:
        current = await controller.get_stream(scope, stream)
        config = body.apply_to(current.config)
        _check_segment_count(config.scaling.min_segments, "minSegments")
        return StreamProperty.of(await controller.update_stream(scope, stream, config))

    @v1.delete(
        "/scopes/{scope}/streams/{stream}",
        status_code=204,
        responses=_responses(404, 409),
        tags=["streams"],
    )
    async def delete_stream(scope: ScopeName, stream: StreamName) -> Response:
        await controller.delete_stream(scope, stream)
        return Response(status_code=204)

    @v1.put(
        "/scopes/{scope}/streams/{stream}/state",
        response_model=StreamStateBody,
        responses=_responses(404, 409),
        tags=["streams"],
    )
    async def update_stream_state(
        scope: ScopeName, stream: StreamName, body: StreamStateBody
    ) -> StreamStateBody:
        await controller.seal_stream(scope, stream)
        return StreamStateBody(streamState="SEALED")

    # -- segments and epochs -------------------------------------------------------------

    @v1.get(
        "/scopes/{scope}/streams/{stream}/segments",
        response_model=SegmentsList,
        responses=_responses(404),
        tags=["segments"],
    )
    async def current_segments(scope: ScopeName, stream: StreamName) -> SegmentsList:
        segments = await controller.get_current_segments(scope, stream)
        return SegmentsList(segments=[Segment.of(s) for s in segments])

    @v1.get(
        "/scopes/{scope}/streams/{stream}/segments/{segment_id}/successors",
        response_model=SuccessorsList,
        responses=_responses(404),
        tags=["segments"],
    )
    async def successors(
        scope: ScopeName, stream: StreamName, segment_id: SegmentIdParam
    ) -> SuccessorsList:
        found = await controller.get_successors(scope, stream, segment_id)
        entries = [
            Successor(segment=Segment.of(seg), predecessors=sorted(preds))
            for seg, preds in sorted(found.items(), key=lambda kv: kv[0].key_start)
        ]
        return SuccessorsList(successors=entries)

    @v1.get(
        "/scopes/{scope}/streams/{stream}/scaling-events",
        response_model=ScalingEventList,
        responses=_responses(404),
        tags=["segments"],
    )
    async def scaling_events(
        scope: ScopeName,
        stream: StreamName,
        from_ms: Annotated[int | None, Query(alias="from", ge=0, le=INT64_MAX)] = None,
        to_ms: Annotated[int | None, Query(alias="to", ge=0, le=INT64_MAX)] = None,
    ) -> ScalingEventList:
        """Epochs oldest first; with ``from``/``to`` (ms), those in effect at some time in
        ``[from, to]``: the one current at ``from`` and every later one begun by ``to``."""
        epochs = await controller.get_epochs(scope, stream)
        chosen = []
        for i, e in enumerate(epochs):
            ends = epochs[i + 1].creation_time_ms if i + 1 < len(epochs) else None
            if to_ms is not None and e.creation_time_ms > to_ms:
                continue
            if from_ms is not None and ends is not None and ends <= from_ms:
                continue
            chosen.append(ScaleMetadata.of(e))
        return ScalingEventList(scalingEvents=chosen)

    # -- workflows -----------------------------------------------------------------------

    @v1.post(
        "/scopes/{scope}/streams/{stream}/scale",
        response_model=ScaleMetadata,
        responses=_responses(404, 409),
        tags=["workflows"],
    )
    async def scale(scope: ScopeName, stream: StreamName, body: ScaleRequest) -> ScaleMetadata:
        _check_segment_count(len(body.newKeyRanges), "the number of newKeyRanges")
        ranges = [KeyRange(start, end) for start, end in body.newKeyRanges]
        epoch = await controller.scale(scope, stream, body.sealedSegments, ranges)
        return ScaleMetadata.of(epoch)

    @v1.post(
        "/scopes/{scope}/streams/{stream}/truncate",
        response_model=StreamCutBody,
        responses=_responses(404, 409),
        tags=["workflows"],
    )
    async def truncate(
        scope: ScopeName, stream: StreamName, body: TruncateRequest
    ) -> StreamCutBody:
        """Truncates at the StreamCut; answers the stream's new head StreamCut."""
        await controller.truncate(scope, stream, body.streamCut)
        head = await controller.get_head_segments(scope, stream)
        return StreamCutBody(streamCut={str(k): v for k, v in sorted(head.items())})

    app.include_router(v1)
    _document_limits(app, limits)
    return app


def _document_limits(app: FastAPI, limits: RestLimits) -> None:
    """Put the configured bounds into ``/openapi.json`` so that the schema promises no
    more than the service accepts."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = generate()
            schemas = spec["components"]["schemas"]
            schemas["ScalingConfig"]["properties"]["minSegments"]["maximum"] = limits.segments_max
            schemas["ScaleRequest"]["properties"]["newKeyRanges"]["maxItems"] = limits.segments_max
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented override


class _BodyLimit:
    """Answers 413 to a request body above ``bytes_max``, declared or streamed."""

    def __init__(self, app: ASGIApp, bytes_max: int) -> None:
        self.app = app
        self.bytes_max = bytes_max

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.bytes_max:
            await _send_413(send, self.bytes_max)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.bytes_max:
                    raise StarletteHTTPException(413, _too_large(self.bytes_max))
            return message

        await self.app(scope, limited, send)


def _too_large(bytes_max: int) -> str:
    return f"request body above {bytes_max} bytes"


async def _send_413(send: Send, bytes_max: int) -> None:
    body = json.dumps({"message": _too_large(bytes_max)}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})

