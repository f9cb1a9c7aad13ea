"""ApiVersions (key 18): built from the handler registry, so it advertises exactly the
APIs and versions that have handlers; v3+ also carry the features (KIP-584):
``transaction.version`` finalized at the configured level (2 by default: KIP-890's
transaction version 2, which kafka-clients 4.x then uses).

Quirk: a request in a version we do not know is answered in v0 with
UNSUPPORTED_VERSION and our ApiVersions range, so the client can retry lower."""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(ApiVersionsRequest, ApiVersionsResponse, 0, 4)
TRANSACTION_VERSION = "transaction.version"
#: The transaction versions this gateway can serve (Kafka's supported range).
TRANSACTION_VERSION_MAX = 2
#: The features never change while a node runs: one epoch for the finalized ones.
FEATURES_EPOCH = 1


def response(ctx: HandlerContext, error: ErrorCode = ErrorCode.NONE, version: int = 0) -> Any:
    keys = [
        ApiVersionsResponse.ApiVersion(
            api_key=api.spec.api_key,
            min_version=api.spec.min_version,
            max_version=api.spec.max_version,
        )
        for api in ctx.registry.apis()
    ]
    answer = ApiVersionsResponse(error_code=error, api_keys=keys, throttle_time_ms=0)
    if version >= 3 and error == ErrorCode.NONE:
        # Kafka leaves out features whose lowest level is 0 before v4 (KAFKA-17492): older
        # clients fail to read them.
        if version >= 4:
            answer.supported_features = [ApiVersionsResponse.SupportedFeatureKey(
                name=TRANSACTION_VERSION, min_version=0, max_version=TRANSACTION_VERSION_MAX)]
        level = ctx.config.transaction_version
        answer.finalized_features_epoch = FEATURES_EPOCH
        # A level of 0 is not listed, as Kafka lists finalized features.
        answer.finalized_features = [] if level == 0 else [ApiVersionsResponse.FinalizedFeatureKey(
            name=TRANSACTION_VERSION, min_version_level=level, max_version_level=level)]
    return answer


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    return response(ctx, version=req.api_version)
