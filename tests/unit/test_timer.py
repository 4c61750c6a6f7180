"""The step timer on the device's clock (training/timer.py): on a device that runs queued work later, as a GPU does,
the phases are the device's work and not the host's queueing; on work the host does itself, the device clock and the
host clock agree; and reading the device clock waits for the device once per RESOLVE_EVERY steps, never per step.

The device here is a stand-in with CUDA's semantics (torch.cuda.Event on the current stream): a thread that runs
what is queued on it in order, marks included, so these run without a GPU (the GPU tier times a real one)."""

import queue
import threading
import time

import torch

from distbench.training import timer as timing
from distbench.training.timer import PHASES, CudaClock, HostClock, StepTimer, device_clock

PHASE_S = {"data_ms": 0.01, "forward_backward_ms": 0.05, "optimizer_ms": 0.02}  # the work of each phase


class Stream:
    """A device's queue: what is put on it runs in order, on a thread of its own, after the host has moved on."""

    def __init__(self):
        self.work: queue.Queue = queue.Queue()
        self.lock, self.pending = threading.RLock(), 0  # work put and not yet done
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            item = self.work.get()
            item()
            with self.lock:
                self.pending -= 1

    def put(self, item) -> None:
        with self.lock:
            self.pending += 1
            self.work.put(item)

    def sleep(self, seconds: float) -> None:
        self.put(lambda: time.sleep(seconds))


class Event:
    """torch.cuda.Event's part the timer uses: recorded on the stream, reached when the work before it is done; on
    an idle stream at once, as a device stamps it (the stand-in's thread would stamp it only when the scheduler
    wakes it, late by as much as a loaded machine delays a thread)."""

    def __init__(self, stream: Stream):
        self.reached, self.at = threading.Event(), None
        with stream.lock:
            if stream.pending == 0:
                self._reach()
                return
            stream.put(self._reach)  # the lock taken again inside: an RLock

    def _reach(self):
        self.at = time.perf_counter()
        self.reached.set()


class StreamClock(CudaClock):
    """CudaClock on the stand-in stream, counting the host's waits for the device."""

    name = "stand-in"

    def __init__(self, stream: Stream):
        self.stream, self.waits = stream, 0

    def mark(self):
        return Event(self.stream)

    def ms(self, start, end) -> float:
        return (end.at - start.at) * 1e3

    def wait(self, mark) -> None:
        self.waits += 1
        assert mark.reached.wait(10)

    def drain(self) -> None:
        assert Event(self.stream).reached.wait(10)  # what the stream.synchronize() of CudaClock.drain does


def timed_run(clock, work, steps: int, warmup: int = 2) -> StepTimer:
    """`steps` steps of PHASE_S's work, each phase ended by the timer's mark, as training/loop.py marks them."""
    timer = StepTimer(lambda: None, warmup, clock)
    timer.begin()
    for _ in range(steps):
        timer.start_step()
        for phase in PHASES:
            work(PHASE_S[phase])
            timer.mark(phase)
        timer.end_step()
    timer.finish()
    return timer


def breakdown(timer: StepTimer) -> dict[str, float]:
    return timer.summary(global_batch=64)["step_breakdown_ms"]


def test_on_a_device_that_runs_later_the_phases_are_its_work_not_the_hosts_queueing():
    stream = Stream()
    device = timed_run(StreamClock(stream), stream.sleep, steps=6)
    queued = timed_run(HostClock(), stream.sleep, steps=6)  # what host marks would have said of the same work
    for phase, seconds in PHASE_S.items():
        assert breakdown(device)[phase] >= seconds * 1e3 * 0.99, (phase, breakdown(device))
        assert breakdown(queued)[phase] < seconds * 1e3 / 2, (phase, breakdown(queued))
    assert device.summary(global_batch=64)["step_clock"] == "stand-in"
    assert abs(sum(device.phase_ms.values()) - sum(device.step_ms)) < 1e-6  # a step is its phases, on one clock


def test_on_work_the_host_does_itself_the_device_clock_and_the_host_clock_agree():
    stream = Stream()

    def on_host(seconds):  # the work done by the host: the device's queue is empty whenever a mark is recorded
        time.sleep(seconds)

    device, host = timed_run(StreamClock(stream), on_host, steps=6), timed_run(HostClock(), on_host, steps=6)
    for phase, seconds in PHASE_S.items():
        for t in (device, host):
            assert breakdown(t)[phase] >= seconds * 1e3 * 0.99, (phase, breakdown(t))
        # both clocks see the same work: the same within what the thread's wake-up adds to a mark (<< the phase)
        assert abs(breakdown(device)[phase] - breakdown(host)[phase]) < seconds * 1e3 / 2


def test_the_device_is_waited_for_once_per_resolve_every_steps_never_per_step(monkeypatch):
    monkeypatch.setattr(timing, "RESOLVE_EVERY", 10)
    clock = StreamClock(Stream())
    timer = timed_run(clock, lambda s: None, steps=45, warmup=5)
    assert clock.waits == 4  # 40 timed steps: after each 10th (at the end none is left to wait for)
    assert len(timer.step_ms) == timer.steady_steps == 40


def test_the_timed_window_waits_for_the_devices_work_before_it_opens_and_closes():
    """The wall-clock window (samples/s) holds the device's work of its steps, not the host's queueing of them: the
    warm-up's queued work is done before the window opens, the last step's before it closes."""
    stream = Stream()
    timer = timed_run(StreamClock(stream), stream.sleep, steps=8, warmup=3)
    work_s = timer.steady_steps * sum(PHASE_S.values())
    print(f"window {timer.window_s:.3f} s for {work_s:.3f} s of the device's work")
    assert work_s * 0.99 <= timer.window_s < work_s * 1.5


def test_cuda_devices_are_timed_on_cuda_events_others_on_the_host():
    assert isinstance(device_clock(torch.device("cuda", 0)), CudaClock)
    assert isinstance(device_clock(torch.device("cpu")), HostClock)
