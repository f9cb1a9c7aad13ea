"""Server-side resource figures read from /proc (Linux only).

CPU time and peak RSS are summed over a process and its live descendants, so a server
that runs helper processes is charged for them too. Descendants that already exited and
were reaped show up in the parent's `cutime`/`cstime`, which are included.
"""

from __future__ import annotations

import os
from pathlib import Path

_CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/stat").read_text()
    # Field 2 (comm) is parenthesised and may contain spaces; split after its last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found.extend(int(c) for c in (task / "children").read_text().split())
        except FileNotFoundError:
            continue
    return found


def process_tree(pid: int) -> list[int]:
    """`pid` and every live descendant, parents first."""
    tree = [pid]
    i = 0
    while i < len(tree):
        try:
            tree.extend(_children(tree[i]))
        except FileNotFoundError:
            pass
        i += 1
    return tree


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by `pid`'s tree (reaped children included)."""
    ticks = 0
    for p in process_tree(pid):
        try:
            f = _stat_fields(p)
        except FileNotFoundError:
            continue
        # After comm: state is index 0, so utime/stime/cutime/cstime (fields 14-17) are 11-14.
        ticks += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    return ticks / _CLOCK_TICKS_PER_S


def peak_rss_bytes(pid: int) -> int:
    """Sum of VmHWM (the kernel's resident-set high-water mark) over `pid`'s live tree."""
    total = 0
    for p in process_tree(pid):
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except FileNotFoundError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) * 1024
                break
    return total


def machine_cpu_ticks() -> tuple[int, int, int]:
    """``(all, idle, steal)`` clock ticks of every CPU since boot (``/proc/stat``); idle
    counts iowait, steal is time the hypervisor gave this VM's CPUs to others."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    return sum(fields), fields[3] + fields[4], fields[7]


def machine_busy(before: tuple[int, int, int], after: tuple[int, int, int]) -> tuple[float, float]:
    """Shares of all CPU time between two ``machine_cpu_ticks`` readings: busy (steal
    included) and steal alone."""
    total = after[0] - before[0]
    if total <= 0:
        return 0.0, 0.0
    return (total - (after[1] - before[1])) / total, (after[2] - before[2]) / total


def _whole_disks(sys_block: Path = Path("/sys/block")) -> set[str]:
    """Names of the machine's disks (``/sys/block`` entries backed by a device: not
    loop, RAM, or device-mapper volumes, which would count the same bytes twice)."""
    try:
        return {d.name for d in sys_block.iterdir() if (d / "device").exists()}
    except OSError:
        return set()


def machine_disk_bytes(
    diskstats: Path = Path("/proc/diskstats"), disks: set[str] | None = None
) -> tuple[int, int]:
    """``(read, written)`` bytes of every disk of the machine since boot
    (``/proc/diskstats`` counts 512-byte sectors whatever the device's block size)."""
    names = _whole_disks() if disks is None else disks
    read = written = 0
    for line in diskstats.read_text().splitlines():
        f = line.split()
        if len(f) >= 10 and f[2] in names:
            read += int(f[5]) * 512
            written += int(f[9]) * 512
    return read, written
