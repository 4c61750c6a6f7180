"""Step timing: steady-state throughput, per-step percentiles and the phases of a step.

The first `warmup` steps (start-up, allocator and thread-pool warm-up) are left out. The timed window opens with a
barrier after them and closes with one after the last step, on the main process's wall clock, each process having
waited for its device's queue first; evaluations inside it are subtracted, so throughput is training alone. Over the
same window it counts the bytes the process writes through system calls (`written_bytes`): on CPU/gloo, the gradient
exchange and the libraries' coordination, which is how the record shows what accumulation and compression change on
the wire.

The phases and the per-step times are taken on the clock of the device that does the work (`device_clock`): on a
CPU the host's, on a GPU CUDA events recorded on the current stream. A GPU runs its kernels after the host has
queued them, so host marks would time the queueing; events are read once they have completed, only every
RESOLVE_EVERY steps and at the end, so that timing adds no wait for the device to a step.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

PHASES = ("data_ms", "forward_backward_ms", "optimizer_ms")  # of a training step, in order (step_breakdown_ms)
DATA, FORWARD_BACKWARD, OPTIMIZER = PHASES
WARMUP_MAX = 5


def warmup_steps(steps: int) -> int:
    """The steps of a run left out of its timed window: the first 5, or the first quarter of a shorter run."""
    return min(WARMUP_MAX, steps // 4)


# Start-up, from the process's start to the end of its first training step, in the order they happen: the imports
# (torch, distbench, the backend's library), joining the process group (the backend's setup), the datasets (the
# main process first), building and wrapping model and optimizer, and the first step.
STARTUP_PHASES = ("imports", "process_group", "data", "build", "first_step")


def process_start_unix() -> float:
    """When this process started, as unix time, to the clock tick: /proc/self/stat's start time (ticks since boot)
    against the boot-time clock. psutil's create_time adds the ticks to the boot time in whole seconds, up to 1 s
    off, which is most of a short phase."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            after_name = f.read().rsplit(")", 1)[1].split()
        started_ticks = int(after_name[19])  # field 22 of the line; the name (field 2) may hold spaces
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - started_ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):  # no /proc (not Linux)
        import psutil

        return psutil.Process().create_time()


class StartupClock:
    """Marks the end of each start-up phase (STARTUP_PHASES) on the wall clock, from the process's start."""

    def __init__(self, process_start: float | None = None):
        self.process_start = process_start_unix() if process_start is None else process_start
        self.ends: dict[str, float] = {}

    def mark(self, phase: str, at: float | None = None) -> None:
        assert phase in STARTUP_PHASES, phase
        self.ends.setdefault(phase, time.time() if at is None else at)

    def phases(self) -> dict[str, float | None]:
        """Seconds each phase took (None: not reached), from the end of the one before."""
        out, last = {}, self.process_start
        for phase in STARTUP_PHASES:
            end = self.ends.get(phase)
            out[f"{phase}_s"] = None if end is None else end - last
            last = last if end is None else end
        return out

    @property
    def total_s(self) -> float | None:
        """Process start to the end of the first step."""
        end = self.ends.get(STARTUP_PHASES[-1])
        return None if end is None else end - self.process_start


@dataclass
class Span:
    seconds: float = 0.0
    trained_s: float = 0.0  # training time before this span began (excluded spans not counted)


def written_bytes() -> int | None:
    """Bytes this process has handed to write()/writev() system calls so far (/proc/self/io `wchar`, all its
    threads). Gloo's TCP pairs send with writev, so on CPU every byte of every all-reduce is in it; a training
    window writes no files (checkpoints excepted). None where /proc is absent."""
    try:
        with open("/proc/self/io", encoding="ascii") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class HostClock:
    """Marks on the host's clock: on a CPU the work of a call is done when it returns."""

    name = "host"

    def mark(self) -> float:
        return time.perf_counter()

    def ms(self, start: float, end: float) -> float:
        return (end - start) * 1e3

    def wait(self, mark: float) -> None:
        """Nothing to wait for: a host mark is taken when its work is done."""

    def drain(self) -> None:
        """Nothing queued: the host's work is done when its calls return."""


class CudaClock:
    """Marks on the device's clock: a CUDA event recorded on the current stream, which the device reaches once the
    work queued before it is done; two marks' time apart is known once the later has completed."""

    name = "cuda-events"

    def mark(self):
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def ms(self, start, end) -> float:
        return start.elapsed_time(end)

    def wait(self, mark) -> None:
        mark.synchronize()  # the host waits for this mark alone (the queue before it), not for the whole device

    def drain(self) -> None:
        """Wait until the device has done what this process queued on its stream: before the barrier that opens or
        closes the timed window, whose wall clock would otherwise miss the device's last steps (NCCL's barrier waits
        for the stream, gloo's, where processes share a GPU, does not)."""
        import torch

        torch.cuda.current_stream().synchronize()


def device_clock(device) -> HostClock | CudaClock:
    """The clock on which a run's steps are timed: the device's, where it runs its work asynchronously."""
    return CudaClock() if getattr(device, "type", device) == "cuda" else HostClock()


RESOLVE_EVERY = 50  # steps whose marks are kept before they are read (and, on a GPU, waited for)


class StepTimer:
    def __init__(self, barrier: Callable[[], None], warmup: int, clock: HostClock | CudaClock | None = None):
        self.barrier, self.warmup = barrier, warmup
        self.clock = clock or HostClock()
        self._pending: list[list] = []  # each timed step's marks (start, then one per phase), not read yet
        self.steps = 0  # steps timed by this timer (after a resume: since the resume)
        self.step_ms: list[float] = []
        self.phase_ms = dict.fromkeys(PHASES, 0.0)
        self.first_step_unix: float | None = None
        self._t_begin = self._t_window = self._t_end = None
        self._io_window = self._io_end = None  # written_bytes() when the window opens and closes
        self._cpu_window = self._cpu_end = None  # this process's CPU time (every thread's) then
        self._excluded_s = 0.0  # evaluation time inside the window
        self._excluded_total_s = 0.0
        self._marks: list = []  # this step's marks: its start, then the end of each phase in PHASES' order
        self._tokens = 0  # this step's tokens (a token task's input_ids), and the timed steps' (this rank's)
        self.tokens_timed = 0

    def begin(self) -> None:
        self._t_begin = time.perf_counter()
        if self.warmup == 0:
            self._t_window, self._io_window, self._cpu_window = self._t_begin, written_bytes(), time.process_time()

    def start_step(self) -> None:
        self._marks, self._tokens = [self.clock.mark()], 0

    def count_tokens(self, tokens: int) -> None:
        """The tokens this rank's step puts through the model (0 for a task without tokens)."""
        self._tokens += tokens

    def mark(self, phase: str) -> None:
        """The phase that ends now (the next of PHASES) took the time since the previous mark."""
        assert phase == PHASES[len(self._marks) - 1], phase
        self._marks.append(self.clock.mark())

    def end_step(self) -> None:
        self.steps += 1
        if self.first_step_unix is None:
            self.first_step_unix = time.time()
        if self.steps > self.warmup:
            self.tokens_timed += self._tokens
            self._pending.append(self._marks)
            if len(self._pending) >= RESOLVE_EVERY:
                self.resolve()
        if self.steps == self.warmup:
            self.clock.drain()
            self.barrier()
            self._t_window, self._io_window, self._cpu_window = (
                time.perf_counter(),
                written_bytes(),
                time.process_time(),
            )

    def resolve(self) -> None:
        """Read the marks of the steps timed since the last call: one wait, for the newest mark."""
        if not self._pending:
            return
        self.clock.wait(self._pending[-1][-1])
        for marks in self._pending:
            self.step_ms.append(self.clock.ms(marks[0], marks[-1]))
            for phase, start, end in zip(PHASES, marks[:-1], marks[1:], strict=True):
                self.phase_ms[phase] += self.clock.ms(start, end)
        self._pending = []

    @contextlib.contextmanager
    def excluded(self) -> Iterator[Span]:
        """A span (an evaluation) that is not training time."""
        t0 = time.perf_counter()
        span = Span(trained_s=t0 - (self._t_begin or t0) - self._excluded_total_s)
        yield span
        span.seconds = time.perf_counter() - t0
        self._excluded_total_s += span.seconds
        if self._t_window is not None and self._t_end is None:
            self._excluded_s += span.seconds

    def finish(self) -> None:
        self.clock.drain()
        self.barrier()
        self._t_end, self._io_end, self._cpu_end = time.perf_counter(), written_bytes(), time.process_time()
        self.resolve()

    @property
    def steady_steps(self) -> int:
        return max(0, self.steps - self.warmup)

    @property
    def window_s(self) -> float:
        """The timed window's training time: from the barrier after the warm-up to the one after the last step,
        evaluations left out."""
        return self._t_end - (self._t_window or self._t_begin) - self._excluded_s

    def summary(self, global_batch: int) -> dict:
        window_s = self.window_s
        steady = self.steady_steps
        n = max(1, steady)
        return {
            "warmup_steps": self.warmup,
            "samples_per_sec": global_batch * steady / window_s if window_s > 0 and steady else float("nan"),
            "step_time_ms": {"p50": percentile(self.step_ms, 0.5), "p90": percentile(self.step_ms, 0.9)},
            "step_clock": self.clock.name,  # what the step times and the breakdown were taken on
            "step_breakdown_ms": {k: v / n for k, v in self.phase_ms.items()},
        }

    @property
    def window_cpu_s(self) -> float | None:
        """The CPU time this process (every thread of it) spent in the timed window, evaluations included."""
        if self._cpu_window is None or self._cpu_end is None:
            return None
        return self._cpu_end - self._cpu_window

    def written_bytes_per_step(self) -> float | None:
        if self._io_window is None or self._io_end is None or not self.steady_steps:
            return None
        return (self._io_end - self._io_window) / self.steady_steps
