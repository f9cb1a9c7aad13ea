"""ASGI middleware: every call but ``/health`` needs Basic credentials (401 without
valid ones) and the ACLs' consent (403) — ``gateway.security.admin_auth``."""

from __future__ import annotations

import json
from typing import Protocol

from starlette.types import ASGIApp, Receive, Scope, Send


class Auth(Protocol):
    async def principal(self, authorization: str | None) -> str | None: ...
    def allowed_http(self, principal: str, host: str, method: str, path: str) -> bool: ...


class RestAuthentication:
    def __init__(self, app: ASGIApp, auth: Auth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == "/health":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        authorization = headers.get(b"authorization", b"").decode("latin-1") or None
        principal = await self.auth.principal(authorization)
        if principal is None:
            await _answer(send, 401, "authentication required (HTTP Basic, a SASL/SCRAM user)")
            return
        client = scope.get("client") or ("", 0)
        if not self.auth.allowed_http(principal, str(client[0]), scope["method"], scope["path"]):
            await _answer(send, 403, f"{principal} may not {scope['method']} {scope['path']}")
            return
        await self.app(scope, receive, send)


async def _answer(send: Send, status: int, message: str) -> None:
    body = json.dumps({"detail": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Basic realm="tidegate"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


