"""Authentication and ACLs for the admin REST and gRPC APIs (``admin.authentication``).

Callers present HTTP Basic credentials (``Authorization: Basic base64(user:password)``,
as an HTTP header or gRPC metadata), checked against the same SCRAM credentials Kafka
clients log in with; anonymous calls are refused. With the authorizer on, the ACLs
decide: a stream's calls are on the TOPIC resource ``<scope>/<stream>`` (its topic name
in the Kafka scope), scope-level calls on the CLUSTER; reads need DESCRIBE, creation
CREATE, deletion DELETE, other writes ALTER.
"""

from __future__ import annotations

import base64
import binascii
from typing import Protocol

from tidegate.gateway.security.acls import CLUSTER_NAME, Operation, ResourceType
from tidegate.gateway.security.credentials import MECHANISMS, ScramCredential, password_matches


class Credentials(Protocol):
    async def get(self, user: str, mechanism: str) -> ScramCredential | None: ...


class Decider(Protocol):
    super_users: frozenset[str]

    def allowed(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool: ...


_OPERATION_OF_METHOD = {
    "GET": Operation.DESCRIBE, "HEAD": Operation.DESCRIBE, "POST": Operation.CREATE,
    "DELETE": Operation.DELETE,
}


class AdminAuth:
    def __init__(self, credentials: Credentials, decider: Decider | None, kafka_scope: str) -> None:
        self._credentials = credentials
        self._decider = decider
        self._kafka_scope = kafka_scope

    async def principal(self, authorization: str | None) -> str | None:
        """``User:<name>`` for valid Basic credentials, else None."""
        if not authorization or not authorization.startswith("Basic "):
            return None
        try:
            user, sep, password = base64.b64decode(authorization[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not sep or not user:
            return None
        for mechanism in MECHANISMS:
            credential = await self._credentials.get(user, mechanism)
            if credential is not None:
                return "User:" + user if password_matches(credential, password) else None
        return None

    def is_super(self, principal: str) -> bool:
        return self._decider is not None and principal in self._decider.super_users

    def allowed(
        self, principal: str, host: str, operation: Operation, scope: str | None,
        stream: str | None,
    ) -> bool:
        if self._decider is None:
            return True  # authentication only
        if scope is not None and stream is not None:
            name = stream if scope == self._kafka_scope else f"{scope}/{stream}"
            return self._decider.allowed(principal, host, operation, ResourceType.TOPIC, name)
        return self._decider.allowed(principal, host, operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def allowed_http(self, principal: str, host: str, method: str, path: str) -> bool:
        """``/v1/scopes/{scope}/streams/{stream}/...``: the stream; else the cluster."""
        parts = [p for p in path.split("/") if p]
        scope = parts[2] if len(parts) > 2 and parts[:2] == ["v1", "scopes"] else None
        stream = parts[4] if scope and len(parts) > 4 and parts[3] == "streams" else None
        operation = _OPERATION_OF_METHOD.get(method.upper(), Operation.ALTER)
        if stream is not None and len(parts) > 5 and operation != Operation.DESCRIBE:
            operation = Operation.ALTER  # a stream's sub-resources (state, scale, ...) alter it
        return self.allowed(principal, host, operation, scope, stream)
