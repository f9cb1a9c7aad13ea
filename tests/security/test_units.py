"""The pure parts: listener parsing, the certificate principal, the authorizer's
decision, ACL filters, SCRAM credentials and the API table's coverage."""

from __future__ import annotations

import pytest
from tidegate.gateway.handlers import HANDLER_MODULES
from tidegate.gateway.security.acls import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from tidegate.gateway.security.api_acls import RULES
from tidegate.gateway.security.authorizer import Authorizer
from tidegate.gateway.security.credentials import new_credential, password_matches
from tidegate.gateway.security.listeners import parse_advertised, parse_listeners
from tidegate.gateway.security.tls import certificate_principal

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


def test_listeners_and_protocol_map() -> None:
    found = parse_listeners("PLAINTEXT://:9092,CLIENT://127.0.0.1:9093", "CLIENT:SASL_SSL")
    assert [(x.name, x.protocol, x.host, x.port) for x in found] == [
        ("PLAINTEXT", "PLAINTEXT", "", 9092), ("CLIENT", "SASL_SSL", "127.0.0.1", 9093),
    ]
    assert found[1].tls and found[1].sasl and not found[0].tls
    assert parse_advertised("CLIENT://kafka.example:19093", found) == {
        "CLIENT": ("kafka.example", 19093)
    }
    for bad in ("PLAINTEXT:9092", "FOO://h:1", "PLAINTEXT://h:1,PLAINTEXT://h:2", ""):
        with pytest.raises(ValueError):
            parse_listeners(bad, "")
    with pytest.raises(ValueError):
        parse_advertised("OTHER://h:1", found)


def test_certificate_principal_is_rfc2253_most_specific_first() -> None:
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Ex, Inc"),),
                        (("commonName", "alice"),))}
    assert certificate_principal(cert) == "User:CN=alice,O=Ex\\, Inc,C=US"
    assert certificate_principal({}) == "User:ANONYMOUS"


class _Acls:
    def __init__(self, bindings: list[AclBinding]) -> None:
        self._b = frozenset(bindings)

    def bindings(self) -> frozenset[AclBinding]:
        return self._b

    def of_type(self, resource_type: int) -> tuple[AclBinding, ...]:
        return tuple(b for b in self._b if b.resource_type == resource_type)


def _b(rt: int, name: str, op: int, perm: int = Permission.ALLOW,
       pattern: int = PatternType.LITERAL, principal: str = "User:alice",
       host: str = "*") -> AclBinding:
    return AclBinding(rt, name, pattern, principal, host, op, perm)


def test_authorizer_decisions() -> None:
    acls = _Acls([
        _b(T, "orders", Operation.WRITE),
        _b(T, "pay-", Operation.ALL, pattern=PatternType.PREFIXED),
        _b(T, "pay-secret", Operation.READ, Permission.DENY),
        _b(T, "*", Operation.DESCRIBE, principal="User:*"),
        _b(G, "g", Operation.READ, host="10.0.0.1"),
        _b(T, "cfg", Operation.ALTER_CONFIGS),
    ])
    authz = Authorizer(acls, frozenset({"User:root"}), allow_if_no_acl=False)  # type: ignore[arg-type]
    ok = lambda op, rt, name, host="127.0.0.1", who="User:alice": authz.allowed(  # noqa: E731
        who, host, op, rt, name)
    assert ok(Operation.WRITE, T, "orders") and not ok(Operation.READ, T, "orders")
    assert ok(Operation.DESCRIBE, T, "orders")  # WRITE implies DESCRIBE (and the wildcard)
    assert ok(Operation.DESCRIBE, T, "anything", who="User:bob")  # literal "*"
    assert ok(Operation.READ, T, "pay-x") and not ok(Operation.READ, T, "pay-secret")
    assert ok(Operation.WRITE, T, "pay-secret")  # the DENY is READ only
    assert ok(Operation.READ, G, "g", host="10.0.0.1") and not ok(Operation.READ, G, "g")
    assert ok(Operation.DESCRIBE_CONFIGS, T, "cfg") and not ok(Operation.DESCRIBE_CONFIGS, T, "orders")
    assert not ok(Operation.ALTER, C, "kafka-cluster")  # no ACL at all: denied...
    assert ok(Operation.ALTER, C, "kafka-cluster", who="User:root")  # ...but for super users
    lenient = Authorizer(acls, frozenset(), allow_if_no_acl=True)  # type: ignore[arg-type]
    assert lenient.allowed("User:x", "h", Operation.ALTER, C, "kafka-cluster")
    assert not lenient.allowed("User:x", "h", Operation.WRITE, T, "orders")  # ACLs exist


def test_acl_filters_and_validation() -> None:
    prefixed = _b(T, "pay-", Operation.ALL, pattern=PatternType.PREFIXED)
    literal = _b(T, "pay-x", Operation.READ)
    match = AclFilter(T, "pay-x", PatternType.MATCH, None, None, Operation.ANY, Permission.ANY)
    assert match.matches(prefixed) and match.matches(literal)
    exact = AclFilter(T, "pay-", PatternType.LITERAL, None, None, Operation.ANY, Permission.ANY)
    assert not exact.matches(prefixed)
    assert literal.invalid() is None
    assert _b(C, "other", Operation.ALTER).invalid() is not None
    assert _b(T, "x", Operation.ANY).invalid() is not None
    assert _b(T, "x", Operation.READ, principal="alice").invalid() is not None


def test_scram_credentials_check_passwords() -> None:
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        credential = new_credential(mechanism, "pw", 4096)
        assert password_matches(credential, "pw") and not password_matches(credential, "pW")


def test_every_registered_api_has_a_rule() -> None:
    """A handler module without a RULES entry would need CLUSTER_ACTION (Kafka's rule
    for unknown APIs): every API served today has its own entry."""
    from tidegate.gateway.handlers import default_registry

    keys = {api.spec.api_key for api in default_registry(HANDLER_MODULES).apis()}
    assert keys - set(RULES) - {3} == set()  # Metadata filters instead


def test_items_are_split_one_by_one_and_ids_checked_under_their_names() -> None:
    """A request listing several topics keeps the allowed ones for its handler and
    answers the denied ones; a topic named by id is checked under its name."""
    import uuid
    from types import SimpleNamespace

    from tidegate.gateway.security.item_acls import merge, split
    from tidegate.gateway.security.listeners import Listener
    from tidegate.gateway.security.session import Session

    known, unknown = uuid.uuid4(), uuid.uuid4()
    authz = Authorizer(_Acls([_b(T, "orders", Operation.DELETE)]), frozenset(), False)  # type: ignore[arg-type]
    session = Session(Listener("SASL_SSL", "SASL_SSL", "", 0), ("h", 1), "127.0.0.1",
                      principal="User:alice")
    request = SimpleNamespace(topics=[SimpleNamespace(name=None, topic_id=known),
                                      SimpleNamespace(name=None, topic_id=unknown),
                                      SimpleNamespace(name="audit", topic_id=None)])
    taken = split(authz, session, request, 20, 6, {known: "orders"}.get)
    assert taken is not None
    assert [t.topic_id for t in request.topics] == [known]
    response = merge(SimpleNamespace(responses=[]), taken)
    assert [(r.error_code, r.name) for r in response.responses] == [(29, None), (29, "audit")]
    assert "User:alice may not DELETE topic 'audit'" in response.responses[1].error_message
    # Nothing denied: the request is left alone.
    assert split(authz, session, SimpleNamespace(topic_names=["orders"]), 20, 5,
                 lambda _: None) is None


class _EveryoneAllowed:
    async def principal(self, authorization: str | None) -> str | None:
        return "User:alice"

    def is_super(self, principal: str) -> bool:
        return False

    def allowed(self, principal: str, host: str, operation: Operation, scope: str | None,
                stream: str | None) -> bool:
        return True


async def test_grpc_streaming_methods_are_refused_not_served_unguarded() -> None:
    """The admin interceptor guards unary calls; any other shape fails closed."""
    import grpc
    from tidegate.gateway.admin.grpc_auth import AuthInterceptor

    async def unary(request: bytes, context: object) -> bytes:
        return b"unary " + request

    async def streamed(request: bytes, context: object):  # type: ignore[no-untyped-def]
        yield b"streamed " + request

    server = grpc.aio.server(interceptors=[AuthInterceptor(_EveryoneAllowed())])
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("t.S", {
        "Get": grpc.unary_unary_rpc_method_handler(unary),
        "GetAll": grpc.unary_stream_rpc_method_handler(streamed),
    })])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert await channel.unary_unary("/t.S/Get")(b"x", timeout=10) == b"unary x"
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                async for _ in channel.unary_stream("/t.S/GetAll")(b"x", timeout=10):
                    pass
            assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await server.stop(None)
