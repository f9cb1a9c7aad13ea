"""Process plumbing of the Kafka workloads: client processes started together behind a
gate, one report each collected, and what the server and the machine used meanwhile.

Clients run in `spawn`ed processes so that several producers use several cores and the
parent (which samples the server's /proc figures) never shares librdkafka threads with
them.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
from dataclasses import dataclass
from typing import Any

from bench.procstat import cpu_seconds, machine_busy, machine_cpu_ticks, machine_disk_bytes

SPAWN = mp.get_context("spawn")
# How long client processes may take to start, import and connect before a phase.
READY_TIMEOUT_S = 60.0


class WorkloadError(RuntimeError):
    """A client saw errors or missed data: the figures of that phase are not valid."""


@dataclass(frozen=True)
class Gate:
    """Starts client processes together and carries their one report each back.

    Each worker connects, then says it is ready and waits for `go`; the parent opens the
    gate once all are ready, so connection set-up is never timed, and notices a worker
    that died before it got ready instead of waiting out a timeout.
    """

    ready: Any  # multiprocessing Queue of pids
    go: Any  # multiprocessing Event
    reports: Any  # multiprocessing Queue of dicts

    @staticmethod
    def new() -> Gate:
        return Gate(SPAWN.Queue(), SPAWN.Event(), SPAWN.Queue())

    def ready_then_wait(self, timeout_s: float) -> None:
        self.ready.put(os.getpid())
        if not self.go.wait(timeout_s):
            raise TimeoutError("the phase never started")

    def report(self, figures: dict[str, Any]) -> None:
        self.reports.put(figures)


@dataclass(frozen=True)
class _WorkerResults:
    reports: list[dict[str, Any]]
    server_cpu_s: float
    wall_s: float
    machine_busy: float = 0.0
    machine_steal: float = 0.0
    disk_read_bytes: int = 0
    disk_written_bytes: int = 0


def _collect(q: Any, count: int, procs: list[Any], timeout_s: float, what: str) -> list[Any]:
    """`count` items from `q`; fails as soon as a worker exits non-zero or time runs out."""
    items: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(items) < count:
        try:
            items.append(q.get(timeout=0.2))
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise WorkloadError(f"client process exited {dead[0].exitcode} {what}") from None
            if time.monotonic() > deadline:
                raise WorkloadError(f"client processes timed out {what}") from None
    return items


def run_workers(procs: list[Any], gate: Gate, server_pid: int, timeout_s: float) -> _WorkerResults:
    """Start `procs`, release them together, collect one report each, charge server CPU.

    The server's CPU is read when the gate opens and when the last report arrives.
    """
    for p in procs:
        p.start()
    try:
        _collect(
            gate.ready, len(procs), procs, min(timeout_s, READY_TIMEOUT_S), "before it was ready"
        )
        cpu0, ticks0, disk0 = cpu_seconds(server_pid), machine_cpu_ticks(), machine_disk_bytes()
        t0 = time.monotonic()
        gate.go.set()
        reports = _collect(gate.reports, len(procs), procs, timeout_s, "during the phase")
        cpu1, ticks1, disk1 = cpu_seconds(server_pid), machine_cpu_ticks(), machine_disk_bytes()
        wall_s = time.monotonic() - t0
        for p in procs:  # they have reported; give them time to close their clients
            p.join(timeout=10)
        return _WorkerResults(
            reports,
            cpu1 - cpu0,
            wall_s,
            *machine_busy(ticks0, ticks1),
            disk_read_bytes=disk1[0] - disk0[0],
            disk_written_bytes=disk1[1] - disk0[1],
        )
    finally:
        for p in procs:  # on failure or interruption nothing is waited for
            if p.is_alive():
                p.kill()
            p.join()
