"""Stream transactions: create, ping, commit, abort, and abort on lease expiry.

A transaction begins in the stream's current epoch with one shadow segment per segment
of that epoch (``workflows.base.txn_segment_name``). Its record ``txn/<id>`` is written
before the shadow segments are created, so a crash in between leaves a record whose
lease runs out and whose abort deletes whatever exists. Commit marks the record
``COMMITTING`` with the next commit order number, then ``workflows.commit`` merges it (or
rolls it over); abort marks ``ABORTING`` and deletes the shadows. Both marks are
conditional updates of the record, so exactly one of commit and abort wins. Completed
records are kept ``txn_completed_retention_ms`` and then removed.
"""

from __future__ import annotations

import logging
import random
import uuid
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import Protocol

from tidegate.core.controller.api import (
    ConflictError,
    InvalidArgumentError,
    SegmentRecord,
    StreamState,
    TransactionInfo,
    TransactionNotFoundError,
)
from tidegate.core.controller.metadata import StreamMeta
from tidegate.core.controller.records import TxnRecord, TxnState
from tidegate.core.controller.services import ControllerServices
from tidegate.core.controller.workflows import abort, commit
from tidegate.core.controller.workflows.base import Context, create_segment, each, txn_segment_name
from tidegate.core.segmentstore.api import NOT_EXISTS, SegmentNotFoundError, SegmentStore

log = logging.getLogger(__name__)

TxnKey = tuple[str, str, str]


class TransactionsHost(ControllerServices, Protocol):
    """What transactions use besides the controller's services: its segment store (their
    shadow segments), the workflows' context (commit and abort) and the stream workflow
    lock."""

    @property
    def store(self) -> SegmentStore: ...
    @property
    def ctx(self) -> Context: ...

    def stream_workflow(self, scope: str, stream: str) -> AbstractAsyncContextManager[StreamMeta]:
        """Hold the stream's workflow lock; yields the stream's metadata."""


class TransactionManager:
    def __init__(self, ctl: TransactionsHost, rng: random.Random) -> None:
        self.ctl = ctl
        self.rng = rng
        #: open transactions -> lease expiry (ms)
        self.open: dict[TxnKey, int] = {}
        #: completed transactions -> completion time (ms)
        self.done: dict[TxnKey, int] = {}

    def _info(
        self, meta: StreamMeta, rec: TxnRecord, segs: dict[int, SegmentRecord]
    ) -> TransactionInfo:
        return TransactionInfo(
            id=rec.id,
            scope=meta.scope,
            stream=meta.stream,
            epoch=rec.epoch,
            segments=tuple(segs[p] for p in rec.segments),
            lease_expiry_ms=rec.lease_expiry_ms,
            state=rec.state,
            extra=dict(rec.extra),
        )

    async def _record(self, meta: StreamMeta, txn_id: str) -> tuple[TxnRecord, int]:
        v = await meta.get(f"txn/{txn_id}") if isinstance(txn_id, str) else None
        if v is None:
            raise TransactionNotFoundError(f"transaction {txn_id} not found in {meta.name}")
        return TxnRecord.from_json(v.value), v.version

    def _lease(self, lease_ms: int | None) -> int:
        lease = self.ctl.config.txn_lease_ms_default if lease_ms is None else lease_ms
        if (
            isinstance(lease, bool)
            or not isinstance(lease, int)
            or not 0 < lease <= self.ctl.config.txn_lease_ms_max
        ):
            raise InvalidArgumentError(
                f"lease {lease!r} ms outside 1..{self.ctl.config.txn_lease_ms_max}"
            )
        return lease

    async def load(self) -> None:
        self.open.clear()
        self.done.clear()
        md = self.ctl.md
        for scope, _ in await md.entries(md.scopes_table):
            for key, _ in await md.entries(md.scope_table(scope), "stream/"):
                stream = key[len("stream/") :]
                meta = StreamMeta(md, scope, stream)
                try:
                    entries = await md.entries(meta.table, "txn/")
                except SegmentNotFoundError:
                    continue  # a stream whose create or delete is still to be finished
                for _, v in entries:
                    rec = TxnRecord.from_json(v.value)
                    k = (scope, stream, rec.id)
                    if rec.state == TxnState.OPEN:
                        self.open[k] = rec.lease_expiry_ms
                    elif rec.state in (TxnState.COMMITTED, TxnState.ABORTED):
                        self.done[k] = rec.completed_ms
                    elif rec.state == TxnState.ABORTING:
                        await abort.steps(self.ctl.ctx, meta, rec)
                        self.done[k] = self.ctl.now_ms()

    def forget(self, scope: str, stream: str) -> None:
        for d in (self.open, self.done):
            for k in [k for k in d if k[0] == scope and k[1] == stream]:
                del d[k]

    async def create(self, scope: str, stream: str, lease_ms: int | None) -> TransactionInfo:
        lease = self._lease(lease_ms)
        async with self.ctl.stream_workflow(scope, stream) as meta:
            state, _ = await meta.state()
            if state != StreamState.ACTIVE:
                raise ConflictError(f"stream {meta.name} is {state.value}; no new transactions")
            epoch = await meta.current_epoch()
            now = self.ctl.now_ms()
            txn_id = uuid.UUID(int=self.rng.getrandbits(128), version=4).hex
            rec = TxnRecord(
                id=txn_id,
                epoch=epoch.epoch,
                segments=tuple(s.id for s in epoch.segments),
                lease_expiry_ms=now + lease,
                state=TxnState.OPEN,
                created_ms=now,
            )
            await meta.put({f"txn/{txn_id}": rec.to_json()}, {f"txn/{txn_id}": NOT_EXISTS})
            self.open[(scope, stream, txn_id)] = rec.lease_expiry_ms
            await each(
                create_segment(self.ctl.store, txn_segment_name(scope, stream, s.id, txn_id))
                for s in epoch.segments
            )
        return self._info(meta, rec, {s.id: s for s in epoch.segments})

    async def get(self, scope: str, stream: str, txn_id: str) -> TransactionInfo:
        meta = await self.ctl.stream_meta(scope, stream)
        rec, _ = await self._record(meta, txn_id)
        h = await self.ctl.history(meta)
        return self._info(meta, rec, dict(h.segments))

    async def list_open(self, scope: str, stream: str) -> list[TransactionInfo]:
        meta = await self.ctl.stream_meta(scope, stream)
        h = await self.ctl.history(meta)
        out = []
        for _, v in await self.ctl.md.entries(meta.table, "txn/"):
            rec = TxnRecord.from_json(v.value)
            if rec.state == TxnState.OPEN:
                out.append(self._info(meta, rec, dict(h.segments)))
        return out

    async def ping(
        self, scope: str, stream: str, txn_id: str, lease_ms: int | None
    ) -> TransactionInfo:
        lease = self._lease(lease_ms)
        meta = await self.ctl.stream_meta(scope, stream)
        rec, version = await self._record(meta, txn_id)
        now = self.ctl.now_ms()
        if rec.state != TxnState.OPEN:
            raise ConflictError(f"transaction {txn_id} is {rec.state}")
        if rec.lease_expiry_ms < now:
            await self._abort(meta, txn_id)
            raise ConflictError(f"transaction {txn_id} lease expired; aborted")
        rec = replace(rec, lease_expiry_ms=now + lease)
        await meta.put({f"txn/{txn_id}": rec.to_json()}, {f"txn/{txn_id}": version})
        self.open[(scope, stream, txn_id)] = rec.lease_expiry_ms
        h = await self.ctl.history(meta)
        return self._info(meta, rec, dict(h.segments))

    async def commit(self, scope: str, stream: str, txn_id: str) -> None:
        async with self.ctl.stream_workflow(scope, stream) as meta:
            rec, version = await self._record(meta, txn_id)
            if rec.state == TxnState.COMMITTED:
                return
            if rec.state in (TxnState.ABORTING, TxnState.ABORTED):
                raise ConflictError(f"transaction {txn_id} is {rec.state}")
            if rec.state == TxnState.OPEN:
                if rec.lease_expiry_ms < self.ctl.now_ms():
                    await self._abort(meta, txn_id)
                    raise ConflictError(f"transaction {txn_id} lease expired; aborted")
                state, _ = await meta.state()
                if state != StreamState.ACTIVE:
                    raise ConflictError(f"stream {meta.name} is {state.value}; cannot commit")
                order = await meta.get("txn_order")
                n = 0 if order is None else int(order.value)
                marked = replace(rec, state=TxnState.COMMITTING, commit_order=n)
                await meta.put(
                    {f"txn/{txn_id}": marked.to_json(), "txn_order": n + 1},
                    {
                        f"txn/{txn_id}": version,
                        "txn_order": NOT_EXISTS if order is None else order.version,
                    },
                )
            self.open.pop((scope, stream, txn_id), None)
            await commit.commit_marked(self.ctl.ctx, meta)
        self.done[(scope, stream, txn_id)] = self.ctl.now_ms()

    async def _abort(self, meta: StreamMeta, txn_id: str) -> None:
        try:
            rec = await abort.mark(meta, txn_id)
        except KeyError as e:
            raise TransactionNotFoundError(f"transaction {txn_id} not found in {meta.name}") from e
        if rec.state != TxnState.ABORTED:
            await abort.steps(self.ctl.ctx, meta, rec)
        self.open.pop((meta.scope, meta.stream, txn_id), None)
        self.done[(meta.scope, meta.stream, txn_id)] = self.ctl.now_ms()

    async def abort(self, scope: str, stream: str, txn_id: str) -> None:
        meta = await self.ctl.stream_meta(scope, stream)
        await self._record(meta, txn_id)
        await self._abort(meta, txn_id)

    async def expire(self) -> None:
        """Abort open transactions whose lease ran out; drop old completed records."""
        now = self.ctl.now_ms()
        for (scope, stream, txn_id), expiry in list(self.open.items()):
            if expiry >= now:
                continue
            meta = StreamMeta(self.ctl.md, scope, stream)
            try:
                rec, _ = await self._record(meta, txn_id)
                if rec.state == TxnState.OPEN and rec.lease_expiry_ms < now:
                    log.info("transaction %s of %s timed out; aborting", txn_id, meta.name)
                    await self._abort(meta, txn_id)
                elif rec.state == TxnState.OPEN:
                    self.open[(scope, stream, txn_id)] = rec.lease_expiry_ms
                else:
                    self.open.pop((scope, stream, txn_id), None)
            except ConflictError:
                pass  # committed meanwhile
            except Exception:
                log.exception("aborting timed-out transaction %s of %s", txn_id, meta.name)
        keep_ms = self.ctl.config.txn_completed_retention_ms
        for (scope, stream, txn_id), done in list(self.done.items()):
            if done + keep_ms < now:
                meta = StreamMeta(self.ctl.md, scope, stream)
                try:
                    await self.ctl.md.remove(meta.table, [f"txn/{txn_id}"])
                except Exception:
                    log.exception("removing transaction record %s of %s", txn_id, meta.name)
                    continue
                del self.done[(scope, stream, txn_id)]
