"""ACLs as Kafka has them (KIP-290 patterns): a binding of a resource pattern (type, name,
literal or prefixed) to an entry (principal, host, operation, allow or deny), stored in
the security table segment so a cluster shares them, cached in memory.

Filters (DescribeAcls, DeleteAcls) match as Kafka's ``AclBindingFilter``: ANY matches
every value, a null name, principal or host every one, and pattern type MATCH every
pattern that would apply to the named resource (literal equal, the ``*`` wildcard, or a
prefix of it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import IntEnum

from tidegate.core.segmentstore.api import SegmentExistsError, TableRemoval, TableUpdate
from tidegate.gateway.security.credentials import SECURITY_TABLE, TableStore


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


WILDCARD = "*"
CLUSTER_NAME = "kafka-cluster"
_PREFIX = b"acl/"


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: int
    name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def invalid(self) -> str | None:
        """Why this binding cannot be stored (Kafka's INVALID_REQUEST cases), or None."""
        if self.resource_type not in (2, 3, 4, 5, 6, 7):
            return f"resource type {self.resource_type} is not a concrete type"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return "pattern type must be LITERAL or PREFIXED"
        if self.operation < Operation.ALL or self.operation > Operation.DESCRIBE_TOKENS:
            return f"operation {self.operation} is not a concrete operation"
        if self.permission not in (Permission.DENY, Permission.ALLOW):
            return "permission type must be ALLOW or DENY"
        if not self.name:
            return "resource name must not be empty"
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            return f"the cluster resource is named {CLUSTER_NAME}"
        principal_type, sep, _ = self.principal.partition(":")
        if not sep or not principal_type:
            return f"principal {self.principal!r} is not TYPE:NAME"
        if not self.host:
            return "host must not be empty (use *)"
        return None

    def key(self) -> bytes:
        return _PREFIX + json.dumps(asdict(self), sort_keys=True).encode()


@dataclass(frozen=True, slots=True)
class AclFilter:
    resource_type: int
    name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if not self._pattern_matches(b):
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != Operation.ANY and self.operation != b.operation:
            return False
        return self.permission == Permission.ANY or self.permission == b.permission

    def _pattern_matches(self, b: AclBinding) -> bool:
        if self.pattern_type == PatternType.MATCH:
            if self.name is None:
                return True
            if b.pattern_type == PatternType.LITERAL:
                return b.name in (self.name, WILDCARD)
            return b.pattern_type == PatternType.PREFIXED and self.name.startswith(b.name)
        if self.pattern_type != PatternType.ANY and self.pattern_type != b.pattern_type:
            return False
        return self.name is None or self.name == b.name


class AclStore:
    def __init__(self, store: TableStore, table: str = SECURITY_TABLE) -> None:
        self._store = store
        self._table = table
        self._bindings: frozenset[AclBinding] = frozenset()
        self._by_type: dict[int, tuple[AclBinding, ...]] = {}

    async def start(self) -> None:
        try:
            await self._store.create_table(self._table)
        except SegmentExistsError:
            pass
        await self.refresh()

    async def refresh(self) -> None:
        """Reload from the table (another node of the cluster may have changed it)."""
        entries = await self._store.table_entries(self._table, _PREFIX)
        self._set(frozenset(AclBinding(**json.loads(e.key[len(_PREFIX):])) for e in entries))

    def bindings(self) -> frozenset[AclBinding]:
        return self._bindings

    def of_type(self, resource_type: int) -> tuple[AclBinding, ...]:
        """The bindings on one resource type (what every authorization looks through)."""
        return self._by_type.get(resource_type, ())

    def _set(self, bindings: frozenset[AclBinding]) -> None:
        by_type: dict[int, list[AclBinding]] = {}
        for b in bindings:
            by_type.setdefault(b.resource_type, []).append(b)
        self._bindings = bindings
        self._by_type = {k: tuple(v) for k, v in by_type.items()}

    async def add(self, bindings: Iterable[AclBinding]) -> None:
        new = [b for b in bindings if b not in self._bindings]
        if new:
            await self._store.table_put(self._table, [TableUpdate(b.key(), b"") for b in new])
            self._set(self._bindings | frozenset(new))

    async def remove(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Delete what each filter matches; the matches per filter."""
        await self.refresh()
        matched = [[b for b in self._bindings if f.matches(b)] for f in filters]
        gone = {b for found in matched for b in found}
        if gone:
            await self._store.table_remove(self._table, [TableRemoval(b.key()) for b in gone])
            self._set(self._bindings - gone)
        return matched
