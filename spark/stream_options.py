"""Options of ``format("tidegate")`` for the streams of scopes other than the Kafka one,
named as Pravega's Spark connector names them: ``controller`` (the gRPC address),
``scope``, ``stream``, ``start_stream_cut``, ``end_stream_cut``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tidegate.protocol import stream_cut
from tidegate.spark.options import KAFKA_SCOPE, OptionError, _bool, _positive

EARLIEST_CUT = "earliest"
LATEST_CUT = "latest"
#: A position: ``earliest``, ``latest`` or a cut (segment id -> offset).
CutSpec = str | dict[int, int]

#: Pravega's connector's schema, and the routing key tidegate stores with each event.
STREAM_SCHEMA = "event binary, scope string, stream string, segment_id long, offset long, routing_key string"


@dataclass(frozen=True)
class StreamReadOptions:
    controller: str
    scope: str
    stream: str
    start: CutSpec
    #: None: a streaming query without an end (it follows the tail).
    end: CutSpec | None
    fail_on_data_loss: bool = True
    batch_rows: int = 8_192
    read_bytes: int = 1 << 20
    username: str | None = None
    password: str | None = None
    #: A CA certificate file (PEM): the gRPC port speaks TLS.
    tls_ca: str | None = None


def is_stream_read(options: Mapping[str, str]) -> bool:
    """Whether the options name a stream of a scope other than the Kafka one."""
    scope = options.get("scope")
    return bool(scope) and scope != (options.get("kafkaScope") or KAFKA_SCOPE)


def _cut(options: Mapping[str, str], name: str, default: str, scope: str, stream: str) -> CutSpec:
    raw = (options.get(name) or default).strip()
    if raw.lower() in (EARLIEST_CUT, LATEST_CUT):
        return raw.lower()
    try:
        cut_scope, cut_stream, cut = stream_cut.from_text(raw)
    except ValueError as exc:
        raise OptionError(f"option {name} must be earliest, latest or a serialized stream cut: {exc}") from None
    if (cut_scope, cut_stream) != (scope, stream):
        raise OptionError(f"option {name} is a cut of {cut_scope}/{cut_stream}, not of {scope}/{stream}")
    return cut


def stream_read_options(options: Mapping[str, str], streaming: bool) -> StreamReadOptions:
    """The checked options; ``options`` is Spark's case-insensitive option map."""
    controller = (options.get("controller") or "").strip()
    for prefix in ("tcp://", "tls://"):
        controller = controller.removeprefix(prefix)
    if not controller:
        raise OptionError("option controller (the gRPC address host:port) is required to read "
                          "a stream of a scope other than the Kafka one")
    scope, stream = options.get("scope") or "", options.get("stream") or ""
    if not stream:
        raise OptionError("the options scope and stream go together")
    for kafka_only in ("subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets",
                       "maxOffsetsPerTrigger"):
        if options.get(kafka_only) is not None:
            raise OptionError(f"option {kafka_only} is for Kafka topics; a stream takes "
                              "start_stream_cut and end_stream_cut")
    start = _cut(options, "start_stream_cut", LATEST_CUT if streaming else EARLIEST_CUT, scope, stream)
    end: CutSpec | None = None
    if options.get("end_stream_cut") is not None or not streaming:
        end = _cut(options, "end_stream_cut", LATEST_CUT, scope, stream)
    if end == EARLIEST_CUT:
        raise OptionError("option end_stream_cut must be latest or a serialized stream cut")
    if start == LATEST_CUT and not streaming:
        raise OptionError("option start_stream_cut latest reads nothing in a batch query")
    return StreamReadOptions(
        controller=controller, scope=scope, stream=stream, start=start, end=end,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        batch_rows=_positive(options, "arrowBatchRows") or 8_192,
        read_bytes=min(_positive(options, "readBytes") or 1 << 20, 2 << 20),
        username=options.get("controller.username") or None,
        password=options.get("controller.password") or None,
        tls_ca=options.get("controller.tls.ca.location") or None,
    )


@dataclass(frozen=True)
class StreamWriteOptions:
    #: The stream and how to reach it (the cut fields are unused).
    read: StreamReadOptions
    exactly_once: bool
    #: Names the decision stream (default: Spark's query id).
    prefix: str | None
    #: The stream transactions' lease: at most the controller's ``txn_lease_ms_max``.
    transaction_timeout_ms: int


def stream_write_options(options: Mapping[str, str]) -> StreamWriteOptions:
    for kafka_only in ("topic", "kafka.bootstrap.servers"):
        if options.get(kafka_only) is not None:
            raise OptionError(f"option {kafka_only} is for Kafka topics; a stream sink takes controller, "
                              "scope and stream")
    read = stream_read_options({k: v for k, v in options.items() if "stream_cut" not in k.lower()},
                               streaming=True)
    prefix = options.get("transactionalIdPrefix") or None
    if prefix is not None and not all(c.isalnum() or c in "._-" for c in prefix):
        raise OptionError("option transactionalIdPrefix must be of [A-Za-z0-9._-] for a stream sink")
    return StreamWriteOptions(
        read=read, exactly_once=_bool(options, "exactly_once", False), prefix=prefix,
        transaction_timeout_ms=_positive(options, "transactionTimeoutMs") or 600_000,
    )
