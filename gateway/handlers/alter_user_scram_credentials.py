"""AlterUserScramCredentials (key 51), v0 (KIP-554): upsert (the client sends the salt,
iterations and salted password; ``StoredKey``/``ServerKey`` are derived and kept) and
delete SCRAM credentials. Kafka's checks: an unknown mechanism UNSUPPORTED_SASL_MECHANISM,
iterations outside 4096..16384 or an empty salt or user UNACCEPTABLE_CREDENTIAL, a user
named twice DUPLICATE_RESOURCE, deleting what does not exist RESOURCE_NOT_FOUND. A user
name, salt or salted password over ``credentials``' bounds is UNACCEPTABLE_CREDENTIAL
(tidegate's own: a credential is one table entry)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kafka.protocol.admin import AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.security.credentials import (
    ITERATIONS_MAX,
    ITERATIONS_MIN,
    MECHANISMS,
    SALT_BYTES_MAX,
    USER_BYTES_MAX,
    credential_from_salted,
)
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, 0, 0)

_BY_CODE = {code: name for name, code in MECHANISMS.items()}


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
    security = ctx.security
    names = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    if security is None:
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
            Result(user=n, error_code=ErrorCode.SECURITY_DISABLED,
                   error_message="SASL is not configured") for n in dict.fromkeys(names)
        ])
    errors: dict[str, tuple[ErrorCode, str]] = {}
    pairs = Counter((x.name, x.mechanism) for x in [*request.deletions, *request.upsertions])
    for x in [*request.deletions, *request.upsertions]:
        if not x.name:
            errors.setdefault(x.name, (ErrorCode.UNACCEPTABLE_CREDENTIAL, "empty user name"))
        elif len(x.name.encode()) > USER_BYTES_MAX:
            errors.setdefault(x.name, (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                                       f"user name over {USER_BYTES_MAX} bytes"))
        elif x.mechanism not in _BY_CODE:
            errors.setdefault(x.name, (ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                       f"unknown SCRAM mechanism {x.mechanism}"))
        elif pairs[(x.name, x.mechanism)] > 1:
            errors.setdefault(x.name, (ErrorCode.DUPLICATE_RESOURCE,
                                       "a user and mechanism altered twice"))
    for u in request.upsertions:
        if not ITERATIONS_MIN <= u.iterations <= ITERATIONS_MAX:
            errors.setdefault(u.name, (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                                       f"iterations must be {ITERATIONS_MIN}..{ITERATIONS_MAX}"))
        elif not u.salt or not u.salted_password:
            errors.setdefault(u.name, (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                                       "salt and salted password must not be empty"))
        elif len(u.salt) > SALT_BYTES_MAX or len(u.salted_password) > SALT_BYTES_MAX:
            errors.setdefault(u.name, (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                                       f"salt and salted password are at most {SALT_BYTES_MAX} bytes"))
    for d in request.deletions:
        if d.name not in errors and d.mechanism in _BY_CODE:
            if await security.credentials.get(d.name, _BY_CODE[d.mechanism]) is None:
                errors[d.name] = (ErrorCode.RESOURCE_NOT_FOUND,
                                  f"no {_BY_CODE[d.mechanism]} credential for {d.name}")
    for d in request.deletions:
        if d.name not in errors:
            await security.credentials.delete(d.name, _BY_CODE[d.mechanism])
    for u in request.upsertions:
        if u.name not in errors:
            mechanism = _BY_CODE[u.mechanism]
            await security.credentials.put(u.name, credential_from_salted(
                mechanism, bytes(u.salt), u.iterations, bytes(u.salted_password)))
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
        Result(user=n, error_code=errors.get(n, (ErrorCode.NONE, None))[0],
               error_message=errors.get(n, (ErrorCode.NONE, None))[1])
        for n in dict.fromkeys(names)
    ])
