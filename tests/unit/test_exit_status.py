"""A sweep's exit status tells the truth: commbench with a launch that failed writes what it measured, says how many
failed and exits 1 (compare: tests/multiproc/test_compare.py). Here through the command itself, with an executor
that only returns results: nothing is launched."""

import signal

from distbench.cli import main
from tests.helpers import FOUND

SIZES = [4096, 65536, 1048576]


class Executor:
    """horovod's launch fails; ddp's returns a worker's result."""

    def check(self, configs, emulated=False, dilation=1.0):
        pass

    def run(self, config, args, out_json, log, timeout_s, program):
        if config.backend == "horovod":
            return {"status": "failed", "error": "launcher noise\nerror: planted: horovod could not start"}
        measured = {str(s): {"time_s": [1e-4 + 1e-9 * s], "cpu_s": [1e-4]} for s in SIZES}
        return {"status": "ok", **FOUND, "launcher": "torchrun", "measured": {"all-reduce": measured}}


def test_a_commbench_with_a_failed_launch_reports_what_it_measured_and_exits_1(tmp_path, monkeypatch, capsys):
    import distbench.sweep.executor

    monkeypatch.setattr(distbench.sweep.executor, "executor_for", lambda scheduler, form="usual": Executor())
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # main's SIGTERM handler: not in pytest's process
    out = tmp_path / "cb"
    argv = ["commbench", "--out", str(out), "--backends", "ddp,horovod", "--sizes", ",".join(map(str, SIZES))]
    assert main([*argv, "--repeats", "1"]) == 1
    err = capsys.readouterr().err
    assert "commbench: horovod x2 t1 acc1 none round 1: FAILED: error: planted: horovod could not start" in err
    assert err.rstrip().endswith(f"1 of 2 runs failed: the causes are in their logs, {out / 'runs'}")
    assert (out / "commbench.md").is_file() and (out / "fit.json").is_file()  # what ddp measured, reported
