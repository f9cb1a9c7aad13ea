"""Applying durable operations: the operation metadata updater.

``commit`` runs for the operations of each durable frame, in log order: it advances the
committed metadata, feeds the read index, table indexes and traffic meters, and hands
the operation to the storage writer. ``replay`` does the same during recovery, where the
pending view is rebuilt too (pending == committed once replay ends).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tidegate.core.segmentstore.metadata import ContainerMetadata, SegmentMeta, decode_segment
from tidegate.core.segmentstore.operations import (
    AppendOp,
    AttrsOp,
    CreateOp,
    MapOp,
    MergeOp,
    Operation,
    OpKind,
    PlainAppend,
    TableCompactOp,
    TableWriteOp,
    TruncateOp,
)
from tidegate.core.segmentstore.reading.index import ReadIndex, SegmentReadIndex
from tidegate.core.segmentstore.tables import TableIndex
from tidegate.core.segmentstore.tier1.api import LogAddress
from tidegate.core.segmentstore.traffic import Traffic

_APPEND = OpKind.APPEND
#: Appends up to this size committed together are joined into one cache entry (a copy
#: of a few KB costs less than a cache entry per append; one alone is copied too, see
#: ``_Run.end``); larger ones are kept as is.
COALESCE_BYTES_MAX = 16 * 1024


class _Run:
    """Consecutive small appends of one segment within one commit batch."""

    __slots__ = ("first", "datas", "last_seq")

    def __init__(self, first: AppendOp, data: bytes | memoryview) -> None:
        self.first = first
        self.datas = [data]
        self.last_seq = first.seq

    def end(self, idx: SegmentReadIndex) -> None:
        datas = self.datas
        data = datas[0]
        if len(datas) > 1 or type(data) is not bytes:
            # Joined, or copied if alone: besides not pinning a request, ``bytes`` is
            # not tracked by the garbage collector, while a view and its buffer are two
            # objects every full collection scans for as long as the entry is cached.
            data = b"".join(datas)
        idx.add_append(self.first.offset, data, self.first, self.last_seq)
        if idx.waiters:
            idx.notify()


class _Replayed:
    """Consecutive appends of one segment read back by recovery (``Applier.replay``)."""

    __slots__ = ("sid", "start", "end", "datas", "seq", "last_seq", "address", "frame_pos", "whole")

    def __init__(
        self, sid: int, start: int, data: bytes | memoryview, seq: int, address: LogAddress | None, frame_pos: int
    ) -> None:
        self.sid = sid
        self.start = start
        self.end = start + len(data)
        self.datas = [data]
        self.seq = self.last_seq = seq
        self.address = address
        self.frame_pos = frame_pos
        self.whole = False


class OperationSink(Protocol):
    """Takes applied operations in log order (the storage writer)."""

    def add_many(self, ops: list[Operation]) -> None: ...


class ApplyTarget(Protocol):
    """What applying operations updates: the container's committed state
    (``SegmentContainer``)."""

    #: Sequence number of the last applied operation.
    committed_seq: int

    @property
    def md(self) -> ContainerMetadata: ...
    @property
    def tables(self) -> dict[int, TableIndex]: ...
    @property
    def read_index(self) -> ReadIndex: ...
    @property
    def traffic(self) -> Traffic: ...
    @property
    def writer(self) -> OperationSink: ...
    @property
    def wall_clock(self) -> Callable[[], float]: ...

    def maybe_compact(self, meta: SegmentMeta) -> None:
        """Queue a compaction of table segment ``meta`` if it is due."""


class Applier:
    def __init__(self, container: ApplyTarget) -> None:
        self.c = container
        #: Names deleted during replay (a later segment of that name may find the old
        #: one's data still in Tier-2 until the writer applies the deletion).
        self.replay_deleted: set[str] = set()

    def commit(self, ops: list[Operation]) -> None:
        c = self.c
        by_id = c.md.by_id
        now_ms = int(c.wall_clock() * 1000)
        traffic: dict[SegmentMeta, list[int]] = {}
        runs: dict[SegmentMeta, _Run] = {}
        for op in ops:
            if op.kind is _APPEND:
                # The hot path, inlined: metadata, read index (via runs), traffic.
                assert isinstance(op, AppendOp)
                meta = by_id[op.segment_id]
                n = op.length
                if op.offset != meta.length:
                    raise AssertionError(f"{meta.name}: append at {op.offset}, length {meta.length}")
                meta.length += n
                meta.last_modified_ms = now_ms
                meta.p_ops -= 1
                if op.attributes:
                    meta.attributes.update(op.attributes)
                if n:
                    self._add(runs, meta, op)
                op.data = None
                t = traffic.get(meta)
                if t is None:
                    traffic[meta] = [n, op.event_count]
                else:
                    t[0] += n
                    t[1] += op.event_count
            else:
                self._end_runs(runs)
                self._apply(op, now_ms, live=True)
        self._end_runs(runs)
        if not ops:
            return  # a frame holding only the middle of a spanning operation
        c.writer.add_many(ops)
        c.committed_seq = ops[-1].seq
        for meta, (nbytes, events) in traffic.items():
            c.traffic.record(meta.name, nbytes, events)

    def replay(self, ops: list[Operation | PlainAppend]) -> None:
        """Apply operations read back from Tier-1 (recovery), in log order. Consecutive
        appends to a segment (up to the next other operation or the end of ``ops``)
        become one cache entry and one append for the storage writer."""
        if not ops:
            return
        c = self.c
        by_id = c.md.by_id
        now_ms = int(c.wall_clock() * 1000)
        runs: dict[int, _Replayed] = {}
        out: list[Operation] = []  # for the storage writer
        data: bytes | memoryview
        address: LogAddress | None
        for op in ops:
            if isinstance(op, tuple):
                seq, sid, offset, data, address, frame_pos = op
            elif op.kind is _APPEND:
                assert isinstance(op, AppendOp) and op.data is not None
                seq, sid, offset, data = op.seq, op.segment_id, op.offset, op.data
                address, frame_pos = op.address, op.frame_pos
                if op.attributes:
                    meta = by_id[sid]
                    meta.attributes.update(op.attributes)
                    meta.p_attributes.update(op.attributes)
            else:
                self._end_replayed(runs, out, now_ms)
                self._apply(op, now_ms, live=False)
                out.append(op)
                continue
            n = len(data)
            run = runs.get(sid)
            if run is not None:
                if run.end == offset and n <= COALESCE_BYTES_MAX and not run.whole:
                    run.datas.append(data)
                    run.end = offset + n
                    run.last_seq = seq
                    continue
                del runs[sid]
                self._end_run(run, out, now_ms)
            run = runs[sid] = _Replayed(sid, offset, data, seq, address, frame_pos)
            if n > COALESCE_BYTES_MAX:
                run.whole = True  # an entry of its own, as live
        self._end_replayed(runs, out, now_ms)
        last = ops[-1]
        c.md.seq = max(c.md.seq, last[0] if isinstance(last, tuple) else last.seq)
        c.committed_seq = c.md.seq
        c.writer.add_many(out)

    def _end_replayed(self, runs: dict[int, _Replayed], out: list[Operation], now_ms: int) -> None:
        if runs:
            for run in runs.values():
                self._end_run(run, out, now_ms)
            runs.clear()

    def _end_run(self, run: _Replayed, out: list[Operation], now_ms: int) -> None:
        """Apply a run of replayed appends: metadata, one cache entry (copied: it must
        not pin its Tier-1 frames), and one ``AppendOp`` for the storage writer that
        carries the run's first sequence number (Tier-1 is kept from there on until the
        writer has flushed the run)."""
        meta = self.c.md.by_id[run.sid]
        if run.start != meta.length:
            raise AssertionError(f"{meta.name}: append at {run.start}, length {meta.length}")
        meta.length = meta.p_length = run.end
        meta.last_modified_ms = now_ms
        data = b"".join(run.datas)
        if data:
            idx = self.c.read_index.get(meta)
            idx.add_entry(run.start, data, run.address, run.frame_pos, run.seq, run.last_seq)
        op = AppendOp(run.sid, "", run.start, b"")
        op.seq = run.seq
        op.length = run.end - run.start
        op.data = None
        out.append(op)

    def _add(self, runs: dict[SegmentMeta, _Run], meta: SegmentMeta, op: AppendOp) -> None:
        """Index an append's bytes: small ones join the segment's run (one cache entry
        per run), large ones get an entry of their own (the caller's buffer, not
        copied)."""
        data = op.data
        assert data is not None
        run = runs.get(meta)
        if op.length <= COALESCE_BYTES_MAX:
            if run is None:
                runs[meta] = _Run(op, data)
            else:
                run.datas.append(data)
                run.last_seq = op.seq
            return
        if run is not None:
            del runs[meta]
            run.end(self.c.read_index.get(meta))
        idx = self.c.read_index.get(meta)
        idx.add_append(op.offset, data, op)
        if idx.waiters:
            idx.notify()

    def _end_runs(self, runs: dict[SegmentMeta, _Run]) -> None:
        if runs:
            get = self.c.read_index.get
            for meta, run in runs.items():
                run.end(get(meta))
            runs.clear()

    def _append(self, meta: SegmentMeta, op: TableWriteOp, offset: int, n: int, now_ms: int) -> None:
        if offset != meta.length:
            raise AssertionError(f"{meta.name}: append at {offset}, length {meta.length}")
        meta.length = offset + n
        if now_ms:
            meta.last_modified_ms = now_ms
        data = op.data
        assert data is not None
        idx = self.c.read_index.get(meta)
        if n:
            if isinstance(data, memoryview):
                # Replayed: a slice of a whole Tier-1 frame, which it must not pin.
                data = bytes(data)
            idx.add_append(offset, data, op)
        op.data = None
        idx.notify()

    def _apply(self, op: Operation, now_ms: int, *, live: bool) -> None:
        c = self.c
        md = c.md
        kind = op.kind
        if kind == OpKind.CHECKPOINT:
            return
        if kind == OpKind.MAP:
            # Live, the activation installed the segment already; a replay installs it
            # unless the log (from an older checkpoint on) has kept it in memory.
            if live:
                md.by_id[op.segment_id].p_ops -= 1
            else:
                assert isinstance(op, MapOp)
                meta, _ = decode_segment(op.data)
                if meta.id not in md.by_id:
                    md.by_id[meta.id] = meta
                    md.by_name[meta.name] = meta
                    md.next_id = max(md.next_id, meta.id + 1)
            return
        if kind == OpKind.CREATE:
            assert isinstance(op, CreateOp)
            if live:
                meta = md.by_id[op.segment_id]
                meta.p_ops -= 1
            else:
                meta = md.new_segment(op.name, op.is_table, dict(op.attributes))
                md.next_id = max(md.next_id, op.segment_id + 1)
                del md.by_id[meta.id]
                meta.id = op.segment_id
                md.by_id[meta.id] = meta
                meta.tier2_stale = op.name in self.replay_deleted
                if op.is_table:
                    c.tables[meta.id] = TableIndex()
            meta.created = True
            meta.last_modified_ms = now_ms
            return
        meta = md.by_id[op.segment_id]
        if live:
            meta.p_ops -= 1
        if kind == OpKind.TABLE_WRITE or kind == OpKind.TABLE_COMPACT:
            assert isinstance(op, TableWriteOp)
            data = op.data
            assert data is not None
            self._append(meta, op, op.offset, op.length, now_ms)
            table = c.tables[meta.id]
            if kind == OpKind.TABLE_COMPACT:
                assert isinstance(op, TableCompactOp)
                if live:
                    table.apply(data, op.offset, queued=True, compact=True)
                    table.compacting = False
                self._truncate(meta, op.new_start, live)
            elif live:
                table.apply(data, op.offset, queued=True)
            if not live:
                meta.p_length = meta.length
            else:
                c.maybe_compact(meta)
        elif kind == OpKind.ATTRS:
            assert isinstance(op, AttrsOp)
            meta.attributes.update(op.attributes)
            if not live:
                meta.p_attributes.update(op.attributes)
        elif kind == OpKind.SEAL:
            meta.sealed = True
            if not live:
                meta.p_sealed = True
            c.read_index.get(meta).notify()
        elif kind == OpKind.TRUNCATE:
            assert isinstance(op, TruncateOp)
            self._truncate(meta, op.offset, live)
        elif kind == OpKind.MERGE:
            assert isinstance(op, MergeOp)
            src = md.by_id[op.source_id]
            src.sealed = src.deleted = True
            src.merged_into = (meta, op.offset, op.length)
            if not live:
                src.p_sealed = src.p_deleted = True
                if md.by_name.get(src.name) is src:
                    del md.by_name[src.name]
            meta.length += op.length
            if not live:
                meta.p_length = meta.length
            if now_ms:
                meta.last_modified_ms = now_ms
            idx = c.read_index.get(meta)
            src_idx = c.read_index.get(src)
            if op.length:
                idx.merges.append((op.offset, op.length, src_idx))
            idx.notify()
            src_idx.notify()  # tail readers of the source wake to find it gone
            c.traffic.forget(src.name)
        elif kind == OpKind.DELETE:
            meta.deleted = True
            if not live:
                meta.p_deleted = True
                self.replay_deleted.add(meta.name)
                if md.by_name.get(meta.name) is meta:
                    del md.by_name[meta.name]
            c.read_index.get(meta).notify()  # tail readers wake to find it gone
            c.tables.pop(meta.id, None)
            c.traffic.forget(meta.name)
        else:
            raise AssertionError(f"cannot apply {op.kind}")

    def _truncate(self, meta: SegmentMeta, offset: int, live: bool) -> None:
        meta.start_offset = max(meta.start_offset, offset)
        if not live:
            meta.p_start = meta.start_offset
        c = self.c
        c.read_index.get(meta).truncate(meta.start_offset)

