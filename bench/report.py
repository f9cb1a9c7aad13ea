"""Medians over runs, the goal ratios of issue 6, and the Markdown / JSON / PNG outputs.

A measurement is a flat dict: `run`, `system`, `workload` (e.g. `produce-1024B-p16`,
`consume-1024B-p16`, `latency-1024B-p1`, `server`), and numeric metrics. Medians are
taken per (system, workload) over the runs that succeeded; failures are listed apart.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

TIDEGATE = "tidegate"
PEER = "tansu-memory"

# Goals of issues 6 and 37: metric key in `ratios` -> (comparison, threshold). The memory
# goal's threshold (configured cache + a fixed overhead) is known only per run; see
# goal_ratios. TLS against plaintext (issue 37, >= 0.8) is judged in bench/security.py.
GOALS: dict[str, tuple[str, float]] = {
    "produce_1k_vs_tansu_memory": (">=", 1.0),
    "produce_1k_vs_disk_fdatasync": (">=", 0.75),
    "produce_100b_records_per_s": (">=", 300_000.0),
    "consume_vs_tansu_memory": (">=", 1.2),
    "produce_p99_ms_at_rate": ("<=", 5.0),
    "txn_produce_1k_vs_plain": (">=", 0.9),
    "txn_produce_1k_per_records_vs_plain": (">=", 0.9),
}
RSS_GOAL = "tidegate_peak_rss_mb_max"

_PROFILE_ROWS = 10
# A baseline line is drawn on the throughput plot only up to this multiple of the top bar.
_BASELINE_DRAWN_MAX = 2.5
_NOT_METRICS = {"run", "system", "workload", "kind"}


def _busy(row: dict[str, Any]) -> str:
    busy, steal = row.get("machine_busy"), row.get("machine_steal")
    if busy is None or steal is None:
        return "–"
    return f"{100 * busy:.0f} ({100 * steal:.0f})"


def _disk(row: dict[str, Any]) -> str:
    written, read = row.get("disk_written_per_byte"), row.get("disk_read_per_byte")
    if written is None or read is None:
        return "–"
    return f"{written:.2f} / {read:.2f}"


def medians(measurements: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """{system: {workload: {metric: median}}} plus `runs`, the count of samples."""
    samples: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for m in measurements:
        samples[(m["system"], m["workload"])].append(m)
    out: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for (system, workload), ms in samples.items():
        keys = {
            k
            for m in ms
            for k, v in m.items()
            if k not in _NOT_METRICS and isinstance(v, int | float)
        }
        row = {k: statistics.median(m[k] for m in ms if k in m) for k in sorted(keys)}
        row["runs"] = len(ms)
        out[system][workload] = row
    return dict(out)


def _metric(med: dict[str, Any], system: str, workload: str, key: str) -> float | None:
    value = med.get(system, {}).get(workload, {}).get(key)
    return None if value is None else float(value)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def cpu_ceiling_mb_per_s(cpus: int, server_s_per_gb: float, client_s_per_gb: float) -> float:
    """The most a phase could move if all ``cpus`` ran nothing but its server and its
    clients, each at the CPU per byte it used: cpus / (server + clients s/GB). A bound
    from above: the kernel's work outside the processes (write-back, the journal, some
    of loopback's) is not counted."""
    per_gb = server_s_per_gb + client_s_per_gb
    return float("inf") if per_gb <= 0 else cpus / per_gb * 1e3


def _disk_goal_budget(
    med: dict[str, Any], workload: str, disk_mb_per_s: float | None, cpus: int | None
) -> dict[str, float | None]:
    """For the goal against the disk: the phase's CPU ceiling against the disk, and the
    server CPU per GB left for reaching the goal beside the same clients on the same
    cores (negative: the clients alone could not)."""
    ceiling = _metric(med, TIDEGATE, workload, "cpu_ceiling_mb_per_s")
    clients = _metric(med, TIDEGATE, workload, "client_cpu_s_per_gb")
    budget = None
    if cpus and clients is not None and disk_mb_per_s:
        goal_gb_per_s = GOALS["produce_1k_vs_disk_fdatasync"][1] * disk_mb_per_s / 1e3
        budget = cpus / goal_gb_per_s - clients
    return {
        "produce_1k_cpu_ceiling_vs_disk": _ratio(ceiling, disk_mb_per_s),
        "server_s_per_gb_for_disk_goal": budget,
    }


def _txn_records_workload(med: dict[str, Any], produce: str) -> str:
    """The phase committing every N records beside ``produce`` (``txn{N}r-<produce>``)."""
    for w in med.get(TIDEGATE, {}):
        if w.startswith("txn") and w.endswith(f"r-{produce}") and w[3:-len(produce) - 2].isdigit():
            return str(w)
    return f"txn0r-{produce}"


def goal_ratios(
    med: dict[str, Any],
    large: int,
    small: int,
    partitions: int,
    latency_workload: str,
    measurements: list[dict[str, Any]] | None = None,
    rss_limit_mb: float | None = None,
    cpus: int | None = None,
) -> dict[str, Any]:
    """The figures the issue's goals are stated in (None where a side is missing).

    The memory goal is judged on the largest peak RSS of any tidegate instance (not the
    median) against `rss_limit_mb`, the configured cache plus the allowed fixed overhead.
    Beside the goal against the disk, two figures that are not goals: the 1 KB produce
    phase's CPU ceiling on `cpus` against the disk, and the server CPU per GB that would
    reach the goal beside the clients as measured (`_disk_goal_budget`).
    """
    p1k, p100 = f"produce-{large}B-p{partitions}", f"produce-{small}B-p{partitions}"
    c1k = f"consume-{large}B-p{partitions}"
    tg_1k = _metric(med, TIDEGATE, p1k, "mb_per_s")
    disk = _metric(med, "baseline", "disk-fdatasync-1MiB", "mb_per_s")
    txn_records = _txn_records_workload(med, p1k)
    ratios: dict[str, Any] = {
        "produce_1k_vs_tansu_memory": _ratio(tg_1k, _metric(med, PEER, p1k, "mb_per_s")),
        "produce_1k_vs_disk_fdatasync": _ratio(tg_1k, disk),
        "produce_100b_records_per_s": _metric(med, TIDEGATE, p100, "records_per_s"),
        "consume_vs_tansu_memory": _ratio(
            _metric(med, TIDEGATE, c1k, "mb_per_s"), _metric(med, PEER, c1k, "mb_per_s")
        ),
        "produce_p99_ms_at_rate": _metric(med, TIDEGATE, latency_workload, "produce_p99_ms"),
        "tidegate_peak_rss_mb": _metric(med, TIDEGATE, "server", "peak_rss_mb"),
        "tidegate_mb_through_per_instance": _metric(med, TIDEGATE, "server", "mb_through"),
        # Transactional produce (a commit every --txn-commit-ms) against plain produce
        # of the same records in the same run.
        "txn_produce_1k_vs_plain": _ratio(
            _metric(med, TIDEGATE, f"txn-{p1k}", "mb_per_s"), tg_1k
        ),
        # The same with a commit every N records per producer (``txn{N}r-...``).
        "txn_produce_1k_per_records_vs_plain": _ratio(
            _metric(med, TIDEGATE, txn_records, "mb_per_s"), tg_1k
        ),
        **_disk_goal_budget(med, p1k, disk, cpus),
    }
    rss = [
        float(m["peak_rss_mb"])
        for m in measurements or []
        if m["system"] == TIDEGATE and m["workload"] == "server"
    ]
    ratios[RSS_GOAL] = max(rss) if rss else None
    targets = dict(GOALS)
    if rss_limit_mb is not None:
        targets[RSS_GOAL] = ("<=", rss_limit_mb)
    met: dict[str, bool | None] = {}
    for key, (op, threshold) in targets.items():
        v = ratios[key]
        met[key] = None if v is None else (v >= threshold if op == ">=" else v <= threshold)
    ratios["goals_met"] = met
    ratios["targets"] = {k: f"{op} {threshold:g}" for k, (op, threshold) in targets.items()}
    ratios["basis"] = {
        "produce": p1k,
        "produce_small": p100,
        "consume": c1k,
        "txn_produce": f"txn-{p1k}",
        "txn_produce_records": txn_records,
        "latency": latency_workload,
    }
    return ratios


def _bound(ms: float | None) -> str:
    return "–" if ms is None else f"≤ {ms:g}"


def _fmt(v: float | None, digits: int = 1) -> str:
    if v is None:
        return "–"
    if abs(v) >= 10_000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def markdown(doc: dict[str, Any]) -> str:
    med: dict[str, Any] = doc["medians"]
    systems = [s for s in doc["systems"] if s in med]
    lines = [f"# tidegate benchmark — {doc['started_utc']}", ""]
    lines += [f"- {s}: {doc['versions'].get(s, '?')}" for s in doc["systems"]]
    lines += [
        f"- runs: {doc['args']['runs']} (alternated {' / '.join(doc['systems'])}), "
        f"medians quoted; producers: {doc['args']['producers']} processes",
        f"- machine: {doc['machine']}",
        "",
    ]
    for note in doc["skipped"]:
        lines.append(f"- skipped: {note}")
    lines.append("")
    workloads = sorted(
        {w for s in systems for w in med[s] if w.startswith(("produce-", "consume-", "txn"))},
        key=lambda w: (w.split("-")[0] not in ("produce", "txn"), w),
    )
    lines += [
        "## Throughput (acks=all)",
        "",
        "| workload | "
        + " | ".join(
            f"{s} MB/s | rec/s | server CPU s/GB | client cores | CPU ceiling MB/s "
            "| machine busy % (steal) | disk written / read per byte"
            for s in systems
        )
        + " |",
        "|---|" + "---|" * (7 * len(systems)),
    ]
    for w in workloads:
        cells = []
        for s in systems:
            row = med[s].get(w, {})
            cells += [
                _fmt(row.get("mb_per_s")),
                _fmt(row.get("records_per_s"), 0),
                _fmt(row.get("cpu_s_per_gb")),
                _fmt(row.get("client_cores"), 2),
                _fmt(row.get("cpu_ceiling_mb_per_s")),
                _busy(row),
                _disk(row),
            ]
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Client cores: CPU seconds of the client processes per second of the phase; near "
        "the process count means the clients, not the server, set the pace. CPU ceiling: "
        "the most the phase could move if the machine's cores ran only its server and its "
        "clients at the CPU per byte each used (cores / (server + clients s/GB)); a figure "
        "near it is bound by the CPU, not the disk or the network. Machine busy: "
        "the share of all CPUs' time not idle during the phase (server, clients, kernel, "
        "and in brackets the share the hypervisor stole); near 100 the machine sets it. "
        "Disk written / read per byte: what the machine's disks wrote and read during the "
        "phase per byte of record payload (2 for a store that writes every byte twice, as "
        "tidegate does: Tier-1 log, then Tier-2 chunk, each synced).",
        "",
        "## Latency at a fixed rate (ms)",
        "",
        "| system | offered MB/s | achieved MB/s | produce p50 | p99 | p99.9 | "
        "end-to-end p50 | p99 | p99.9 | server's produce p99 | Tier-1 sync p99 | "
        "server cores | machine busy % (steal) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in systems:
        for w, row in med[s].items():
            if w.startswith("latency-"):
                lines.append(
                    f"| {s} ({w}) | {_fmt(row.get('offered_mb_per_s'))} | "
                    f"{_fmt(row.get('achieved_mb_per_s'))} | "
                    + " | ".join(
                        _fmt(row.get(k), 2)
                        for k in (
                            "produce_p50_ms",
                            "produce_p99_ms",
                            "produce_p99.9_ms",
                            "e2e_p50_ms",
                            "e2e_p99_ms",
                            "e2e_p99.9_ms",
                        )
                    )
                    + f" | {_bound(row.get('server_produce_p99_ms'))}"
                    + f" | {_bound(row.get('tier1_sync_p99_ms'))}"
                    + f" | {_fmt(row.get('server_cores'), 2)} | {_busy(row)} |"
                )
    lines += [
        "",
        "Server's produce p99 and Tier-1 sync p99: tidegate's own view from its /metrics "
        "over the phase (warm-up included), as the bound of the histogram bucket the p99 "
        "falls in (the median of the rounds' bounds): a Produce request from its frame "
        "read to its answer handed to the socket, and each Tier-1 batch's write + "
        "fdatasync. What the client measures beyond the first is the client, the network "
        "and the scheduler. "
        "Server cores: the server's CPU seconds per second of the phase (tidegate's event "
        "loop, which every request passes through, runs on one of them).",
        "",
        "## Compaction",
        "",
        "| system (workload) | records | cleaning MB/s | cleaner passes | MB read | "
        "produce MB/s | produce p50 | p99 (ms) | records left |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in systems:
        for w, row in med[s].items():
            if w.startswith("compaction-"):
                lines.append(
                    f"| {s} ({w}) | {_fmt(row.get('records'), 0)} | "
                    f"{_fmt(row.get('cleaning_mb_s'))} | {_fmt(row.get('cleaner_passes'), 0)} | "
                    f"{_fmt(row.get('cleaner_mb_read'))} | {_fmt(row.get('produce_mb_s'))} | "
                    f"{_fmt(row.get('produce_p50_ms'), 2)} | {_fmt(row.get('produce_p99_ms'), 2)} | "
                    f"{_fmt(row.get('records_left'), 0)} |"
                )
    lines += [
        "",
        "Compaction: `bench/compaction.py` on its own `tidegate serve` (cleaner every "
        "500 ms): acks=all records over a set of keys into a one-partition compacted topic "
        "while the cleaner runs. Cleaning MB/s: bytes the passes read over their time "
        "(bounded by log.cleaner.io.max.bytes.per.second); produce p50/p99: send to "
        "delivery report while it ran; records left: what a consumer reads afterwards.",
        "",
        "## Server memory",
        "",
        "| system | peak RSS MB | MB through it |",
        "|---|---|---|",
    ]
    for s in systems:
        row = med[s].get("server", {})
        lines.append(f"| {s} | {_fmt(row.get('peak_rss_mb'))} | {_fmt(row.get('mb_through'))} |")
    base = med.get("baseline", {})
    lines += ["", "## Machine baselines", "", "| baseline | MB/s | each round |", "|---|---|---|"]
    for w, row in sorted(base.items()):
        rounds = [
            _fmt(m["mb_per_s"])
            for m in sorted(doc.get("measurements", []), key=lambda m: m["run"])
            if m["system"] == "baseline" and m["workload"] == w
        ]
        lines.append(f"| {w} | {_fmt(row.get('mb_per_s'))} | {', '.join(rounds)} |")
    lines.append(
        "\nEvery round's figure is shown: on a shared VM the disk baseline can move by a "
        "factor of three from one run to the next (bench/README.md), and the goal against "
        "the disk moves with it."
    )
    lines += ["", "## Goals (issue 6)", "", "| goal | figure | target | met |", "|---|---|---|---|"]
    ratios = doc["ratios"]
    for key, met in ratios["goals_met"].items():
        lines.append(
            f"| {key} | {_fmt(ratios[key], 2)} | {ratios['targets'][key]} | "
            f"{'–' if met is None else ('yes' if met else 'no')} |"
        )
    if RSS_GOAL not in ratios["goals_met"]:
        lines.append(f"| {RSS_GOAL} | {_fmt(ratios[RSS_GOAL])} | cache size unknown | – |")
    lines += _disk_goal_lines(doc)
    lines.append(
        f"\nMemory: {_fmt(ratios['tidegate_mb_through_per_instance'])} MB flowed through each "
        "tidegate instance (the issue judges RSS while 10 GB flow: raise the sizes for that)."
    )
    txn_phases = (
        ("txn_produce_1k_vs_plain", "txn_produce", f"{doc['args'].get('txn_commit_ms', '?')} ms"),
        ("txn_produce_1k_per_records_vs_plain", "txn_produce_records",
         f"{doc['args'].get('txn_commit_records', '?')} records per producer"),
    )
    for key, phase, every in txn_phases:
        if ratios.get(key) is None:
            continue
        basis = ratios["basis"]
        # Each compared commit's own ratio (its phases ran in the same rounds).
        others = [
            f"{s}: {_fmt(_ratio(_metric(med, s, basis[phase], 'mb_per_s'), _metric(med, s, basis['produce'], 'mb_per_s')), 2)}×"
            for s in systems
            if s.startswith(f"{TIDEGATE}@")
        ]  # fmt: skip
        lines.append(
            f"\nTransactions: {basis[phase]} (a commit every {every}) ran at "
            f"{_fmt(ratios[key], 2)}× plain {basis['produce']} "
            f"(goal {ratios['targets'][key]})"
            + (f"; {', '.join(others)}." if others else ".")
        )
    if doc.get("profiles"):
        lines += ["", "## Where tidegate's time goes (py-spy, extra pass, not in the medians)", ""]
        for workload, prof in doc["profiles"].items():
            lines += [f"### {workload} — {prof['samples']} samples, `{prof['raw']}`", ""]
            lines += [
                "| on top of the stack | % | anywhere on the stack | % |",
                "|---|---|---|---|",
            ]
            for (own, own_pct), (inc, inc_pct) in zip(
                prof["self_pct"][:_PROFILE_ROWS],
                prof["inclusive_pct"][:_PROFILE_ROWS],
                strict=False,
            ):
                lines.append(f"| `{own}` | {own_pct:.1f} | `{inc}` | {inc_pct:.1f} |")
            lines.append("")
    if doc["failures"]:
        lines += ["", "## Failures", ""]
        lines += [
            f"- run {f['run']} {f['system']} {f['workload']}: {f['error']}" for f in doc["failures"]
        ]
    return "\n".join(lines) + "\n"


def _disk_goal_lines(doc: dict[str, Any]) -> list[str]:
    """Where the goal against the disk is missed: whether the cores could have reached it."""
    ratios, med = doc["ratios"], doc["medians"]
    workload = ratios["basis"]["produce"]
    ceiling_vs_disk = ratios.get("produce_1k_cpu_ceiling_vs_disk")
    budget = ratios.get("server_s_per_gb_for_disk_goal")
    row = med.get(TIDEGATE, {}).get(workload, {})
    missed = ratios["goals_met"].get("produce_1k_vs_disk_fdatasync") is False
    if not missed or budget is None or ceiling_vs_disk is None or "cpu_s_per_gb" not in row:
        return []
    target = GOALS["produce_1k_vs_disk_fdatasync"][1]
    text = (
        f"\n{workload} against the disk: at the CPU it used per GB (server "
        f"{row['cpu_s_per_gb']:.2f} s, producers {row['client_cpu_s_per_gb']:.2f} s), "
        f"this machine's cores could move at most {row['cpu_ceiling_mb_per_s']:.0f} MB/s, "
        f"{ceiling_vs_disk:.2f} × the disk baseline. "
    )
    if budget > 0:
        text += (
            f"{target:g} × the disk beside the same producers needs the server at "
            f"≤ {budget:.2f} s/GB."
        )
    else:
        text += f"The producers alone, at their CPU per GB, could not reach {target:g} × the disk."
    return [text]


def plot(doc: dict[str, Any], path: Path) -> None:
    """Throughput per workload and latency percentiles, one colour per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med: dict[str, Any] = doc["medians"]
    systems = [s for s in doc["systems"] if s in med]
    workloads = sorted(
        {w for s in systems for w in med[s] if w.startswith(("produce-", "consume-", "txn"))},
        key=lambda w: (w.split("-")[0] not in ("produce", "txn"), w),
    )
    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(14, 5.5))
    width = 0.8 / max(1, len(systems))
    for i, s in enumerate(systems):
        xs = [j + i * width for j in range(len(workloads))]
        ax_t.bar(xs, [med[s].get(w, {}).get("mb_per_s", 0.0) for w in workloads], width, label=s)
    # Baselines far above every bar (loopback TCP, typically) would flatten the bars:
    # those are named in the title instead of drawn.
    top = max((med[s].get(w, {}).get("mb_per_s", 0.0) for s in systems for w in workloads),
              default=0.0)  # fmt: skip
    off_scale = []
    for label, row in sorted(med.get("baseline", {}).items()):
        if row["mb_per_s"] > _BASELINE_DRAWN_MAX * top:
            off_scale.append(f"{label} {row['mb_per_s']:.0f} MB/s")
            continue
        ax_t.axhline(row["mb_per_s"], linestyle="--", linewidth=1, color="grey")
        ax_t.annotate(
            f"{label} {row['mb_per_s']:.0f}",
            (len(workloads) - 0.5, row["mb_per_s"]),
            fontsize=7,
            ha="right",
            va="bottom",
            color="grey",
        )
    ax_t.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(workloads))])
    ax_t.set_xticklabels(workloads, rotation=30, ha="right", fontsize=8)
    ax_t.set_ylabel("MB/s (median)")
    title = "Throughput, acks=all"
    if off_scale:
        title += "\n(off scale: " + ", ".join(off_scale) + ")"
    ax_t.set_title(title, fontsize=10)
    ax_t.legend()
    pcts = ["p50", "p99", "p99.9"]
    keys = [f"produce_{p}_ms" for p in pcts] + [f"e2e_{p}_ms" for p in pcts]
    labels = [f"produce {p}" for p in pcts] + [f"end-to-end {p}" for p in pcts]
    for i, s in enumerate(systems):
        lat: dict[str, float] = next((r for w, r in med[s].items() if w.startswith("latency-")), {})
        xs = [j + i * width for j in range(len(keys))]
        ax_l.bar(xs, [lat.get(k, 0.0) for k in keys], width, label=s)
    ax_l.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(keys))])
    ax_l.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax_l.set_ylabel("ms (median over runs)")
    ax_l.set_yscale("log")
    ax_l.set_title(f"Latency at {doc['args']['latency_mbps']} MB/s offered")
    ax_l.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(doc: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out_dir / "results.json",
        "markdown": out_dir / "results.md",
        "plot": out_dir / "throughput_latency.png",
    }
    paths["json"].write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    paths["markdown"].write_text(markdown(doc))
    plot(doc, paths["plot"])
    return paths
