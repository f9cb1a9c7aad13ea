"""SaslHandshake (key 17), v1: picks the mechanism of the SaslAuthenticate exchange that
follows (KIP-152). v0, whose tokens follow as bare frames without Kafka headers, is not
served: every client since Kafka 1.0 sends v1.

On a listener without SASL, or for a mechanism not in ``sasl.enabled.mechanisms``, the
answer is UNSUPPORTED_SASL_MECHANISM with the enabled list (empty without SASL). Sent
again on an authenticated connection it starts a re-authentication (KIP-368)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.security.sasl import exchange
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(SaslHandshakeRequest, SaslHandshakeResponse, 1, 1)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    session, security = req.session, ctx.security
    if session is None or security is None or not session.listener.sasl:
        return SaslHandshakeResponse(
            error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=[]
        )
    if request.mechanism not in security.mechanisms:
        return SaslHandshakeResponse(
            error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=security.mechanisms
        )
    session.exchange = exchange(request.mechanism, security.credentials)
    return SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=security.mechanisms)
