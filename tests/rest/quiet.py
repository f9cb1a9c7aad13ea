"""The controller configuration of the in-process REST and gRPC tests."""

from __future__ import annotations

from tidegate.core.controller.config import ControllerConfig

#: Background policies off: the tests drive every workflow themselves.
QUIET = ControllerConfig(
    autoscale_period_ms=0,
    retention_period_ms=0,
    txn_timeout_check_period_ms=0,
    watermark_period_ms=0,
)
