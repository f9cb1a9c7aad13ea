"""Abort a transaction: mark it ``ABORTING``, delete its shadow segments, mark it
``ABORTED``. Runs without the stream's workflow barrier: only the transaction's own
record changes, and the ``OPEN -> ABORTING`` step is a conditional update, so an abort
and a commit never both win."""

from __future__ import annotations

from dataclasses import replace

from tidegate.core.controller.api import ConflictError
from tidegate.core.controller.metadata import StreamMeta
from tidegate.core.controller.records import TxnRecord, TxnState
from tidegate.core.controller.workflows.base import Context, delete_segment, each, txn_segment_name


async def mark(meta: StreamMeta, txn_id: str) -> TxnRecord:
    """``OPEN -> ABORTING`` (or keep ``ABORTING``/``ABORTED``); ``ConflictError`` if the
    transaction is committing or committed."""
    v = await meta.get(f"txn/{txn_id}")
    if v is None:
        raise KeyError(txn_id)
    rec = TxnRecord.from_json(v.value)
    if rec.state in (TxnState.ABORTING, TxnState.ABORTED):
        return rec
    if rec.state != TxnState.OPEN:
        raise ConflictError(f"transaction {txn_id} is {rec.state}")
    rec = replace(rec, state=TxnState.ABORTING)
    await meta.put({f"txn/{txn_id}": rec.to_json()}, expected={f"txn/{txn_id}": v.version})
    return rec


async def steps(ctx: Context, meta: StreamMeta, rec: TxnRecord) -> TxnRecord:
    await each(
        delete_segment(ctx.store, txn_segment_name(meta.scope, meta.stream, p, rec.id))
        for p in rec.segments
    )
    done = replace(rec, state=TxnState.ABORTED, completed_ms=ctx.now_ms())
    await meta.put({f"txn/{rec.id}": done.to_json()})
    return done
