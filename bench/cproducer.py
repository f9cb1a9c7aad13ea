"""The C producer (`bench/cproducer.c`): built on first use, run as one produce phase.

With 100 B records a Python producer's call per record makes the client the limit; this
one is librdkafka alone. It is compiled with `cc` into the bench cache and linked against
the librdkafka that confluent-kafka's wheel bundles (`confluent_kafka.libs/`), so the
Python and C producers run the same librdkafka and a fresh machine needs only PyPI's
wheel and a C compiler (the wheel ships no header: the source declares what it calls).
"""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.procstat import cpu_seconds, machine_busy, machine_cpu_ticks, machine_disk_bytes
from bench.systems import DEFAULT_CACHE_DIR
from bench.workers import READY_TIMEOUT_S, WorkloadError
from bench.workloads import ClientTuning, PhaseResult

SOURCE = Path(__file__).with_name("cproducer.c")


def librdkafka_path() -> Path:
    """The librdkafka shared object confluent-kafka's wheel bundles."""
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka-*.so*"))
    if not found:
        raise WorkloadError(
            f"no librdkafka in {libs}: the C producer links the one confluent-kafka's "
            "manylinux wheel bundles (pip install confluent-kafka from PyPI)"
        )
    return found[0]


def build(cache_dir: Path = DEFAULT_CACHE_DIR) -> Path:
    """The compiled producer, built once per (source, librdkafka) into `cache_dir`."""
    lib = librdkafka_path()
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise WorkloadError("no C compiler (cc) to build bench/cproducer.c")
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + str(lib).encode()).hexdigest()[:16]
    exe = cache_dir / "cproducer" / key / "cproducer"
    if exe.exists():
        return exe
    exe.parent.mkdir(parents=True, exist_ok=True)
    tmp = exe.with_name(f"cproducer.{os.getpid()}.tmp")
    cmd = [cc, "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", str(tmp), str(SOURCE),
           str(lib), f"-Wl,-rpath,{lib.parent}"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise WorkloadError(f"building the C producer failed: {' '.join(cmd)}\n{done.stderr}")
    tmp.replace(exe)  # atomic: a concurrent build never runs a half-written file
    return exe


def _properties(tuning: ClientTuning, bootstrap: str) -> list[str]:
    conf = tuning.producer(bootstrap)
    conf.pop("bootstrap.servers")
    return [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in conf.items()]


def _read_line(proc: subprocess.Popen[str], deadline: float, what: str, log: Any) -> str:
    """The next line the producer prints, or an error if it exits or time runs out first."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkloadError(f"the C producer timed out {what}")
            if sel.select(timeout=min(left, 1.0)):
                line = proc.stdout.readline()
                if line:
                    return line
                break
    code = proc.wait(10)
    log.seek(0)
    stderr = log.read().decode(errors="replace")[-2000:]
    raise WorkloadError(f"the C producer exited {code} {what}: {stderr.strip()}")


def run(
    exe: Path,
    bootstrap: str,
    tuning: ClientTuning,
    topic: str,
    record_bytes: int,
    records: int,
    server_pid: int,
    timeout_s: float,
) -> tuple[PhaseResult, dict[str, Any]]:
    """`records` records of `record_bytes` to `topic`, acks=all, from one C producer; the
    server's CPU is read when the producer starts and when it reports."""
    cmd = [str(exe), bootstrap, topic, str(records), str(record_bytes),
           *_properties(tuning, bootstrap)]  # fmt: skip
    # librdkafka logs to stderr from its own threads: a file, never a pipe left unread.
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
    )
    try:
        ready_by = time.monotonic() + min(timeout_s, READY_TIMEOUT_S)
        _read_line(proc, ready_by, "before it was ready", log)
        cpu0, ticks0, disk0 = cpu_seconds(server_pid), machine_cpu_ticks(), machine_disk_bytes()
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        line = _read_line(proc, time.monotonic() + timeout_s, "during the phase", log)
        cpu1, ticks1, disk1 = cpu_seconds(server_pid), machine_cpu_ticks(), machine_disk_bytes()
        figures: dict[str, Any] = json.loads(line)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout, log):
            if stream is not None:
                stream.close()
    if figures["failures"] or figures["undelivered"] or code != 0:
        raise WorkloadError(
            f"{figures['failures']} records failed, {figures['undelivered']} undelivered, "
            f"exit status {code} (first: {figures['first_failure']})"
        )
    busy, steal = machine_busy(ticks0, ticks1)
    result = PhaseResult(
        records,
        records * record_bytes,
        figures["wall_s"],
        cpu1 - cpu0,
        client_cpu_s=figures["cpu_s"],
        machine_busy=busy,
        machine_steal=steal,
        disk_read_bytes=disk1[0] - disk0[0],
        disk_written_bytes=disk1[1] - disk0[1],
    )
    return result, figures


# -- report ------------------------------------------------------------------------------

WORKLOAD_PREFIX = "cproduce-"
# Issue 37 goal 1: throughput at 100 B against the peer, and server CPU per GB at most
# half the peer's (peer s/GB over tidegate's >= 2) at 100 B and 1 KB.
THROUGHPUT_GOAL = 1.5
CPU_GOAL = 2.0


def workload(size: int, partitions: int) -> str:
    return f"{WORKLOAD_PREFIX}{size}B-p{partitions}"


def _label(size: int, small: int) -> str:
    return "100b" if size == small else "1k"


def goal_ratios(
    med: dict[str, Any], small: int, large: int, partitions: list[int]
) -> tuple[dict[str, float | None], dict[str, tuple[str, float]]]:
    """The C producer phase's figures in the issue's terms, and their targets."""
    from bench.report import PEER, TIDEGATE

    def metric(system: str, w: str, key: str) -> float | None:
        v = med.get(system, {}).get(w, {}).get(key)
        return None if v is None else float(v)

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None or b == 0 else a / b

    ratios: dict[str, float | None] = {}
    targets: dict[str, tuple[str, float]] = {}
    for size in (small, large):
        label = _label(size, small)
        for parts in partitions:
            w = workload(size, parts)
            if not any(w in rows for rows in med.values()):
                continue
            key = f"cproduce_{label}_p{parts}"
            ratios[f"{key}_vs_tansu_memory"] = ratio(
                metric(TIDEGATE, w, "mb_per_s"), metric(PEER, w, "mb_per_s")
            )
            ratios[f"{key}_cpu_per_gb_tansu_over_tidegate"] = ratio(
                metric(PEER, w, "cpu_s_per_gb"), metric(TIDEGATE, w, "cpu_s_per_gb")
            )
            if size == small:
                targets[f"{key}_vs_tansu_memory"] = (">=", THROUGHPUT_GOAL)
            targets[f"{key}_cpu_per_gb_tansu_over_tidegate"] = (">=", CPU_GOAL)
    return ratios, targets


def markdown(doc: dict[str, Any]) -> str:
    """The phase's table (every system), the goals, and each compared commit's ratios."""
    from bench.report import TIDEGATE

    med: dict[str, Any] = doc["medians"]
    systems = [s for s in doc["systems"] if s in med]
    phases = sorted({w for s in systems for w in med[s] if w.startswith(WORKLOAD_PREFIX)})
    if not phases:
        return ""
    lines = [
        "## C producer (issue 37 goal 1: librdkafka alone, acks=all, one process)",
        "",
        "| workload | system | MB/s | rec/s | server CPU s/GB | producer cores | machine busy % |",
        "|---|---|---|---|---|---|---|",
    ]
    for w in phases:
        for s in systems:
            row = med[s].get(w)
            if row is None:
                continue
            busy = row.get("machine_busy")
            lines.append(
                f"| {w} | {s} | {row['mb_per_s']:.1f} | {row['records_per_s']:.0f} | "
                f"{row['cpu_s_per_gb']:.1f} | {row.get('client_cores', 0):.2f} | "
                f"{'–' if busy is None else f'{100 * busy:.0f}'} |"
            )
    ratios = doc["ratios"]
    lines += ["", "| goal | figure | target | met |", "|---|---|---|---|"]
    for key, value in ratios.items():
        if not key.startswith("cproduce_") or not isinstance(value, float | int | None):
            continue
        target = ratios["targets"].get(key, "(not a goal)")
        met = ratios["goals_met"].get(key)
        lines.append(
            f"| {key} | {'–' if value is None else f'{value:.2f}'} | {target} | "
            f"{'–' if met is None else ('yes' if met else 'no')} |"
        )
    for s in systems:
        if not s.startswith(f"{TIDEGATE}@"):
            continue
        parts = []
        for w in phases:
            now, then = med.get(TIDEGATE, {}).get(w), med[s].get(w)
            if now and then and then["mb_per_s"] and now["cpu_s_per_gb"]:
                parts.append(
                    f"{w} {now['mb_per_s'] / then['mb_per_s']:.2f}× MB/s, "
                    f"{then['cpu_s_per_gb'] / now['cpu_s_per_gb']:.2f}× leaner"
                )
        if parts:
            lines.append(f"\nWorking tree against {s} (same rounds): " + "; ".join(parts) + ".")
    return "\n".join(lines) + "\n"
