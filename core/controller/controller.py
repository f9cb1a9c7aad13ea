"""``StreamController``: the controller of ``api.Controller`` over a ``SegmentStore``.

All metadata lives in table segments of ``store`` (layout in ``metadata.py``). One
controller process owns that metadata. Workflows on one stream run one at a time: each
takes the stream's lock (waiting up to ``workflow_lock_timeout_ms``) and the persisted
state/workflow records act as the barrier across restarts. ``start()`` finishes every
workflow a crash interrupted before it serves, then starts the background policies.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

from tidegate.core.controller import recovery
from tidegate.core.controller.api import (
    ConflictError,
    Controller,
    EpochRecord,
    InvalidArgumentError,
    KeyRange,
    ScopeExistsError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    SegmentRecord,
    StreamConfig,
    StreamCut,
    StreamInfo,
    StreamNotFoundError,
    TransactionInfo,
    qualified_segment_name,
)
from tidegate.core.controller.config import ControllerConfig
from tidegate.core.controller.history import History, head_cut
from tidegate.core.controller.keyspace import equal_cover
from tidegate.core.controller.kvtables import KeyValueTables
from tidegate.core.controller.metadata import MetadataStore, StreamMeta
from tidegate.core.controller.placement import SegmentPlacement
from tidegate.core.controller.policies.autoscale import AutoScaler, KeyPoints, RoutingKeyTraffic
from tidegate.core.controller.policies.retention import RetentionManager
from tidegate.core.controller.readergroups import ReaderGroups
from tidegate.core.controller.stats import ControllerStats
from tidegate.core.controller.transactions import TransactionManager
from tidegate.core.controller.validation import (
    RESERVED_SCOPES,
    check_config,
    check_initial_ranges,
    check_name,
)
from tidegate.core.controller.watermarks import Watermarks
from tidegate.core.controller.workflows import create, delete, scale, seal, truncate, update
from tidegate.core.controller.workflows.base import Context, txn_segment_name
from tidegate.core.segmentstore.api import (
    NOT_EXISTS,
    ContainerNotOwnedError,
    SegmentNotFoundError,
    SegmentStore,
    SegmentTraffic,
    StoreShutdownError,
)

log = logging.getLogger(__name__)

DEFAULT_CONFIG = ControllerConfig()
#: How long ``close`` waits for the background jobs to stop.
CLOSE_WAIT_S = 10.0
#: Segment lengths a tail cut reads between two yields to the event loop (streams of
#: tens of thousands of segments must not hold it for one whole read).
TAIL_READS_PER_STEP = 1000


class StreamController:
    def __init__(
        self,
        store: SegmentStore,
        config: ControllerConfig = DEFAULT_CONFIG,
        *,
        clock: Callable[[], float] = time.time,
        traffic: Callable[[str], SegmentTraffic] | None = None,
        key_points: KeyPoints | None = None,
        key_traffic: RoutingKeyTraffic | None = None,
        rng: random.Random | None = None,
        placement: SegmentPlacement | None = None,
    ) -> None:
        """``clock`` gives seconds since the epoch; ``traffic`` gives a segment's smoothed
        traffic to the auto-scaler (default ``store.traffic``); ``key_points`` gives the
        routing keys a stream uses, so the auto-scaler splits between them, and
        ``key_traffic`` those keys with their rates, so it splits where the traffic
        divides (see ``policies/autoscale.py``); ``rng`` draws transaction and
        reader-group ids; ``placement`` (cluster mode) is the container map a new stream's
        segments and a scale's successors are spread over (``placement.py``)."""
        self.store = store
        self.config = config
        self.clock = clock
        self.md = MetadataStore(store, config.metadata_prefix)
        self.ctx = Context(store, self.md, config, self.now_ms, placement)
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self.scope_lock = asyncio.Lock()
        self._histories: dict[str, History] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._truncation_listeners: list[Callable[[str, str], Awaitable[None]]] = []
        #: What the controller did since it started (scales, truncations).
        self.stats = ControllerStats()
        #: Draws transaction and reader-group ids.
        self.rng = rng or random.Random()
        self.autoscaler = AutoScaler(self, traffic or store.traffic, key_points, key_traffic)
        self.retention = RetentionManager(self)
        self.txns = TransactionManager(self, self.rng)
        #: Key-value tables, reader groups and watermarks (beyond ``api.Controller``).
        self.kv_tables = KeyValueTables(self)
        self.reader_groups = ReaderGroups(self)
        self.watermarks = Watermarks(self)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        await self.md.ensure_table(self.md.scopes_table)
        await recovery.resume_all(self.ctx)
        await self.kv_tables.resume()
        await self.reader_groups.resume()
        await self.txns.load()
        c = self.config
        for period, job, name in (
            (c.autoscale_period_ms, self.autoscaler.run_once, "autoscale"),
            (c.retention_period_ms, self.retention.run_once, "retention"),
            (c.txn_timeout_check_period_ms, self.txns.expire, "txn-timeouts"),
            (c.watermark_period_ms, self.watermarks.run_once, "watermarks"),
        ):
            if period > 0:
                self._tasks.append(asyncio.create_task(self._periodic(period, job, name), name=name))

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            _, left = await asyncio.wait(self._tasks, timeout=CLOSE_WAIT_S)
            for t in left:  # never a reason to hold up a leadership change
                log.warning("controller background job %s did not stop within %.0f s; left",
                            t.get_name(), CLOSE_WAIT_S)
        self._tasks.clear()

    async def _periodic(
        self, period_ms: int, job: Callable[[], Awaitable[None]], name: str
    ) -> None:
        task = asyncio.current_task()
        while True:
            await asyncio.sleep(period_ms / 1000)
            try:
                await job()
            except (ContainerNotOwnedError, StoreShutdownError) as exc:  # a container moving
                log.warning("controller background job %s skipped this round: %r", name, exc)
            except Exception:
                log.exception("controller background job %s failed", name)
            if task is not None and task.cancelling():
                # The job swallowed its cancellation (Python 3.11's wait_for can, when what
                # it waits for ends at that moment): the job ends all the same.
                raise asyncio.CancelledError

    @asynccontextmanager
    async def workflow_lock(self, scope: str, stream: str) -> AsyncIterator[None]:
        """Hold the stream's workflow lock; ``ConflictError`` after
        ``workflow_lock_timeout_ms`` of waiting."""
        lock = self._locks.setdefault((scope, stream), asyncio.Lock())
        try:
            async with asyncio.timeout(self.config.workflow_lock_timeout_ms / 1000):
                await lock.acquire()
        except TimeoutError as e:
            raise ConflictError(f"stream {scope}/{stream} is busy with another workflow") from e
        try:
            await self._finish_recorded(scope, stream)
            yield
        finally:
            lock.release()

    @asynccontextmanager
    async def stream_workflow(self, scope: str, stream: str) -> AsyncIterator[StreamMeta]:
        """Hold the stream's workflow lock, with any recorded workflow finished first;
        yields the stream's metadata (checked to exist before and after waiting)."""
        await self.stream_meta(scope, stream)
        async with self.workflow_lock(scope, stream):
            yield await self.stream_meta(scope, stream)

    async def _finish_recorded(self, scope: str, stream: str) -> None:
        """Run the remaining steps of a workflow an earlier failure left recorded (a
        create or delete in the scope's index, or another in the stream's table)."""
        try:
            entry = await self.md.get(self.md.scope_table(scope), f"stream/{stream}")
        except SegmentNotFoundError:
            return  # no such scope
        if entry is None:
            return
        if entry.value is None:
            recorded = (await StreamMeta(self.md, scope, stream).workflow()).value
            if recorded is None:
                return
        log.info("finishing the recorded workflow of %s/%s", scope, stream)
        await recovery.resume_stream(self.ctx, scope, stream, entry.value)

    # -- scopes -------------------------------------------------------------------------------
    async def create_scope(self, scope: str) -> None:
        check_name("scope", scope, self.config)
        if scope in RESERVED_SCOPES:
            raise ScopeExistsError(f"scope {scope} is reserved")
        async with self.scope_lock:
            await self.md.ensure_table(self.md.scope_table(scope))
            try:
                await self.md.put(self.md.scopes_table, {scope: None}, {scope: NOT_EXISTS})
            except ConflictError as e:
                raise ScopeExistsError(f"scope {scope} exists") from e

    async def delete_scope(self, scope: str) -> None:
        async with self.scope_lock:
            await self.check_scope(scope)
            table = self.md.scope_table(scope)
            for kind, what in (
                ("stream/", "streams"),
                ("kvt/", "key-value tables"),
                ("rg/", "reader groups"),
            ):
                if await self.md.entries(table, kind):
                    raise ScopeNotEmptyError(f"scope {scope} still has {what}")
            await self.md.remove(self.md.scopes_table, [scope])
            await self.md.drop_table(table)

    async def list_scopes(self) -> list[str]:
        return [k for k, _ in await self.md.entries(self.md.scopes_table)]

    async def check_scope(self, scope: str) -> None:
        if not isinstance(scope, str) or await self.md.get(self.md.scopes_table, scope) is None:
            raise ScopeNotFoundError(f"scope {scope} not found")

    # -- streams ------------------------------------------------------------------------------
    async def stream_meta(self, scope: str, stream: str) -> StreamMeta:
        """The stream's metadata, or ``ScopeNotFoundError`` / ``StreamNotFoundError``."""
        await self.check_scope(scope)
        entry = (
            await self.md.get(self.md.scope_table(scope), f"stream/{stream}")
            if isinstance(stream, str)
            else None
        )
        if entry is None or (entry.value is not None and "delete" in entry.value):
            raise StreamNotFoundError(f"stream {scope}/{stream} not found")
        meta = StreamMeta(self.md, scope, stream)
        try:
            await meta.state()
        except (KeyError, SegmentNotFoundError) as e:
            raise StreamNotFoundError(f"stream {scope}/{stream} not found") from e
        return meta

    async def history(self, meta: StreamMeta) -> History:
        """The stream's epoch history, cached per current epoch (epochs never change)."""
        n = await meta.current_epoch_no()
        h = self._histories.get(meta.table)
        if h is None or h.current.epoch != n:
            h = History(await meta.epochs())
            self._histories[meta.table] = h
        return h

    def forget_stream(self, scope: str, stream: str) -> None:
        """Drop what is cached of a stream another node deleted (cluster mode)."""
        table = self.md.stream_table(scope, stream)
        self.md.forget(table)
        self._histories.pop(table, None)

    async def create_stream(
        self,
        scope: str,
        stream: str,
        config: StreamConfig,
        key_ranges: Sequence[KeyRange] | None = None,
    ) -> StreamInfo:
        check_name("stream", stream, self.config)
        check_config(config, self.config)
        ranges = (
            equal_cover(config.scaling.min_segments) if key_ranges is None else list(key_ranges)
        )
        check_initial_ranges(ranges, self.config)
        numbers: list[int] | None = None
        if self.ctx.placement is not None:  # off the loop: a hash or more per segment
            numbers = await asyncio.to_thread(
                create.first_numbers, self.ctx, scope, stream, len(ranges)
            )
        req = create.request(config, ranges, self.now_ms(), numbers)
        async with self.workflow_lock(scope, stream):
            async with self.scope_lock:  # not racing a delete_scope
                await self.check_scope(scope)
                await create.claim(self.ctx, scope, stream, req)
            await create.steps(self.ctx, scope, stream, req)
        return await self.get_stream(scope, stream)

    async def get_stream(self, scope: str, stream: str) -> StreamInfo:
        meta = await self.stream_meta(scope, stream)
        state, _ = await meta.state()
        return StreamInfo(
            scope=scope,
            stream=stream,
            config=await meta.config(),
            state=state,
            current_epoch=await meta.current_epoch_no(),
            creation_time_ms=await meta.created_ms(),
        )

    async def list_streams(self, scope: str, tag: str | None = None) -> list[str]:
        await self.check_scope(scope)
        table = self.md.scope_table(scope)
        if tag is None:
            return [
                k[len("stream/") :]
                for k, v in await self.md.entries(table, "stream/")
                if v.value is None
            ]
        return [k[len(f"tag/{tag}/") :] for k, _ in await self.md.entries(table, f"tag/{tag}/")]

    async def update_stream(self, scope: str, stream: str, config: StreamConfig) -> StreamInfo:
        check_config(config, self.config)
        async with self.stream_workflow(scope, stream) as meta:
            await update.start(self.ctx, meta, config)
        return await self.get_stream(scope, stream)

    async def seal_stream(self, scope: str, stream: str) -> None:
        async with self.stream_workflow(scope, stream) as meta:
            await seal.start(self.ctx, meta)
            self.txns.forget(scope, stream)

    async def delete_stream(self, scope: str, stream: str) -> None:
        async with self.stream_workflow(scope, stream) as meta:
            await delete.start(self.ctx, meta)
        self._histories.pop(meta.table, None)
        self._locks.pop((scope, stream), None)
        self.stats.forget(scope, stream)
        self.txns.forget(scope, stream)

    # -- segments and epochs -------------------------------------------------------------------
    async def get_current_segments(self, scope: str, stream: str) -> list[SegmentRecord]:
        h = await self.history(await self.stream_meta(scope, stream))
        return list(h.current.segments)

    async def current_segments(self, scope: str, stream: str) -> list[SegmentRecord]:
        """``get_current_segments`` for a stream known to exist (the gateway's topics), in
        one metadata read: the stream's current epoch number, as fresh as the full call
        (a scale writes it with its epoch in one update; epochs never change, so they
        come from the cache). ``StreamNotFoundError`` if the stream has no epochs."""
        meta = StreamMeta(self.md, scope, stream)
        try:
            n = await meta.current_epoch_no()
        except (KeyError, SegmentNotFoundError) as e:
            raise StreamNotFoundError(f"stream {scope}/{stream} not found") from e
        h = self._histories.get(meta.table)
        if h is None or h.current.epoch != n:
            h = History([await meta.epoch(i) for i in range(n + 1)])
            self._histories[meta.table] = h
        return list(h.current.segments)

    async def get_head_segments(self, scope: str, stream: str) -> dict[int, int]:
        meta = await self.stream_meta(scope, stream)
        trunc = await meta.truncation()
        return head_cut(await self.history(meta), trunc.cut if trunc else None)

    async def get_segment_for_key(self, scope: str, stream: str, key: float) -> SegmentRecord:
        h = await self.history(await self.stream_meta(scope, stream))
        return h.segment_for_key(key)

    async def get_successors(
        self, scope: str, stream: str, seg_id: int
    ) -> dict[SegmentRecord, list[int]]:
        h = await self.history(await self.stream_meta(scope, stream))
        return h.successors(seg_id)

    async def get_predecessors(
        self, scope: str, stream: str, seg_id: int
    ) -> dict[SegmentRecord, list[int]]:
        """Predecessor segments, each with the ids of all its successors."""
        h = await self.history(await self.stream_meta(scope, stream))
        return h.predecessors(seg_id)

    async def get_segment(self, scope: str, stream: str, seg_id: int) -> SegmentRecord:
        h = await self.history(await self.stream_meta(scope, stream))
        return h.segment(seg_id)

    async def get_epochs(self, scope: str, stream: str) -> list[EpochRecord]:
        h = await self.history(await self.stream_meta(scope, stream))
        return list(h.epochs)

    async def get_segments_at(self, scope: str, stream: str, time_ms: int) -> EpochRecord:
        """The epoch in force at ``time_ms`` (the first epoch for earlier times)."""
        h = await self.history(await self.stream_meta(scope, stream))
        return h.epoch_at(time_ms)

    async def get_tail_cut(self, scope: str, stream: str) -> dict[int, int]:
        """The current epoch's segments at their present lengths."""
        h = await self.history(await self.stream_meta(scope, stream))
        tail: dict[int, int] = {}
        for i, s in enumerate(h.current.segments, 1):
            tail[s.id] = (await self.store.get_info(qualified_segment_name(scope, stream, s.id))).length
            if i % TAIL_READS_PER_STEP == 0:  # the lookups complete without suspending
                await asyncio.sleep(0)
        return tail

    async def get_sealed_sizes(self, scope: str, stream: str) -> dict[int, int]:
        meta = await self.stream_meta(scope, stream)
        return {k: v.size for k, v in (await meta.sealed()).items()}

    async def is_cut_ge(self, scope: str, stream: str, a: StreamCut, b: StreamCut) -> bool:
        """Whether StreamCut ``a`` is at or after ``b`` (both validated)."""
        h = await self.history(await self.stream_meta(scope, stream))
        h.check_cut(a)
        h.check_cut(b)
        return h.cut_ge(a, b)

    async def bytes_between(self, scope: str, stream: str, a: StreamCut, b: StreamCut) -> int:
        """Bytes from cut ``b`` up to cut ``a`` (``ConflictError`` unless ``a >= b``)."""
        meta = await self.stream_meta(scope, stream)
        h = await self.history(meta)
        h.check_cut(a)
        h.check_cut(b)
        sizes = await meta.sealed()
        return h.bytes_between(a, b, lambda seg: sizes[seg].size)

    # -- workflows ------------------------------------------------------------------------------
    async def scale(
        self,
        scope: str,
        stream: str,
        sealed_segments: Sequence[int],
        new_ranges: Sequence[KeyRange],
        *,
        kind: str = "manual",
    ) -> EpochRecord:
        """``kind`` (``manual``, ``split``, ``merge``) labels the scale in ``stats``."""
        async with self.stream_workflow(scope, stream) as meta:
            epoch = await scale.start(self.ctx, meta, list(sealed_segments), list(new_ranges))
        self.stats.scaled(scope, stream, kind)
        log.info(
            "scaled %s/%s (%s): epoch %d, sealed %s, %d segments now",
            scope, stream, kind, epoch.epoch, list(sealed_segments), len(epoch.segments),
        )
        return epoch

    async def truncate(
        self, scope: str, stream: str, cut: StreamCut, *, reason: str = "request"
    ) -> None:
        """``reason`` (``request``, ``retention``) labels the truncation in ``stats``;
        every listener added with ``on_truncated`` is awaited after it."""
        if not hasattr(cut, "items"):
            raise InvalidArgumentError("a StreamCut is a mapping of segment id to offset")
        async with self.stream_workflow(scope, stream) as meta:
            await truncate.start(self.ctx, meta, dict(cut))
        for listener in list(self._truncation_listeners):
            try:
                await listener(scope, stream)
            except Exception:
                log.exception("truncation listener of %s/%s failed", scope, stream)
        self.stats.truncated(scope, stream, reason)  # counted once the listeners have run

    def on_truncated(
        self, listener: Callable[[str, str], Awaitable[None]]
    ) -> Callable[[], None]:
        """Await ``listener(scope, stream)`` after each truncation completes (the gateway
        moves its partitions' log starts then, not a polling period later); returns the
        call that removes it."""
        self._truncation_listeners.append(listener)

        def remove() -> None:
            if listener in self._truncation_listeners:
                self._truncation_listeners.remove(listener)

        return remove

    async def streams_with_state(self) -> list[tuple[str, str]]:
        """Every (scope, stream) whose creation finished and which is not being deleted."""
        out = []
        for scope in await self.list_scopes():
            out += [(scope, s) for s in await self.list_streams(scope)]
        return out

    # -- transactions ---------------------------------------------------------------------------
    async def create_transaction(
        self, scope: str, stream: str, lease_ms: int | None = None
    ) -> TransactionInfo:
        """Begin a transaction in the current epoch; its shadow segments are named by
        ``transaction_segment_name``. Its lease (default ``txn_lease_ms_default``) must be
        renewed with ``ping_transaction`` or it is aborted."""
        return await self.txns.create(scope, stream, lease_ms)

    async def ping_transaction(
        self, scope: str, stream: str, txn_id: str, lease_ms: int | None = None
    ) -> TransactionInfo:
        return await self.txns.ping(scope, stream, txn_id, lease_ms)

    async def commit_transaction(self, scope: str, stream: str, txn_id: str) -> None:
        """Returns once the transaction's data is merged into the stream (committing it
        again does nothing); ``ConflictError`` if it was aborted or its lease ran out."""
        await self.txns.commit(scope, stream, txn_id)

    async def abort_transaction(self, scope: str, stream: str, txn_id: str) -> None:
        """``ConflictError`` if it is committing or committed."""
        await self.txns.abort(scope, stream, txn_id)

    async def get_transaction(self, scope: str, stream: str, txn_id: str) -> TransactionInfo:
        return await self.txns.get(scope, stream, txn_id)

    async def list_transactions(self, scope: str, stream: str) -> list[TransactionInfo]:
        """The open transactions of a stream."""
        return await self.txns.list_open(scope, stream)

    @staticmethod
    def transaction_segment_name(scope: str, stream: str, parent: int, txn_id: str) -> str:
        return txn_segment_name(scope, stream, parent, txn_id)


def _conforms(c: StreamController) -> Controller:
    """Checked by mypy: ``StreamController`` implements the ``Controller`` protocol."""
    return c
