"""The benchmark's arithmetic: medians, percentiles, goal ratios, and the /proc readers."""

from __future__ import annotations

import os
from pathlib import Path

from bench import report
from bench.procstat import (
    cpu_seconds,
    machine_busy,
    machine_cpu_ticks,
    machine_disk_bytes,
    peak_rss_bytes,
)
from bench.profile import summarize
from bench.workloads import PhaseResult, percentiles_ms


def _m(run: int, system: str, workload: str, **metrics: float) -> dict[str, object]:
    return {"run": run, "system": system, "workload": workload, **metrics}


def test_medians_per_system_and_workload() -> None:
    ms = [
        _m(0, "tidegate", "produce-1024B-p16", mb_per_s=10.0),
        _m(1, "tidegate", "produce-1024B-p16", mb_per_s=30.0),
        _m(2, "tidegate", "produce-1024B-p16", mb_per_s=20.0),
        _m(0, "tansu-memory", "produce-1024B-p16", mb_per_s=40.0),
    ]
    med = report.medians(ms)
    assert med["tidegate"]["produce-1024B-p16"] == {"mb_per_s": 20.0, "runs": 3}
    assert med["tansu-memory"]["produce-1024B-p16"]["mb_per_s"] == 40.0


def test_goal_ratios_against_peer_and_disk() -> None:
    ms = [
        _m(0, "tidegate", "produce-1024B-p16", mb_per_s=150.0),
        _m(0, "tansu-memory", "produce-1024B-p16", mb_per_s=100.0),
        _m(0, "tidegate", "consume-1024B-p16", mb_per_s=100.0),
        _m(0, "tansu-memory", "consume-1024B-p16", mb_per_s=100.0),
        _m(0, "tidegate", "produce-100B-p16", records_per_s=400_000.0),
        _m(0, "tidegate", "latency-1024B-p1", produce_p99_ms=7.5),
        _m(0, "baseline", "disk-fdatasync-1MiB", mb_per_s=300.0),
    ]
    r = report.goal_ratios(report.medians(ms), 1024, 100, 16, "latency-1024B-p1")
    assert r["produce_1k_vs_tansu_memory"] == 1.5
    assert r["produce_1k_vs_disk_fdatasync"] == 0.5
    assert r["consume_vs_tansu_memory"] == 1.0
    assert r["goals_met"] == {
        "produce_1k_vs_tansu_memory": True,
        "produce_1k_vs_disk_fdatasync": False,
        "produce_100b_records_per_s": True,
        "consume_vs_tansu_memory": False,
        "produce_p99_ms_at_rate": False,
        "txn_produce_1k_vs_plain": None,
        "txn_produce_1k_per_records_vs_plain": None,
    }


def test_disk_goal_shows_the_cpu_ceiling_and_the_server_budget() -> None:
    # 2 cores; server 2.0 + producers 2.0 s/GB: at most 500 MB/s, half the 1,000 MB/s
    # disk. 0.75 x the disk (0.75 GB/s) on 2 cores allows 2.67 s/GB in all: 0.67 for
    # the server beside producers at 2.0.
    ceiling = report.cpu_ceiling_mb_per_s(2, 2.0, 2.0)
    assert ceiling == 500.0
    ms = [
        _m(0, "tidegate", "produce-1024B-p16", mb_per_s=450.0, cpu_s_per_gb=2.0,
           client_cpu_s_per_gb=2.0, cpu_ceiling_mb_per_s=ceiling),
        _m(0, "baseline", "disk-fdatasync-1MiB", mb_per_s=1000.0),
    ]  # fmt: skip
    med = report.medians(ms)
    r = report.goal_ratios(med, 1024, 100, 16, "latency-1024B-p1", cpus=2)
    assert r["produce_1k_cpu_ceiling_vs_disk"] == 0.5
    assert round(r["server_s_per_gb_for_disk_goal"], 2) == 0.67
    doc = {
        "medians": med, "systems": ["tidegate"], "started_utc": "t", "versions": {},
        "args": {"runs": 1, "producers": 2}, "machine": "m", "skipped": [], "failures": [],
        "ratios": r,
    }  # fmt: skip
    text = report.markdown(doc)
    assert "could move at most 500 MB/s, 0.50 × the disk baseline" in text
    assert "needs the server at ≤ 0.67 s/GB" in text
    row = next(line for line in text.splitlines() if line.startswith("| produce-1024B-p16"))
    assert "| 500.0 |" in row
    # Producers that alone need more than the cores have: no budget to give.
    r = report.goal_ratios(med, 1024, 100, 16, "latency-1024B-p1", cpus=1)
    assert r["server_s_per_gb_for_disk_goal"] < 0
    doc["ratios"] = r
    assert "The producers alone, at their CPU per GB, could not reach" in report.markdown(doc)


def test_memory_goal_uses_the_largest_instance() -> None:
    ms = [
        _m(0, "tidegate", "server", peak_rss_mb=300.0),
        _m(1, "tidegate", "server", peak_rss_mb=600.0),
        _m(2, "tidegate", "server", peak_rss_mb=310.0),
    ]
    med = report.medians(ms)
    r = report.goal_ratios(med, 1024, 100, 16, "latency-1024B-p1", ms, rss_limit_mb=512.0)
    assert r[report.RSS_GOAL] == 600.0
    assert r["goals_met"][report.RSS_GOAL] is False
    assert r["targets"][report.RSS_GOAL] == "<= 512"


def test_missing_side_gives_no_ratio() -> None:
    r = report.goal_ratios({}, 1024, 100, 16, "latency-1024B-p1")
    assert r["produce_1k_vs_tansu_memory"] is None
    assert set(r["goals_met"].values()) == {None}


def test_percentiles_nearest_rank() -> None:
    samples = [i * 1_000_000 for i in range(1, 1001)]  # 1 ms .. 1000 ms
    p = percentiles_ms(samples)
    assert (p["p50"], p["p99"], p["p99.9"], p["max"]) == (500.0, 990.0, 999.0, 1000.0)


def test_phase_result_units() -> None:
    r = PhaseResult(
        records=1000, payload_bytes=2_000_000, wall_s=2.0, server_cpu_s=0.5, client_cpu_s=1.0
    )
    assert (r.mb_per_s, r.records_per_s, r.cpu_s_per_gb) == (1.0, 500.0, 250.0)
    assert r.client_cpu_s_per_gb == 500.0


def test_proc_readers_see_this_process() -> None:
    pid = os.getpid()
    before = cpu_seconds(pid)
    sum(i * i for i in range(2_000_000))
    assert cpu_seconds(pid) > before
    assert peak_rss_bytes(pid) > 10 * 1024 * 1024


def test_machine_busy_shares() -> None:
    # 100 ticks: 50 idle or iowait, 10 of the busy 50 stolen by the hypervisor.
    assert machine_busy((1000, 400, 5), (1100, 450, 15)) == (0.5, 0.1)
    assert machine_busy((1, 1, 0), (1, 1, 0)) == (0.0, 0.0)
    total, idle, steal = machine_cpu_ticks()
    assert total >= idle >= 0 and total >= steal >= 0
    med = report.medians([_m(0, "tidegate", "produce-1024B-p16", mb_per_s=1.0, machine_busy=0.93, machine_steal=0.12)])
    assert report._busy(med["tidegate"]["produce-1024B-p16"]) == "93 (12)"


def test_machine_disk_bytes(tmp_path: Path) -> None:
    # /proc/diskstats: major minor name reads merged sectors-read ms writes merged
    # sectors-written ...; partitions and volumes not in ``disks`` are not counted again.
    stats = tmp_path / "diskstats"
    stats.write_text(
        " 254 0 vda 10 0 100 5 20 0 300 7 0 0 0\n"
        " 254 1 vda1 9 0 90 5 19 0 290 7 0 0 0\n"
        " 253 0 dm-0 9 0 90 5 19 0 290 7 0 0 0\n"
        "   7 0 loop0 1 0 8 0 0 0 0 0 0 0 0\n"
    )
    assert machine_disk_bytes(stats, {"vda"}) == (100 * 512, 300 * 512)
    read, written = machine_disk_bytes()
    assert read >= 0 and written >= 0
    med = report.medians(
        [_m(0, "tidegate", "produce-1024B-p16", mb_per_s=1.0, disk_written_per_byte=2.013, disk_read_per_byte=0.0)]
    )
    assert report._disk(med["tidegate"]["produce-1024B-p16"]) == "2.01 / 0.00"


def test_profile_summary_folds_lines_and_keeps_project_frames(tmp_path: Path) -> None:
    raw = tmp_path / "p.txt"
    raw.write_text(
        "main (gateway/cli.py:10);run (asyncio/runners.py:5);append (core/log.py:7) 3\n"
        "main (gateway/cli.py:10);run (asyncio/runners.py:5);append (core/log.py:9) 1\n"
        "main (gateway/cli.py:10);select (selectors.py:1) 4\n"
    )
    s = summarize(raw)
    assert s["samples"] == 8
    assert s["self_pct"] == [("append (core/log.py)", 50.0), ("select (selectors.py)", 50.0)]
    assert s["inclusive_pct"] == [("append (core/log.py)", 50.0)]


def test_latency_rows_show_server_cores_and_machine_busy() -> None:
    med = report.medians(
        [_m(0, "tidegate", "latency-1024B-p1", produce_p99_ms=9.5, server_cores=0.93,
            machine_busy=0.88, machine_steal=0.05)]
    )  # fmt: skip
    doc = {
        "medians": med, "systems": ["tidegate"], "started_utc": "t", "versions": {},
        "args": {"runs": 1, "producers": 1}, "machine": "m", "skipped": [], "failures": [],
        "ratios": report.goal_ratios(med, 1024, 100, 16, "latency-1024B-p1"),
    }  # fmt: skip
    row = next(line for line in report.markdown(doc).splitlines() if "latency-1024B-p1" in line)
    assert row.endswith("| 0.93 | 88 (5) |"), row
