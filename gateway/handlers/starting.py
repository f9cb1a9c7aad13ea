"""What a node answers before it serves everything (``gateway/waiting.py``): its listener
is open from the start, ApiVersions is answered as always, Metadata names every live node
it knows (this one alone until it has joined the cluster) and answers each asked topic
LEADER_NOT_AVAILABLE, a SASL login is not answered (the connection closes: the client
connects again), and every other request is refused whole with a retriable error saying
what the node waits for (a client retries it).

Metadata names the other live nodes because librdkafka drops the brokers a Metadata
answer leaves out and fails the produce requests in flight to them as never written
("Broker handle destroyed", not persisted), though they may have been: an idempotent
producer then resets its sequences at its next epoch bump and sends them again as new
records, stored twice (issue 36)."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any

from kafka.protocol.metadata import MetadataResponse
from tidegate.gateway.handlers import HandlerContext, Registry, RequestContext
from tidegate.gateway.security.api_acls import refusal
from tidegate.protocol.apis import API_VERSIONS_KEY, ApiSpec
from tidegate.protocol.errors import ErrorCode

METADATA_KEY = 3
PRODUCE_KEY = 0
#: SaslHandshake and SaslAuthenticate: a client takes any error there as a failed login
#: (not retried), so the connection is closed unanswered and the client connects again.
_SASL_KEYS = {17, 36}
#: Requests on partitions: the client looks for the partition's leader again.
_PARTITION_APIS = {0, 1, 2, 23}
#: Requests to a group or transaction coordinator: the client looks for it again.
_COORDINATOR_APIS = {8, 9, 10, 11, 12, 13, 14, 15, 16, 22, 24, 25, 26, 28, 42, 47, 65, 66, 68, 69}

_Topic = MetadataResponse.MetadataResponseTopic


def retriable_error(api_key: int) -> ErrorCode:
    if api_key in _PARTITION_APIS:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if api_key in _COORDINATOR_APIS:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return ErrorCode.REQUEST_TIMED_OUT


#: ``(node id, host, port)`` of the live nodes on a listener (None: the first one's).
Brokers = Callable[[str | None], list[tuple[int, str, int]]]


def starting_registry(serving: Registry, waiting_for: Callable[[], str],
                      brokers: Brokers | None = None) -> Registry:
    """The APIs of ``serving`` (so ApiVersions advertises the same versions), answered
    as a node that is not ready yet answers them; ``brokers`` (cluster mode) lists the
    live nodes its Metadata names."""
    registry = Registry()
    for api in serving.apis():
        key = api.spec.api_key
        if key == API_VERSIONS_KEY:
            registry.register(api.spec, api.handle)
        elif key == METADATA_KEY:
            registry.register(api.spec, functools.partial(_metadata, brokers))
        elif key in _SASL_KEYS:
            registry.register(api.spec, _close)
        else:
            registry.register(api.spec, _refuse(api.spec, waiting_for))
    return registry


def _refuse(spec: ApiSpec, waiting_for: Callable[[], str]) -> Any:
    error = retriable_error(spec.api_key)

    async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
        message = f"node {ctx.config.node_id} is starting: waiting for {waiting_for()}"
        if spec.api_key == PRODUCE_KEY and req.session is not None:
            # The next batch's sequence gap is this refusal's (``gateway/handlers/produce.py``).
            for topic in request.topic_data:
                for part in topic.partition_data:
                    req.session.refused_here(topic.name, part.index)
        return refusal(spec, request, req.api_version, error, message)

    return handle


async def _close(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    if req.session is not None:
        req.session.closing = True  # no answer; closed as after a failed login
    return None


async def _metadata(brokers: Brokers | None, ctx: HandlerContext, req: RequestContext,
                    request: Any) -> Any:
    version = req.api_version
    topics = []
    for t in request.topics or ():
        name = t.name if t.name is not None or version < 10 else (None if version >= 12 else "")
        topic_id = t.topic_id if version >= 10 else uuid.UUID(int=0)
        topics.append(_Topic(
            error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name, topic_id=topic_id,
            is_internal=False, partitions=[],
        ))
    host, port = req.session.advertised if req.session else ctx.config.advertised_address
    listed = {ctx.config.node_id: (host, port)}
    if brokers is not None:
        listener = req.session.listener.name if req.session else None
        listed.update((n, (h, p)) for n, h, p in brokers(listener) if n != ctx.config.node_id)
    return MetadataResponse(
        throttle_time_ms=0, cluster_id=ctx.config.cluster_id, controller_id=-1, topics=topics,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=n, host=h, port=p, rack=None)
                 for n, (h, p) in sorted(listed.items())],
    )
