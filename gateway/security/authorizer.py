"""The ACL authorizer: Kafka's ``StandardAuthorizer`` decision, and the one place every
API's request is checked (``guard``), by the table ``gateway.security.api_acls``.

Decision for (principal, host, operation, resource):
- a super user (``super.users``) may do anything;
- the ACLs that apply are those whose pattern covers the resource: literal with the
  same name, literal ``*``, or prefixed by a prefix of the name;
- none apply and ``allow.everyone.if.no.acl.found``: allowed;
- a DENY for the principal (or ``User:*``), host (or ``*``) and operation (or ALL) wins;
- else an ALLOW for them; ALLOW of READ, WRITE, DELETE or ALTER implies DESCRIBE, and of
  ALTER_CONFIGS implies DESCRIBE_CONFIGS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from tidegate.gateway.security.acls import (
    WILDCARD,
    AclBinding,
    AclStore,
    Operation,
    PatternType,
    Permission,
)

log = logging.getLogger(__name__)

_IMPLIES_DESCRIBE = frozenset(
    (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER, Operation.DESCRIBE)
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset((Operation.ALTER_CONFIGS, Operation.DESCRIBE_CONFIGS))


def parse_super_users(value: str) -> frozenset[str]:
    return frozenset(u.strip() for u in value.split(";") if u.strip())


class Authorizer:
    def __init__(
        self, acls: AclStore, super_users: frozenset[str], allow_if_no_acl: bool,
        refresh_interval_s: float = 5.0,
    ) -> None:
        self.acls = acls
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._refresh_interval_s = refresh_interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Reload the ACLs now and then: another node of a cluster may change them."""
        self._task = asyncio.get_running_loop().create_task(self._refresh_loop())

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_interval_s)
            try:
                await self.acls.refresh()
            except Exception as exc:  # the table's container is moving: next time
                log.info("ACL refresh: %r", exc)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def allowed(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        applying = [b for b in self.acls.of_type(resource_type) if _covers(b, resource_type, name)]
        if not applying:
            return self.allow_if_no_acl
        mine = [b for b in applying if b.principal in (principal, "User:*")
                and b.host in (host, WILDCARD)]
        for b in mine:
            if b.permission == Permission.DENY and b.operation in (operation, Operation.ALL):
                return False
        for b in mine:
            if b.permission == Permission.ALLOW and _grants(b.operation, operation):
                return True
        return False


def _covers(b: AclBinding, resource_type: int, name: str) -> bool:
    if b.resource_type != resource_type:
        return False
    if b.pattern_type == PatternType.LITERAL:
        return b.name == name or b.name == WILDCARD
    return b.pattern_type == PatternType.PREFIXED and name.startswith(b.name)


def _grants(granted: int, wanted: int) -> bool:
    if granted in (wanted, Operation.ALL):
        return True
    if wanted == Operation.DESCRIBE:
        return granted in _IMPLIES_DESCRIBE
    if wanted == Operation.DESCRIBE_CONFIGS:
        return granted in _IMPLIES_DESCRIBE_CONFIGS
    return False
