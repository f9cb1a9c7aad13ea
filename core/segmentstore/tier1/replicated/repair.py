"""Re-replication: a sealed plog that has fewer live servers than the replication factor
(made while servers were down, or one of its servers lost its disk) is copied to
healthy servers, in the background of the log's owner, so a later loss does not take
its last copy (DESIGN invariant 8).

For one plog, from a server that holds it, to each new server:

1. ``CREATE`` the plog (a whole sealed copy already there is kept: a copy that was not
   recorded; an unsealed leftover of an interrupted copy is deleted first);
2. ``APPEND`` its bytes ``[0, end)`` in pieces of at most ``APPEND_BYTES_MAX``;
3. ``SEAL`` it at ``end`` with the owner's epoch;
4. record the new group (the servers that hold it and are registered) in the chain.

Until step 4 the copy is unrecorded but its id is: the orphan sweep keeps it, and once
the log truncates the plog away the sweep deletes it. A copy that fails is deleted
again; an owner that dies mid-copy leaves the work to the next owner, which finds the
same short group in the record. A fenced owner may copy from its stale record, but it
deletes only unsealed copies and its record update fails (compare-and-set). One plog and one piece at a time: memory stays within
one piece, and the copy shares the servers' disks with the live appends.
"""

from __future__ import annotations

import logging

from tidegate.core.plog.wire import APPEND_BYTES_MAX, INFO, U64, U64U64, Op, Status, pack_id
from tidegate.core.segmentstore.tier1.api import DataLogError
from tidegate.core.segmentstore.tier1.replicated.chain import Chain
from tidegate.core.segmentstore.tier1.replicated.conn import ServerUnavailableError
from tidegate.core.segmentstore.tier1.replicated.meta import LogMeta, PlogRecord
from tidegate.core.segmentstore.tier1.replicated.replicas import Replicas, status_name

log = logging.getLogger(__name__)


class CopyFailedError(DataLogError):
    """A plog could not be copied to a server (it is tried again later)."""


def short_plogs(meta: LogMeta, live: set[str], factor: int, busy: set[str]) -> list[PlogRecord]:
    """The sealed plogs of the chain with fewer than ``factor`` live servers, oldest
    first; ``busy`` ids (plogs the owner still writes or switches) are left out."""
    return [
        p for p in meta.plogs
        if p.end is not None and p.id not in busy and len([s for s in p.servers if s in live]) < factor
    ]


async def _expect(replicas: Replicas, sid: str, op: int, *parts: bytes | memoryview) -> memoryview:
    status, body = await replicas.call(sid, op, *parts)
    if status != Status.OK:
        raise CopyFailedError(f"{sid}: {status_name(status)} {bytes(body[:200])!r}")
    return body


async def copy_plog(replicas: Replicas, rec: PlogRecord, source: str, target: str, epoch: int) -> None:
    """Steps 1-3 for one target; the copy is deleted again if any fails."""
    assert rec.end is not None
    pid = pack_id(rec.id)
    status, _ = await replicas.call(target, Op.CREATE, pid, U64.pack(max(rec.end, 1)))
    if status == Status.EXISTS:
        info = await _expect(replicas, target, Op.INFO, pid)
        end, sealed, _, _ = INFO.unpack_from(info)
        if sealed and end == rec.end:
            return  # copied whole before (by this owner or one before it), not recorded
        # An interrupted copy's leftover: nobody reads a copy that was never sealed.
        await _expect(replicas, target, Op.DELETE, pid)
        status, _ = await replicas.call(target, Op.CREATE, pid, U64.pack(max(rec.end, 1)))
    if status != Status.OK:
        raise CopyFailedError(f"{target}: create of {rec.id}: {status_name(status)}")
    try:
        pos = 0
        while pos < rec.end:
            piece = await replicas.read(source, rec.id, pos, min(APPEND_BYTES_MAX, rec.end - pos))
            if not piece:
                raise CopyFailedError(f"{source}: plog {rec.id} ends at {pos}, recorded {rec.end}")
            await _expect(replicas, target, Op.APPEND, pid, U64.pack(pos), piece)
            pos += len(piece)
        await _expect(replicas, target, Op.SEAL, pid, U64U64.pack(epoch, rec.end))
    except BaseException:
        await replicas.delete(rec.id, [target])
        raise


async def repair_one(chain: Chain, replicas: Replicas, factor: int, busy: set[str]) -> bool:
    """Copy the oldest short plog to as many healthy servers as it lacks (at least one)
    and record its new group. Whether a plog got a server more; ``False`` when none is
    short or no server can take one now. The caller must not hold the chain's lock."""
    live = set(await replicas.refresh())
    healthy = [s for s in live if not replicas.is_suspect(s)]
    for rec in short_plogs(chain.meta, live, factor, busy):
        holders = [s for s in rec.servers if s in live and not replicas.is_suspect(s)]
        spare = [s for s in healthy if s not in rec.servers]
        if not holders or not spare:
            continue  # no source (the plog is lost until a holder is back), or no target
        need = factor - len(holders)
        added: list[str] = []
        for target in spare[:need]:
            for source in holders:
                try:
                    await copy_plog(replicas, rec, source, target, chain.epoch)
                    added.append(target)
                    break
                except (CopyFailedError, ServerUnavailableError, DataLogError) as exc:
                    log.warning("log %s: copy of plog %s from %s to %s failed: %s",
                                chain.name, rec.id, source, target, exc)
        if not added:
            continue
        group = holders + added
        async with chain.lock:
            if not any(p.id == rec.id for p in chain.meta.plogs):  # truncated meanwhile
                recorded = False
            else:

                def regroup(m: LogMeta, pid: str = rec.id, group: list[str] = group) -> None:
                    for p in m.plogs:
                        if p.id == pid:
                            p.servers = list(group)

                await chain.update(regroup)
                recorded = True
        if not recorded:
            await replicas.delete(rec.id, added)
            continue
        log.info("log %s: plog %s re-replicated to %s (now on %s)", chain.name, rec.id, added, group)
        return True
    return False
