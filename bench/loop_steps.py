"""Where a long event-loop step went: every step (``asyncio.Handle._run``) longer than a
threshold is recorded with its wall time, the loop thread's CPU time and the whole
process's (the difference: our other threads ran meanwhile, so the loop may have waited
for the GIL; wall time beyond both: the process waited for a CPU), and a sampler thread
takes the loop thread's stack whenever the current step has run past the threshold.
``worst_cpu`` is the step that used the most loop-thread CPU, whatever its wall time:
the part of a stall that does not depend on the machine's other load. One loop iteration
runs every step ready at its start (a wave of tasks): ``worst_iteration`` is the
iteration whose steps used the most loop-thread CPU together.

    with LoopSteps(threshold_s=0.04) as steps: ...
    steps.report()
"""

from __future__ import annotations

import asyncio
import collections
import gc
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Step:
    what: str
    wall_ms: float
    cpu_ms: float
    process_cpu_ms: float
    samples: list[str] = field(default_factory=list)


class LoopSteps:
    def __init__(self, threshold_s: float = 0.04, sample_every_s: float = 0.005) -> None:
        self.threshold_s = threshold_s
        self.sample_every_s = sample_every_s
        self.steps: list[Step] = []
        self.worst_cpu: Step | None = None
        self.worst_iteration: Step | None = None
        self._iteration = [0.0, 0.0, 0]  # this iteration's steps: wall, CPU, count
        self._iteration_what: collections.Counter[str] = collections.Counter()
        self._selector: Any = None
        #: The latest wake-up from the selector past its timeout (the OS did not run the
        #: loop thread, or another thread held the GIL), and our other threads' CPU meanwhile.
        self.worst_wake = (0.0, 0.0)
        #: The longest the loop ran between two waits in the selector: wall, loop-thread
        #: CPU, and the wall time of the steps it ran (the rest: the loop's own work).
        self.worst_busy = (0.0, 0.0, 0.0)
        self._woke = 0.0
        self._woke_cpu = 0.0
        #: The longest garbage collection on the loop thread: (seconds, generation), and
        #: the most CPU one took (seconds).
        self.worst_gc = (0.0, -1)
        self.worst_gc_cpu = 0.0
        self._gc_started = 0.0
        self._gc_cpu = 0.0
        self._original: Any = None
        self._started = 0.0  # 0: no step running
        self._samples: list[str] = []
        self._thread_id = 0
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    def __enter__(self) -> LoopSteps:
        self._thread_id = threading.get_ident()
        self._original = asyncio.Handle._run
        original = self._original
        meter = self

        def _run(handle: asyncio.Handle) -> None:
            meter._samples = []
            cpu, process_cpu = time.thread_time(), time.process_time()
            meter._started = time.monotonic()
            try:
                original(handle)
            finally:
                wall = time.monotonic() - meter._started
                meter._started = 0.0
                cpu = time.thread_time() - cpu
                meter._iteration[0] += wall
                meter._iteration[1] += cpu
                meter._iteration[2] += 1
                meter._iteration_what[repr(handle)[:60]] += 1
                worst = meter.worst_cpu
                if wall > meter.threshold_s or worst is None or cpu * 1000 > worst.cpu_ms:
                    step = Step(repr(handle)[:200], round(wall * 1000, 1), round(cpu * 1000, 1),
                                round((time.process_time() - process_cpu) * 1000, 1),
                                meter._samples)
                    if wall > meter.threshold_s:
                        meter.steps.append(step)
                    if worst is None or step.cpu_ms > worst.cpu_ms:
                        meter.worst_cpu = step

        asyncio.Handle._run = _run  # type: ignore[method-assign]
        self._selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
        select = self._selector.select

        def _select(timeout: float | None = None) -> Any:
            started, cpu, process_cpu = time.monotonic(), time.thread_time(), time.process_time()
            if meter._woke:
                busy = (started - meter._woke, cpu - meter._woke_cpu, meter._iteration[0])
                if busy[0] > meter.worst_busy[0]:
                    meter.worst_busy = busy
            meter._end_iteration()
            try:
                return select(timeout)
            finally:
                meter._woke, meter._woke_cpu = time.monotonic(), time.thread_time()
                late = meter._woke - started - (timeout or 0.0)
                if timeout is not None and late > meter.worst_wake[0]:
                    others = time.process_time() - process_cpu - (time.thread_time() - cpu)
                    meter.worst_wake = (late, others)

        self._selector.select = _select
        gc.callbacks.append(self._on_gc)
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        return self

    def _end_iteration(self) -> None:
        wall, cpu, count = self._iteration
        worst = self.worst_iteration
        if count and (worst is None or cpu * 1000 > worst.cpu_ms):
            what = ", ".join(f"{n}x {w}" for w, n in self._iteration_what.most_common(3))
            self.worst_iteration = Step(f"{count} steps: {what}", round(wall * 1000, 1),
                                        round(cpu * 1000, 1), 0.0)
        self._iteration = [0.0, 0.0, 0]
        self._iteration_what = collections.Counter()

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != self._thread_id:
            return
        if phase == "start":
            self._gc_started, self._gc_cpu = time.monotonic(), time.thread_time()
        elif self._gc_started:
            took = time.monotonic() - self._gc_started
            if took > self.worst_gc[0]:
                self.worst_gc = (took, int(info["generation"]))
            self.worst_gc_cpu = max(self.worst_gc_cpu, time.thread_time() - self._gc_cpu)

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self._on_gc)
        asyncio.Handle._run = self._original  # type: ignore[method-assign]
        del self._selector.select
        self._end_iteration()
        self._stop.set()
        assert self._sampler is not None
        self._sampler.join()

    def _sample(self) -> None:
        while not self._stop.wait(self.sample_every_s):
            started = self._started
            if started and time.monotonic() - started > self.threshold_s:
                frame = sys._current_frames().get(self._thread_id)
                if frame is not None:
                    stack = traceback.extract_stack(frame)[-6:]
                    self._samples.append(" < ".join(
                        f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}:{f.name}"
                        for f in reversed(stack)))

    def report(self) -> str:
        lines = []
        for s in sorted(self.steps, key=lambda s: -s.wall_ms):
            lines.append(f"{s.wall_ms} ms wall, {s.cpu_ms} ms CPU ({s.process_cpu_ms} ms "
                         f"process): {s.what}")
            for sample, n in collections.Counter(s.samples).most_common(4):
                lines.append(f"    {n}x {sample}")
        if self.worst_cpu is not None:
            w = self.worst_cpu
            lines.append(f"most CPU in one step: {w.cpu_ms} ms ({w.wall_ms} ms wall): {w.what}")
        late, others = self.worst_wake
        lines.append(f"latest wake-up past the selector's timeout: {late * 1000:.1f} ms "
                     f"(our other threads' CPU meanwhile: {others * 1000:.1f} ms)")
        took, generation = self.worst_gc
        lines.append(f"longest garbage collection: {took * 1000:.1f} ms (generation {generation}"
                     f"), most CPU in one: {self.worst_gc_cpu * 1000:.1f} ms")
        wall, cpu, steps = self.worst_busy
        lines.append(f"longest between two waits: {wall * 1000:.1f} ms wall, {cpu * 1000:.1f} "
                     f"ms CPU, {steps * 1000:.1f} ms in steps")
        if self.worst_iteration is not None:
            w = self.worst_iteration
            lines.append(f"most CPU in one iteration: {w.cpu_ms} ms ({w.wall_ms} ms wall): "
                         f"{w.what}")
        return "\n".join(lines)
