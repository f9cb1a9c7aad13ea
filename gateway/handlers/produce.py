"""Produce (key 0), v3+ with record batches v2 only (DESIGN.md section 4).

Per partition: check the batch header (magic 2, lengths, CRC-32C), its size against
``message.max.bytes`` (or the topic's ``max.message.bytes``), its records (codec,
framing, count: ``gateway.log.validate``), what the topic's configs ask
(``gateway/log/batch_policy.py``: keys of compacted topics, timestamp bounds, LogAppendTime
stamping), the producer's id/epoch/sequence; then assign offsets, rewrite the base offset
in place and append. Records are never rewritten or recompressed. Partitions are checked,
assigned and submitted in order, a slice of ``PARTITIONS_PER_STEP`` per loop step; the
next request on the connection starts once all are submitted; the answer waits until the
appends are durable (acks=1/all) or is not sent at all (acks=0).

A partition this node starts leading between two pipelined requests of one connection
(cluster mode) refused the first as not led here; the next one's sequence then follows a
batch never written. That gap is the node's, not the producer's: it is answered
NOT_LEADER_OR_FOLLOWER too, once, not OUT_OF_ORDER_SEQUENCE_NUMBER, on which librdkafka
bumps its epoch and restarts every partition's sequences, so that a batch of another
partition whose outcome it does not know (a connection lost with its leader) is sent again
as new records and stored twice (issue 36). The same holds after a batch refused here
with KAFKA_STORAGE_ERROR (the partition's storage unavailable: a Tier-1 failover, a full
disk), once, and after one accepted here whose append then failed (its producer state
dropped), until the producer sends that one again: the next batch is answered
NOT_LEADER_OR_FOLLOWER and the producer sends the refused or failed one first.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafka.protocol.producer import ProduceRequest, ProduceResponse
from tidegate.gateway.handlers import EncodedBody, HandlerContext, RequestContext
from tidegate.gateway.log.batch_policy import check_batch
from tidegate.gateway.log.partition_log import (
    LeaderMovedError,
    PartitionLog,
    PendingAppend,
    StorageFailure,
)
from tidegate.gateway.log.partitions import PARTITIONS_PER_STEP
from tidegate.gateway.log.producer_state import BatchRecord, Duplicate
from tidegate.gateway.log.topics import topic_name_error
from tidegate.gateway.log.txn_guards import Guard
from tidegate.gateway.log.validate import RecordsError, validate_records
from tidegate.gateway.security.acls import Operation, ResourceType
from tidegate.gateway.security.item_acls import refusal
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode
from tidegate.protocol.produce import (
    PartitionProduceResult,
    decode_produce_request,
    encode_produce_response,
)
from tidegate.protocol.record_batch import (
    BatchHeader,
    InvalidBatchError,
    UnsupportedMagicError,
    iter_batches,
)

log = logging.getLogger(__name__)

SPEC = ApiSpec(ProduceRequest, ProduceResponse, 3, 12, decoder=decode_produce_request)
#: Produce v12+ is transaction version 2: the leader adds the partition to the
#: transaction (KIP-890), the client sends no AddPartitionsToTxn.
TV2_VERSION = 12
#: Most bytes a compressed batch may decompress to while it is validated (one at a time:
#: validation runs on the event loop without a pause).
DECOMPRESSED_BYTES_MAX = 64 * 1024 * 1024


class _Work:
    """One partition of the request on its way through the handler."""

    __slots__ = ("topic", "partition", "records", "head", "plog", "batch", "error", "message",
                 "pending", "duplicate", "append_time_ms", "guard", "record_errors")

    def __init__(
        self, topic: str, partition: int, records: memoryview | None, head: memoryview | None
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.records = records
        #: The request body up to the end of ``records``, when the bytes before them may
        #: be overwritten (``PartitionLog.append`` puts its envelope there).
        self.head = head
        self.plog: PartitionLog | None = None
        self.batch: BatchHeader | None = None
        self.error = ErrorCode.NONE
        self.message: str | None = None
        self.pending: PendingAppend | None = None
        self.duplicate: BatchRecord | None = None
        self.append_time_ms = -1
        #: The transaction's guard here, when a coordinator elsewhere verified it.
        self.guard: Guard | None = None
        #: ``(index in the batch, message)`` of the records refused (v8+ answers).
        self.record_errors: tuple[tuple[int, str], ...] = ()


def _validate(ctx: HandlerContext, work: _Work) -> None:
    info = ctx.topics.get(work.topic)
    if info is None:
        bad = topic_name_error(work.topic) is not None
        work.error = ErrorCode.INVALID_TOPIC_EXCEPTION if bad else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return
    if not 0 <= work.partition < info.partitions:
        work.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return
    limit = int(info.configs.get("max.message.bytes", ctx.config.message_max_bytes))
    records = work.records
    if not records:
        work.error, work.message = ErrorCode.CORRUPT_MESSAGE, "no records"
        return
    if len(records) > limit:
        work.error = ErrorCode.MESSAGE_TOO_LARGE
        work.message = f"{len(records)} bytes > {limit}"
        return
    try:
        batches = list(iter_batches(records))
    except UnsupportedMagicError as exc:
        work.error, work.message = ErrorCode.INVALID_RECORD, str(exc)
        return
    except InvalidBatchError as exc:
        work.error, work.message = ErrorCode.CORRUPT_MESSAGE, str(exc)
        return
    # Kafka: v3+ produce requests carry exactly one batch per partition.
    if len(batches) != 1:
        work.error, work.message = ErrorCode.INVALID_RECORD, "exactly one batch expected"
        return
    batch = batches[0]
    if batch.record_count != batch.last_offset_delta + 1:
        work.error = ErrorCode.INVALID_RECORD
        work.message = "record count does not match last offset delta"
        return
    if batch.is_control:  # Kafka's LogValidator rule and message
        work.error = ErrorCode.INVALID_RECORD
        work.message = ("Clients are not allowed to write control records in topic "
                        f"partition {work.topic}-{work.partition}.")
        return
    try:
        area = validate_records(records, batch, DECOMPRESSED_BYTES_MAX)
    except RecordsError as exc:
        work.error, work.message = exc.code, exc.message
        return
    verdict = check_batch(
        info.configs, records, batch, work.topic, work.partition, ctx.clock_ms(), area)
    if verdict.error != ErrorCode.NONE:
        work.error, work.message = verdict.error, verdict.message
        work.record_errors = verdict.record_errors
        return
    if verdict.header is not None:  # stamped (LogAppendTime)
        batch, work.append_time_ms = verdict.header, verdict.log_append_time_ms
        if verdict.records is not None:
            work.records, work.head = verdict.records, None
    plog = ctx.logs.get(work.topic, work.partition)
    if plog.failed is not None:
        work.error = ErrorCode.KAFKA_STORAGE_ERROR
        work.message = f"offset index unavailable, retry later: {plog.failed}"
        return
    if plog.unavailable is not None:
        work.error = ErrorCode.KAFKA_STORAGE_ERROR
        work.message = f"storage unavailable, retry later: {plog.unavailable}"
        return
    work.batch = batch
    work.plog = plog


def _assign(ctx: HandlerContext, work: _Work, refused: set[tuple[str, int]]) -> None:
    """The synchronous step: idempotence check, offset assignment, submission.
    ``refused``: the partitions this connection's last produce to was refused as not led
    here (see the module's docstring)."""
    batch, plog = work.batch, work.plog
    assert batch is not None and plog is not None and work.records is not None
    after_refusal = (work.topic, work.partition) in refused
    refused.discard((work.topic, work.partition))
    if batch.is_transactional:  # gateway/txn: the transaction must hold the partition
        error = _txn_error(ctx, work, batch)
        if error != ErrorCode.NONE:
            work.error = error
            return
    if batch.is_idempotent:
        verdict = ctx.producers.check(work.topic, work.partition, batch)
        if isinstance(verdict, Duplicate):
            work.duplicate = verdict.batch
            return
        if verdict == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and (
                after_refusal or ctx.producers.failed_here(work.topic, work.partition, batch)):
            work.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            work.message = "the batch before this one was refused or failed here: send it first"
            return
        if verdict is not None:
            work.error = verdict
            if verdict == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:  # fatal to librdkafka: say why
                work.message = (f"sequence {batch.base_sequence}-{batch.last_sequence} of producer "
                                f"{batch.producer_id} epoch {batch.producer_epoch} does not follow "
                                f"{ctx.producers.explain(work.topic, work.partition, batch)}")
                log.info("%s/%d: %s", work.topic, work.partition, work.message)
            return
    try:
        work.pending = plog.append(work.records, [batch], work.head)
    except StorageFailure as exc:  # offline or unavailable since ``_validate``
        work.error, work.message = ErrorCode.KAFKA_STORAGE_ERROR, str(exc)
        return
    if batch.is_idempotent:
        ctx.producers.record(
            work.topic, work.partition, work.pending.batches[0], work.pending.base_offset,
            work.pending.durable,
        )


def _refused_here(req: RequestContext, work: _Work) -> None:
    """Note a partition refused on this connection as not led here or with its storage
    unavailable (``_assign``)."""
    if req.session is not None and work.error in (
            ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
            ErrorCode.KAFKA_STORAGE_ERROR):
        req.session.refused_here(work.topic, work.partition)


def _txn_error(ctx: HandlerContext, work: _Work, batch: BatchHeader) -> ErrorCode:
    """Whether a transactional batch belongs to an ongoing transaction holding the
    partition, checked in the step that assigns its offset (DESIGN.md invariant 7)."""
    if ctx.transactions is not None:  # the coordinator is here: its state decides
        return ErrorCode(ctx.transactions.verify_produce(
            work.topic, work.partition, batch.producer_id, batch.producer_epoch))
    if work.guard is not None:  # verified by the coordinator elsewhere (``_verify_remote``)
        if ctx.producers.txn_guards.holds(work.topic, work.partition, batch.producer_id, work.guard):
            return ErrorCode.NONE
        work.message = "the transaction ended in this partition while the batch was verified"
        return ErrorCode.INVALID_TXN_STATE
    if ctx.cluster is None:
        return ErrorCode.NONE  # no transactions wired (an embedded test gateway)
    work.message = "the transaction coordinator is moving; retry"
    return ErrorCode.NOT_ENOUGH_REPLICAS


def _verify_answer(code: int) -> ErrorCode:
    """A verification answer as a Produce error: Kafka answers NOT_ENOUGH_REPLICAS
    (retriable) while the coordinator cannot answer, and keeps the fatal ones."""
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code in (ErrorCode.NONE, ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_EPOCH,
                ErrorCode.INVALID_PRODUCER_ID_MAPPING):
        return ErrorCode(code)
    return ErrorCode.NOT_ENOUGH_REPLICAS


def _transactional(works: list[_Work]) -> dict[tuple[int, int], list[_Work]]:
    """The partitions still going with a transactional batch, by producer id and epoch."""
    out: dict[tuple[int, int], list[_Work]] = {}
    for work in works:
        batch = work.batch
        if work.error == ErrorCode.NONE and batch is not None and batch.is_transactional:
            out.setdefault((batch.producer_id, batch.producer_epoch), []).append(work)
    return out


async def _add_local(ctx: HandlerContext, works: list[_Work], transactional_id: str | None) -> None:
    """Produce v12+ (transaction version 2, KIP-890) with the coordinator on this node:
    it adds the batches' partitions to the transaction, beginning it if need be, in
    place of the client's AddPartitionsToTxn (``_assign`` then checks as for v1)."""
    coord = ctx.transactions
    if coord is None or transactional_id is None:
        return
    for (pid, epoch), adding in _transactional(works).items():
        try:
            code = await coord.add_partitions(
                transactional_id, pid, epoch, [(w.topic, w.partition) for w in adding], tv2=True)
        except Exception:  # noqa: BLE001 - the coordinator's table cannot be written now
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = _verify_answer(code)
        if error != ErrorCode.NONE:
            for work in adding:
                work.error, work.message = error, f"adding the partition to the transaction: {ErrorCode(code).name}"


async def _verify_remote(
    ctx: HandlerContext, works: list[_Work], transactional_id: str | None, *, add: bool = False
) -> None:
    """Cluster mode, the transaction coordinator on another node: each transactional
    batch's transaction verified there once per partition (``gateway/log/txn_guards.py``);
    with ``add`` (Produce v12+, transaction version 2) the coordinator adds the partition
    to the transaction instead of only checking it."""
    verifier = ctx.txn_verifier
    if ctx.transactions is not None or verifier is None:
        return
    asking: dict[tuple[int, int], list[_Work]] = {}
    for work in works:
        batch = work.batch
        if work.error != ErrorCode.NONE or batch is None or not batch.is_transactional:
            continue
        work.guard = ctx.producers.txn_guards.guard(
            work.topic, work.partition, batch.producer_id, batch.producer_epoch)
        if not work.guard.verified:
            asking.setdefault((batch.producer_id, batch.producer_epoch), []).append(work)
    for (pid, epoch), asked in asking.items():
        if transactional_id is None:
            answers = {}
        else:
            answers = await verifier.verify(
                transactional_id, pid, epoch, [(w.topic, w.partition) for w in asked], add=add)
        for work in asked:
            code = answers.get((work.topic, work.partition), ErrorCode.INVALID_TXN_STATE)
            error = _verify_answer(code)
            if error == ErrorCode.NONE:
                assert work.guard is not None
                work.guard.verified = True
            else:
                work.error = error
                work.message = f"transaction verification: {ErrorCode(code).name}" if (
                    transactional_id is not None) else "a transactional batch without a transactional id"


def _waiting(work: _Work) -> asyncio.Future[None] | None:
    if work.duplicate is not None:
        return work.duplicate.durable
    return work.pending.durable if work.pending is not None else None


async def _settled(works: list[_Work], timeout_s: float) -> None:
    """Wait until every partition's append is durable or failed, or ``timeout_s``.

    A pending append calls back synchronously when it settles, so the handler resumes
    one event-loop hop after durability (``asyncio.wait`` takes two, and under load each
    hop waits for the rest of a busy loop iteration)."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    remaining = 0

    def one_settled(_: object = None) -> None:
        nonlocal remaining
        remaining -= 1
        if remaining == 0 and not waiter.done():
            waiter.set_result(None)

    for work in works:
        if work.duplicate is not None:
            fut = work.duplicate.durable
            if fut is not None and not fut.done():
                remaining += 1
                fut.add_done_callback(one_settled)
        elif work.pending is not None and not work.pending.durable.done():
            remaining += 1
            if work.pending.on_settled is None:
                work.pending.on_settled = []
            work.pending.on_settled.append(one_settled)
    if remaining == 0:
        return

    def time_out() -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = loop.call_later(timeout_s, time_out)
    try:
        await waiter
    finally:
        timer.cancel()
        for work in works:
            if work.duplicate is not None and work.duplicate.durable is not None:
                work.duplicate.durable.remove_done_callback(one_settled)
            elif work.pending is not None and work.pending.on_settled:
                if one_settled in work.pending.on_settled:
                    work.pending.on_settled.remove(one_settled)


def _outcome(work: _Work) -> tuple[ErrorCode, int]:
    """The answer for a partition once its wait is over (done or timed out)."""
    if work.error != ErrorCode.NONE:
        return work.error, -1
    base = work.duplicate.base_offset if work.duplicate is not None else (
        work.pending.base_offset if work.pending is not None else -1
    )
    waiting = _waiting(work)
    if waiting is not None:
        if not waiting.done():
            work.message = "not durable within the request's timeout"
            return ErrorCode.REQUEST_TIMED_OUT, -1
        if not waiting.cancelled() and isinstance(waiting.exception(), LeaderMovedError):
            work.message = str(waiting.exception())
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
        if waiting.cancelled() or waiting.exception() is not None:
            cause = "cancelled" if waiting.cancelled() else str(waiting.exception())
            work.message = f"the append failed: {cause}"
            return ErrorCode.KAFKA_STORAGE_ERROR, -1
    return ErrorCode.NONE, base


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    works: list[_Work] = []
    for topic in request.topic_data:
        for part in topic.partition_data:
            works.append(_Work(topic.name, part.index, part.records, part.head))
    if request.acks not in (0, 1, -1):
        for work in works:
            work.error = ErrorCode.INVALID_REQUIRED_ACKS
    else:
        refused: dict[str, str | None] = {}
        for n, work in enumerate(works):
            if n % PARTITIONS_PER_STEP == PARTITIONS_PER_STEP - 1:
                # Later requests of this connection wait for ``req.release()``, so this
                # keeps their order; a loop step per slice of a request to many partitions.
                await asyncio.sleep(0)
            # Kafka checks WRITE per topic: the allowed topics are appended all the same.
            if work.topic not in refused:
                refused[work.topic] = refusal(
                    ctx.security, req.session, Operation.WRITE, ResourceType.TOPIC, work.topic)
            why = refused[work.topic]
            if why is not None:
                work.error, work.message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, why
                continue
            _validate(ctx, work)
        cluster = ctx.cluster
        not_led = req.session.refused_leader if req.session is not None else set()
        for n, work in enumerate(works):
            if n % PARTITIONS_PER_STEP == PARTITIONS_PER_STEP - 1:
                await asyncio.sleep(0)
            if work.plog is not None and cluster is not None:
                work.error = await cluster.partition_error(work.topic, work.partition)
                if work.error != ErrorCode.NONE:
                    work.batch = work.plog = None
                    continue
                # The log opened before the check may predate this node's takeover.
                work.plog = ctx.logs.get(work.topic, work.partition)
            if work.plog is not None:
                try:
                    await work.plog.ensure_segment()
                except Exception as exc:  # controller unreachable or stream gone
                    work.error, work.message = ErrorCode.NOT_LEADER_OR_FOLLOWER, repr(exc)
        implicit = req.api_version >= TV2_VERSION
        if implicit:
            await _add_local(ctx, works, request.transactional_id)
        await _verify_remote(ctx, works, request.transactional_id, add=implicit)
        # Each partition's check, offset assignment and submission is one synchronous
        # step (``_assign``); later requests of this connection wait for the release, and
        # a request to many partitions submits a slice per loop step (each slice then
        # reaches Tier-1, and its completions come back, as a frame of its own).
        for n, work in enumerate(works):
            if n % PARTITIONS_PER_STEP == PARTITIONS_PER_STEP - 1:
                await asyncio.sleep(0)
            if cluster is not None and work.plog is not None and work.plog.retired:
                # Leadership moved meanwhile (gateway/cluster/leadership.py).
                work.error, work.batch, work.plog = ErrorCode.NOT_LEADER_OR_FOLLOWER, None, None
            if work.error == ErrorCode.NONE and work.batch is not None:
                _assign(ctx, work, not_led)
            _refused_here(req, work)  # whichever step refused it, ``_assign`` included
    req.release()
    if request.acks == 0:
        return None
    timeout_s = min(max(request.timeout_ms, 0), ctx.config.fetch_max_wait_ms_max) / 1000
    await _settled(works, max(timeout_s, 0.001))
    by_topic: dict[str, list[PartitionProduceResult]] = {}
    leaders: dict[int, tuple[str, int]] = {}
    for n, work in enumerate(works):
        if n % PARTITIONS_PER_STEP == PARTITIONS_PER_STEP - 1:
            await asyncio.sleep(0)  # the answer to many partitions: a slice per loop step
        error, base = _outcome(work)
        start = work.plog.log_start_offset if work.plog is not None else -1
        current = None
        if error == ErrorCode.NOT_LEADER_OR_FOLLOWER and ctx.cluster is not None:
            current = await _current_leader(ctx, req, work.topic, work.partition, leaders)
        by_topic.setdefault(work.topic, []).append(
            PartitionProduceResult(
                work.partition, error, base, start,
                work.message if error != ErrorCode.NONE else None, work.append_time_ms,
                current, work.record_errors if error != ErrorCode.NONE else (),
            )
        )
    endpoints = [(node, host, port) for node, (host, port) in sorted(leaders.items())]
    return EncodedBody([
        encode_produce_response(req.api_version, list(by_topic.items()), node_endpoints=endpoints)
    ])


async def _current_leader(ctx: HandlerContext, req: RequestContext, topic: str, partition: int,
                          addresses: dict[int, tuple[str, int]]) -> tuple[int, int] | None:
    """The partition's leader and epoch for a NOT_LEADER_OR_FOLLOWER answer (KIP-951),
    its address noted in ``addresses``; None when no leader is known."""
    cluster = ctx.cluster
    if cluster is None or ctx.leader_epochs is None:
        return None
    try:
        leader, epoch = await cluster.leader_and_epoch(topic, partition)
    except Exception:  # noqa: BLE001 - metadata unreachable: the client asks Metadata
        return None
    listener = req.session.listener.name if req.session else None
    address = None if leader is None else cluster.kafka_address(leader, listener)
    if leader is None or address is None:
        return None
    addresses[leader] = address
    return leader, epoch
