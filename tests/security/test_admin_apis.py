"""Admin REST and gRPC with ``admin.authentication`` and ``admin.tls``: TLS only,
anonymous and wrong credentials refused, the same SCRAM users accepted, ACLs deciding
per stream, and the cluster-forwarding mark honoured only from a super user."""

from __future__ import annotations

import base64
import ssl

import grpc
import httpx
import pytest
from tidegate.protocol.controller_grpc import pb2, pb2_grpc

from tests.security.conftest import USERS, Secure


def _basic(user: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _rest(s: Secure) -> str:
    return f"https://127.0.0.1:{s.server.rest_port}"


def test_rest_refuses_anonymous_and_applies_acls(secure: Secure) -> None:
    with httpx.Client(verify=ssl.create_default_context(cafile=str(secure.certs.ca)),
                      timeout=10) as http:
        assert http.get(_rest(secure) + "/health").status_code == 200
        anonymous = http.get(_rest(secure) + "/v1/scopes")
        assert anonymous.status_code == 401 and "Basic" in anonymous.headers["www-authenticate"]
        assert http.get(_rest(secure) + "/v1/scopes", headers=_basic("alice", "wrong")).status_code == 401
        assert http.get(_rest(secure) + "/metrics").status_code == 401
        admin = _basic("admin", USERS["admin"])
        assert http.get(_rest(secure) + "/v1/scopes", headers=admin).status_code == 200
        created = http.post(_rest(secure) + "/v1/scopes", json={"scopeName": "ops"}, headers=admin)
        assert created.status_code in (200, 201), created.text
        # alice has no cluster ACL: she may not list scopes nor create one.
        alice = _basic("alice", USERS["alice"])
        assert http.get(_rest(secure) + "/v1/scopes", headers=alice).status_code == 403
        denied = http.post(_rest(secure) + "/v1/scopes", json={"scopeName": "mine"}, headers=alice)
        assert denied.status_code == 403 and "User:alice" in denied.text
    with pytest.raises((httpx.ConnectError, httpx.RemoteProtocolError)):  # no plain HTTP
        httpx.get(f"http://127.0.0.1:{secure.server.rest_port}/health", timeout=5)


async def test_grpc_refuses_anonymous_and_forged_forwarding(secure: Secure) -> None:
    credentials = grpc.ssl_channel_credentials(secure.certs.ca.read_bytes())
    target = f"127.0.0.1:{secure.server.grpc_port}"
    async with grpc.aio.secure_channel(target, credentials) as channel:
        stub = pb2_grpc.ControllerServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ListScopes(pb2.ListScopesRequest(), timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        admin = tuple(_basic("admin", USERS["admin"]).items())
        scopes = await stub.ListScopes(pb2.ListScopesRequest(), metadata=admin, timeout=10)
        assert "kafka" in list(scopes.scopes)
        alice = tuple(_basic("alice", USERS["alice"]).items())
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.DeleteScope(pb2.ScopeRequest(scope="kafka"), metadata=alice, timeout=10)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # The cluster's forwarding mark from a non-super user does not bypass anything.
        forged = alice + (("tidegate-forwarded", "1"),)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ListScopes(pb2.ListScopesRequest(), metadata=forged, timeout=10)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
