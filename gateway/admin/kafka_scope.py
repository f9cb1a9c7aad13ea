"""The admin APIs (REST, gRPC) over the controller, with the Kafka scope's streams
guarded: each is a Kafka topic the gateway serves, and sealing, deleting or truncating
it behind the gateway's back left the topic listed with every produce timing out and
fetches hanging; updating its policies there left the topic's configs (DescribeConfigs)
saying otherwise. Those calls answer a conflict (REST 409, gRPC FAILED_PRECONDITION)
that names the Kafka way to do it; everything else passes through unchanged.
"""

from __future__ import annotations

from typing import Any

from tidegate.core.controller.api import (
    ConflictError,
    Controller,
    StreamConfig,
    StreamCut,
    StreamInfo,
)


class KafkaScopeGuard:
    """A ``Controller`` that refuses, in ``scope``, what only Kafka's APIs may do."""

    def __init__(self, controller: Controller, scope: str) -> None:
        self._controller = controller
        self._scope = scope

    def __getattr__(self, name: str) -> Any:
        return getattr(self._controller, name)

    def _refuse(self, stream: str, what: str, kafka_way: str) -> ConflictError:
        return ConflictError(
            f"stream {self._scope}/{stream} is the Kafka topic {stream!r}: it cannot be "
            f"{what} here; {kafka_way}"
        )

    async def seal_stream(self, scope: str, stream: str) -> None:
        if scope == self._scope:
            raise self._refuse(stream, "sealed", "delete the topic with Kafka's DeleteTopics "
                               f"(kafka-topics.sh --delete --topic {stream}) instead")
        await self._controller.seal_stream(scope, stream)

    async def delete_stream(self, scope: str, stream: str) -> None:
        if scope == self._scope:
            raise self._refuse(stream, "deleted", "use Kafka's DeleteTopics "
                               f"(kafka-topics.sh --delete --topic {stream})")
        await self._controller.delete_stream(scope, stream)

    async def update_stream(self, scope: str, stream: str, config: StreamConfig) -> StreamInfo:
        if scope == self._scope:
            raise self._refuse(
                stream, "updated", "change the topic's configs with Kafka's AlterConfigs "
                f"(kafka-configs.sh --alter --entity-type topics --entity-name {stream} "
                "--add-config retention.ms=...,tidegate.scaling.min.segments=...)",
            )
        return await self._controller.update_stream(scope, stream, config)

    async def truncate(self, scope: str, stream: str, cut: StreamCut) -> None:
        if scope == self._scope:
            raise self._refuse(stream, "truncated", "use Kafka's DeleteRecords "
                               "(kafka-delete-records.sh)")
        await self._controller.truncate(scope, stream, cut)

    async def delete_scope(self, scope: str) -> None:
        if scope == self._scope:
            raise ConflictError(
                f"scope {scope} holds the Kafka topics the gateway serves: it cannot be "
                "deleted; delete topics with Kafka's DeleteTopics"
            )
        await self._controller.delete_scope(scope)
