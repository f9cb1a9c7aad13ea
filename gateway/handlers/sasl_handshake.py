"""SaslHandshake (key 17): tidegate has no authentication yet, so every mechanism is
UNSUPPORTED_SASL_MECHANISM with an empty list of enabled mechanisms."""

from __future__ import annotations

from typing import Any

from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(SaslHandshakeRequest, SaslHandshakeResponse, 0, 1)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    return SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=[])
