"""DescribeUserScramCredentials (key 50), v0 (KIP-554): each user's SCRAM mechanisms
and iterations (never a salt or key); all users when the list is null or empty; a named user
without credentials gets RESOURCE_NOT_FOUND, one named twice DUPLICATE_RESOURCE."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kafka.protocol.admin import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.security.credentials import MECHANISMS
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, 0, 0)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    R = DescribeUserScramCredentialsResponse
    Result = R.DescribeUserScramCredentialsResult
    security = ctx.security
    if security is None:
        return R(throttle_time_ms=0, error_code=ErrorCode.SECURITY_DISABLED,
                 error_message="SASL is not configured", results=[])
    known = await security.credentials.users()
    # Null or empty: every user (Kafka's rule; the Java AdminClient sends an empty list).
    wanted = [u.name for u in request.users] if request.users else sorted(known)
    counts = Counter(wanted)
    results = []
    for user in dict.fromkeys(wanted):
        if counts[user] > 1:
            results.append(Result(user=user, error_code=ErrorCode.DUPLICATE_RESOURCE,
                                  error_message=f"user {user!r} named twice", credential_infos=[]))
        elif user not in known:
            results.append(Result(user=user, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                                  error_message=f"attempt to describe a user credential that "
                                  f"does not exist: {user}", credential_infos=[]))
        else:
            results.append(Result(user=user, error_code=ErrorCode.NONE, error_message=None,
                                  credential_infos=[
                Result.CredentialInfo(mechanism=MECHANISMS[m], iterations=i)
                for m, i in sorted(known[user]) if m in MECHANISMS
            ]))
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, results=results)
