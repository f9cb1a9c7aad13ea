"""The options of ``format("tidegate")``, named as Spark's Kafka source and sink name them.

Offsets use Spark's Kafka JSON shape: ``{"topic": {"0": 23, "1": -1}}`` with ``-2`` for
earliest and ``-1`` for latest; the same shape is what the checkpoint's offset log holds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

EARLIEST = -2
LATEST = -1

#: Spark's Kafka offsets: topic -> partition (as a string) -> offset.
Offsets = dict[str, dict[str, int]]


class OptionError(ValueError):
    """An option a user gave that can never work (the message names it)."""


@dataclass(frozen=True)
class OffsetSpec:
    """``earliest``, ``latest`` or per-partition offsets (``-2``/``-1`` inside allowed)."""

    default: int
    explicit: Offsets = field(default_factory=dict)


@dataclass(frozen=True)
class ReadOptions:
    bootstrap: str
    #: ``kafka.*`` options without the prefix (librdkafka takes Kafka's names).
    client: dict[str, str]
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting: OffsetSpec = OffsetSpec(EARLIEST)
    ending: OffsetSpec = OffsetSpec(LATEST)
    #: topic -> partition -> timestamp (ms); ``startingTimestamp`` gives ``"*"`` for all.
    starting_by_timestamp: dict[str, dict[str, int]] | None = None
    starting_timestamp_strategy_latest: bool = False
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    batch_rows: int = 8_192

    def matches(self, topic: str) -> bool:
        if self.subscribe:
            return topic in self.subscribe
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return self.assign is not None and topic in self.assign


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise OptionError(f"option {name} must be true or false, not {raw!r}")


def _positive(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name} must be a positive integer, not {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option {name} must be a positive integer, not {raw!r}")
    return value


def _json(name: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name} is not valid JSON ({exc}): {raw!r}") from None


def parse_offsets_json(name: str, raw: str) -> Offsets:
    """``{"t": {"0": 5}}`` checked: an object of objects of integers."""
    value = _json(name, raw)
    ok = isinstance(value, dict) and all(
        isinstance(parts, dict)
        and all(isinstance(o, int) and not isinstance(o, bool) and p.lstrip("-").isdigit()
                for p, o in parts.items())
        for parts in value.values()
    )
    if not ok:
        raise OptionError(f'option {name} must look like {{"topic":{{"0":23,"1":-1}}}}: {raw!r}')
    return {t: {str(int(p)): int(o) for p, o in parts.items()} for t, parts in value.items()}


def _offset_spec(options: Mapping[str, str], name: str, default: int, allowed: set[int]) -> OffsetSpec:
    raw = options.get(name)
    if raw is None:
        return OffsetSpec(default)
    word = raw.strip().lower()
    if word == "earliest" and EARLIEST in allowed:
        return OffsetSpec(EARLIEST)
    if word == "latest" and LATEST in allowed:
        return OffsetSpec(LATEST)
    if not word.startswith("{"):
        names = " or ".join(n for n, v in (("earliest", EARLIEST), ("latest", LATEST)) if v in allowed)
        raise OptionError(f"option {name} must be {names} or a JSON object of offsets, not {raw!r}")
    offsets = parse_offsets_json(name, raw)
    for topic, parts in offsets.items():
        for part, off in parts.items():
            if off < 0 and off not in allowed:
                raise OptionError(f"option {name}: offset {off} of {topic}-{part} is not allowed here")
    return OffsetSpec(default, offsets)


class _Options(dict[str, str]):
    """Option names are case-insensitive in Spark (its own map lower-cases them)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__((k.lower(), v) for k, v in options.items())

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())


#: The scope whose streams are the Kafka topics (``tidegate serve``'s default).
KAFKA_SCOPE = "kafka"
_CUT_WORDS = {"earliest": "earliest", "latest": "latest"}


def _stream_options(options: Mapping[str, str]) -> Mapping[str, str]:
    """``scope``/``stream``/``start_stream_cut``/``end_stream_cut`` as the Kafka options
    they mean for the Kafka scope's streams (other scopes: ``stream_options``)."""
    scope, stream = options.get("scope"), options.get("stream")
    if scope is None and stream is None:
        for name in ("start_stream_cut", "end_stream_cut"):
            if options.get(name) is not None:
                raise OptionError(f"option {name} needs the options scope and stream")
        return options
    if not scope or not stream:
        raise OptionError("the options scope and stream go together")
    kafka_scope = options.get("kafkaScope") or KAFKA_SCOPE
    if scope != kafka_scope:
        raise OptionError(f"scope {scope!r} is not the Kafka scope {kafka_scope!r}: its streams "
                          "are read with the option controller (stream_options)")
    if any(options.get(k) for k in ("subscribe", "subscribePattern", "assign")):
        raise OptionError("option stream names the topic: leave out subscribe, subscribePattern, assign")
    out = _Options(options)
    out["subscribe"] = stream
    for cut, kafka_name in (("start_stream_cut", "startingOffsets"), ("end_stream_cut", "endingOffsets")):
        raw = options.get(cut)
        if raw is None:
            continue
        if raw.strip().lower() not in _CUT_WORDS:
            raise OptionError(f"option {cut}: a Kafka scope stream takes earliest or latest "
                              f"(or {kafka_name} in Kafka offsets), not {raw!r}")
        out[kafka_name.lower()] = _CUT_WORDS[raw.strip().lower()]
    return out


def read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    """The read options, checked; ``options`` is Spark's case-insensitive option map."""
    bootstrap = options.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise OptionError("option kafka.bootstrap.servers is required")
    client = {k[len("kafka."):]: v for k, v in options.items() if k.lower().startswith("kafka.")}
    client.pop("bootstrap.servers", None)
    for forbidden in ("group.id", "auto.offset.reset", "enable.auto.commit",
                      "key.deserializer", "value.deserializer"):
        if forbidden in client:
            raise OptionError(f"option kafka.{forbidden} is not supported: the source tracks offsets itself")
    options = _stream_options(_Options(options))
    kinds = [k for k in ("subscribe", "subscribePattern", "assign") if options.get(k)]
    if len(kinds) != 1:
        raise OptionError("exactly one of the options subscribe, subscribePattern, assign is "
                          f"required (got {', '.join(kinds) or 'none'})")
    subscribe: tuple[str, ...] = ()
    pattern = None
    assign = None
    if kinds[0] == "subscribe":
        subscribe = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OptionError("option subscribe names no topic")
    elif kinds[0] == "subscribePattern":
        pattern = options["subscribePattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option subscribePattern is not a regular expression: {exc}") from None
    else:
        raw = _json("assign", options["assign"])
        if not (isinstance(raw, dict) and all(
            isinstance(ps, list) and all(isinstance(p, int) and p >= 0 for p in ps) for ps in raw.values()
        )):
            raise OptionError('option assign must look like {"topic":[0,1]}')
        assign = {t: tuple(ps) for t, ps in raw.items()}
    starting = _offset_spec(options, "startingOffsets", LATEST if streaming else EARLIEST,
                            {EARLIEST, LATEST} if streaming else {EARLIEST})
    if streaming and options.get("endingOffsets") is not None:
        raise OptionError("option endingOffsets is for batch queries only")
    ending = _offset_spec(options, "endingOffsets", LATEST, {LATEST})
    by_ts = None
    if options.get("startingOffsetsByTimestamp"):
        by_ts = parse_offsets_json("startingOffsetsByTimestamp", options["startingOffsetsByTimestamp"])
    elif options.get("startingTimestamp"):
        ts = _positive(options, "startingTimestamp")
        by_ts = {"*": {"*": int(ts or 0)}}
    strategy = (options.get("startingOffsetsByTimestampStrategy") or "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError("option startingOffsetsByTimestampStrategy must be error or latest")
    max_per_trigger = _positive(options, "maxOffsetsPerTrigger")
    if max_per_trigger is not None and not streaming:
        raise OptionError("option maxOffsetsPerTrigger is for streaming queries only")
    return ReadOptions(
        bootstrap=bootstrap, client=client, subscribe=subscribe, pattern=pattern, assign=assign,
        starting=starting, ending=ending, starting_by_timestamp=by_ts,
        starting_timestamp_strategy_latest=strategy == "latest",
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=_positive(options, "minPartitions"),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        poll_timeout_ms=_positive(options, "kafkaConsumer.pollTimeoutMs") or 120_000,
        batch_rows=_positive(options, "arrowBatchRows") or 8_192,
    )


@dataclass(frozen=True)
class WriteOptions:
    bootstrap: str
    client: dict[str, str]
    topic: str | None
    exactly_once: bool
    #: Names the query's transactional ids and marker groups (default: Spark's query id).
    transactional_id_prefix: str | None
    transaction_timeout_ms: int


def write_options(options: Mapping[str, str]) -> WriteOptions:
    options = _Options(options)
    bootstrap = options.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise OptionError("option kafka.bootstrap.servers is required")
    client = {k[len("kafka."):]: v for k, v in options.items() if k.lower().startswith("kafka.")}
    client.pop("bootstrap.servers", None)
    exactly_once = _bool(options, "exactly_once", False)
    return WriteOptions(
        bootstrap=bootstrap, client=client, topic=options.get("topic") or None,
        exactly_once=exactly_once,
        transactional_id_prefix=options.get("transactionalIdPrefix") or None,
        transaction_timeout_ms=_positive(options, "transactionTimeoutMs") or 600_000,
    )
