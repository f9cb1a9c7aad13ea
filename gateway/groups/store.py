"""Durable group state in one table segment of the segment store.

Keys (byte strings, so a prefix scan finds one group's offsets):

- ``b"g" + group_id`` -> the group's metadata (JSON): generation, protocol type and
  name, leader, and each member with its protocols and assignment (base64). Written
  when a generation becomes Stable (before anyone sees its assignment) and when the
  group becomes Empty; removed when the group is deleted.
- ``b"o" + u32 len + group_id + u32 len + topic + i32 partition`` (big-endian, UTF-8)
  -> a committed offset (JSON: offset, leader epoch, metadata string, commit time).

Writes go through a single writer task in call order, so the table always holds the
state of the latest call that has completed; a caller that needs durability before it
answers awaits the future ``submit`` returns. Group ids and topic names are arbitrary
strings: the length prefixes keep keys unambiguous whatever they contain.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tidegate.core.segmentstore.api import (
    ContainerNotOwnedError,
    SegmentExistsError,
    SegmentStore,
    StoreShutdownError,
    TableEntry,
    TableRemoval,
    TableUpdate,
)
from tidegate.gateway import failpoints
from tidegate.gateway.groups.model import CommittedOffset, Group, GroupState, Member

_GROUP = b"g"
_OFFSET = b"o"


def group_key(group_id: str) -> bytes:
    return _GROUP + group_id.encode()


def _str32(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">I", len(b)) + b


def offsets_prefix(group_id: str) -> bytes:
    return _OFFSET + _str32(group_id)


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return offsets_prefix(group_id) + _str32(topic) + struct.pack(">i", partition)


def parse_offset_key(key: bytes) -> tuple[str, str, int]:
    pos = 1
    (n,) = struct.unpack_from(">I", key, pos)
    group = key[pos + 4 : pos + 4 + n].decode()
    pos += 4 + n
    (n,) = struct.unpack_from(">I", key, pos)
    topic = key[pos + 4 : pos + 4 + n].decode()
    pos += 4 + n
    (partition,) = struct.unpack_from(">i", key, pos)
    return group, topic, partition


def encode_offset(o: CommittedOffset) -> bytes:
    return json.dumps(
        {"o": o.offset, "e": o.leader_epoch, "m": o.metadata, "t": o.commit_timestamp_ms}
    ).encode()


def decode_offset(value: bytes) -> CommittedOffset:
    d = json.loads(value)
    return CommittedOffset(int(d["o"]), int(d["e"]), d["m"], int(d["t"]))


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def encode_group(g: Group) -> bytes:
    members: list[dict[str, Any]] = [
        {
            "id": m.member_id,
            "instance": m.group_instance_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "session_ms": m.session_timeout_ms,
            "rebalance_ms": m.rebalance_timeout_ms,
            "protocol_type": m.protocol_type,
            "protocols": [[n, _b64(md)] for n, md in m.protocols],
            "assignment": _b64(m.assignment),
        }
        for m in g.members.values()
    ]
    return json.dumps(
        {
            "generation": g.generation_id,
            "protocol_type": g.protocol_type,
            "protocol": g.protocol_name,
            "leader": g.leader_id,
            "empty_since": g.empty_since_wall_ms,
            "members": members,
        }
    ).encode()


def decode_group(group_id: str, value: bytes, now_ms: int, now_wall_ms: int) -> Group:
    """A group as loaded after a restart: Stable with its members (their sessions
    start again now, as Kafka does when it loads a group), or Empty."""
    d = json.loads(value)
    g = Group(group_id, generation_id=int(d["generation"]))
    g.protocol_type = d["protocol_type"]
    g.protocol_name = d["protocol"]
    g.leader_id = d["leader"]
    for md in d["members"]:
        m = Member(
            member_id=md["id"],
            group_instance_id=md["instance"],
            client_id=md["client_id"],
            client_host=md["client_host"],
            session_timeout_ms=int(md["session_ms"]),
            rebalance_timeout_ms=int(md["rebalance_ms"]),
            protocol_type=md["protocol_type"],
            protocols=[(n, base64.b64decode(b)) for n, b in md["protocols"]],
            assignment=base64.b64decode(md["assignment"]),
            session_deadline_ms=now_ms + int(md["session_ms"]),
        )
        g.members[m.member_id] = m
        if m.group_instance_id is not None:
            g.static_members[m.group_instance_id] = m.member_id
    g.state = GroupState.STABLE if g.members else GroupState.EMPTY
    g.state_changed_ms = now_ms
    if g.state is GroupState.EMPTY:
        since = d.get("empty_since")
        g.empty_since_wall_ms = int(since) if since is not None else now_wall_ms
    return g


@dataclass(slots=True)
class _Write:
    puts: list[TableUpdate]
    removals: list[TableRemoval]
    done: asyncio.Future[None]


class GroupStore:
    """The coordinator's only door to storage (one table segment named ``table``)."""

    def __init__(self, store: SegmentStore, table: str, *, queue_writes_max: int = 10_000) -> None:
        self._store = store
        self.table = table
        self._queue: asyncio.Queue[_Write | None] = asyncio.Queue(queue_writes_max)
        self._writer: asyncio.Task[None] | None = None

    async def open(self) -> list[TableEntry]:
        """Create the table if needed, start the writer, return every stored entry."""
        try:
            await self._store.create_table(self.table)
        except SegmentExistsError:
            pass
        entries = await self._store.table_entries(self.table)
        self._writer = asyncio.create_task(self._run(), name=f"group-store:{self.table}")
        return entries

    async def close(self) -> None:
        if self._writer is None:
            return
        await self._queue.put(None)
        await self._writer
        self._writer = None

    def submit(
        self, puts: Sequence[TableUpdate] = (), removals: Sequence[TableRemoval] = ()
    ) -> asyncio.Future[None]:
        """Queue one atomic batch of puts, then one of removals; both in call order
        relative to every other submit. The future resolves once they are durable."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._writer is None:
            done.set_exception(RuntimeError("group store is not open"))
            return done
        try:
            self._queue.put_nowait(_Write(list(puts), list(removals), done))
        except asyncio.QueueFull:
            done.set_exception(RuntimeError("group store write queue is full"))
        return done

    async def _run(self) -> None:
        while True:
            w = await self._queue.get()
            if w is None:
                return
            try:
                await failpoints.stall("groups.write")
                if w.puts:
                    await self._store.table_put(self.table, w.puts)
                if w.removals:
                    await self._store.table_remove(self.table, w.removals)
            except Exception as e:  # noqa: BLE001 - handed to the waiting caller
                if not w.done.done():
                    w.done.set_exception(e)
                    if isinstance(e, (ContainerNotOwnedError, StoreShutdownError)):
                        # The container left this node (the coordinator stops): expected,
                        # not logged as an exception nobody retrieved.
                        w.done.exception()
                continue
            if not w.done.done():
                w.done.set_result(None)

    # -- typed helpers -------------------------------------------------------------------

    def put_group(self, g: Group) -> asyncio.Future[None]:
        return self.submit([TableUpdate(group_key(g.group_id), encode_group(g))])

    def put_offsets(
        self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset]
    ) -> asyncio.Future[None]:
        return self.submit(
            [TableUpdate(offset_key(group_id, t, p), encode_offset(o)) for (t, p), o in offsets.items()]
        )

    def remove_offsets(
        self, group_id: str, partitions: Sequence[tuple[str, int]]
    ) -> asyncio.Future[None]:
        return self.submit(removals=[TableRemoval(offset_key(group_id, t, p)) for t, p in partitions])

    def remove_group(self, g: Group) -> asyncio.Future[None]:
        keys = [group_key(g.group_id)] + [offset_key(g.group_id, t, p) for t, p in g.offsets]
        return self.submit(removals=[TableRemoval(k) for k in keys])
