"""SCRAM credentials (RFC 5802, KIP-84) kept salted and hashed in a table segment of the
segment store, so every node of a cluster reads the same users.

Only the salt, the iteration count, ``StoredKey`` and ``ServerKey`` are kept: never a
password, never the salted password. PLAIN logins are checked against the same
credentials (the password is salted and hashed again and compared with ``StoredKey``).
Lookups read the table each time (a login is rare next to requests; a cluster sees a
change at once).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tidegate.core.segmentstore.api import (
    NOT_EXISTS,
    BadKeyVersionError,
    SegmentExistsError,
    TableEntry,
    TableRemoval,
    TableUpdate,
)

SECURITY_TABLE = "_system/gateway/security"

#: KIP-554's mechanism codes.
MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's bounds on a credential's iterations (ScramMechanism.minIterations/max).
ITERATIONS_MIN = 4096
ITERATIONS_MAX = 16384
DEFAULT_ITERATIONS = 4096
#: Longest user name and salt (or salted password) stored, in bytes: a credential is one
#: table entry, whose key and value the segment store bounds.
USER_BYTES_MAX = 1024
SALT_BYTES_MAX = 1024
_PREFIX = b"scram/"


class TableStore(Protocol):
    """The segment store's table operations used here."""

    async def create_table(self, name: str) -> None: ...
    async def table_put(self, name: str, updates: Sequence[TableUpdate]) -> list[int]: ...
    async def table_remove(self, name: str, removals: Sequence[TableRemoval]) -> None: ...
    async def table_get(self, name: str, keys: Sequence[bytes]) -> list[TableEntry | None]: ...
    async def table_entries(self, name: str, prefix: bytes = b"") -> list[TableEntry]: ...


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)


def credential_from_salted(
    mechanism: str, salt: bytes, iterations: int, salted: bytes
) -> ScramCredential:
    name = HASHES[mechanism]
    client_key = hmac.digest(salted, b"Client Key", name)
    stored_key = hashlib.new(name, client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", name)
    return ScramCredential(mechanism, salt, iterations, stored_key, server_key)


def new_credential(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS
) -> ScramCredential:
    salt = os.urandom(32)
    return credential_from_salted(
        mechanism, salt, iterations, salted_password(mechanism, password, salt, iterations)
    )


def password_matches(credential: ScramCredential, password: str) -> bool:
    expected = credential_from_salted(
        credential.mechanism, credential.salt, credential.iterations,
        salted_password(credential.mechanism, password, credential.salt, credential.iterations),
    )
    return hmac.compare_digest(expected.stored_key, credential.stored_key)


def _key(user: str, mechanism: str) -> bytes:
    return _PREFIX + mechanism.encode() + b"/" + user.encode()


def _encode(c: ScramCredential) -> bytes:
    return json.dumps({
        "salt": c.salt.hex(), "iterations": c.iterations,
        "stored_key": c.stored_key.hex(), "server_key": c.server_key.hex(),
    }).encode()


def _decode(mechanism: str, value: bytes) -> ScramCredential:
    d = json.loads(value)
    return ScramCredential(
        mechanism, bytes.fromhex(d["salt"]), int(d["iterations"]),
        bytes.fromhex(d["stored_key"]), bytes.fromhex(d["server_key"]),
    )


class CredentialStore:
    def __init__(self, store: TableStore, table: str = SECURITY_TABLE) -> None:
        self._store = store
        self._table = table

    async def start(self, users: dict[str, str]) -> int:
        """Create the table; store ``users`` (name → password) for both mechanisms where
        they have no credential yet. Returns how many credentials were added."""
        try:
            await self._store.create_table(self._table)
        except SegmentExistsError:
            pass
        added = 0
        for user, password in users.items():
            for mechanism in MECHANISMS:
                if await self.get(user, mechanism) is None:
                    credential = new_credential(mechanism, str(password))
                    update = TableUpdate(_key(user, mechanism), _encode(credential), NOT_EXISTS)
                    try:
                        await self._store.table_put(self._table, [update])
                        added += 1
                    except BadKeyVersionError:
                        pass  # another node of the cluster stored it first
        return added

    async def get(self, user: str, mechanism: str) -> ScramCredential | None:
        (entry,) = await self._store.table_get(self._table, [_key(user, mechanism)])
        return None if entry is None else _decode(mechanism, entry.value)

    async def put(self, user: str, credential: ScramCredential) -> None:
        update = TableUpdate(_key(user, credential.mechanism), _encode(credential))
        await self._store.table_put(self._table, [update])

    async def delete(self, user: str, mechanism: str) -> bool:
        if await self.get(user, mechanism) is None:
            return False
        await self._store.table_remove(self._table, [TableRemoval(_key(user, mechanism))])
        return True

    async def users(self) -> dict[str, list[tuple[str, int]]]:
        """Every user with a credential: ``[(mechanism, iterations), ...]``."""
        found: dict[str, list[tuple[str, int]]] = {}
        for entry in await self._store.table_entries(self._table, _PREFIX):
            mechanism, _, user = entry.key[len(_PREFIX):].decode().partition("/")
            iterations = int(json.loads(entry.value)["iterations"])
            found.setdefault(user, []).append((mechanism, iterations))
        return found
