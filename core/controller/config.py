"""Controller tunables. Every period and threshold is here, named with its unit, so tests
can run the background policies in seconds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    #: Prefix of every table segment holding controller metadata.
    metadata_prefix: str = "_system/_controller"
    #: How long a workflow waits for the stream's previous workflow before giving up with
    #: ``ConflictError``.
    workflow_lock_timeout_ms: int = 30_000

    # -- auto-scaling -------------------------------------------------------------------
    #: Period of the auto-scaling check; 0 disables the background loop.
    autoscale_period_ms: int = 10_000
    #: A segment younger than this is neither split nor merged.
    autoscale_cooldown_ms: int = 60_000
    #: A segment is cold when its rate is below ``target_rate * cold_fraction``.
    autoscale_cold_fraction: float = 0.5

    # -- retention ------------------------------------------------------------------------
    #: Period of the retention check (record a StreamCut, maybe truncate); 0 disables it.
    retention_period_ms: int = 60_000
    #: Bound on the StreamCuts kept in one stream's retention set (thinned evenly in time;
    #: the oldest is kept, so long time policies still find an old enough cut).
    retention_set_max: int = 1_000

    # -- transactions ---------------------------------------------------------------------
    txn_lease_ms_default: int = 30_000
    txn_lease_ms_max: int = 600_000
    #: Period of the lease-expiry check that aborts timed-out transactions; 0 disables it.
    txn_timeout_check_period_ms: int = 1_000
    #: How long the record of a committed or aborted transaction is kept.
    txn_completed_retention_ms: int = 600_000

    # -- watermarks -----------------------------------------------------------------------
    #: Period of the watermark computation; 0 disables it.
    watermark_period_ms: int = 10_000
    #: Bound on the watermarks kept per stream (oldest dropped first).
    watermarks_max: int = 1_000
    #: A writer that has not reported a mark for this long no longer holds watermarks back.
    watermark_writer_timeout_ms: int = 60_000

    # -- key-value tables -----------------------------------------------------------------
    kvt_partitions_max: int = 1_024

    # -- validation -------------------------------------------------------------------------
    name_length_max: int = 255
    tags_max: int = 128
    tag_length_max: int = 256
    segments_per_request_max: int = 10_000
