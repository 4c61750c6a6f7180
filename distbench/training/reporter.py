"""Rank-0 side effects in one place: progress bar, log lines, the results record, the summary line.

Every method is a no-op on processes other than the main one, so the loop can call them freely.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import SupportsFloat

from tqdm import tqdm

from distbench import records
from distbench.backends import spins
from distbench.errors import RecordNotWritten
from distbench.tasks.emulated import host_bound_said


class Reporter:
    def __init__(self, is_main: bool, progress: bool = True):
        self.is_main, self.wants_progress = is_main, progress
        self.progress = progress and is_main
        self._bar: tqdm | None = None

    def main_is(self, is_main: bool) -> None:
        """This process became (or stopped being) the main one: an elastic library renumbered the survivors."""
        self.is_main, self.progress = is_main, self.wants_progress and is_main

    def info(self, message: str) -> None:
        if self.is_main:
            print(message, file=sys.stderr, flush=True)

    def start(self, total_steps: int, desc: str, initial: int = 0) -> None:
        if self.progress:
            self._bar = tqdm(
                total=total_steps, initial=initial, desc=desc, unit="step", dynamic_ncols=True, file=sys.stderr
            )

    def update(self, step: int, loss: SupportsFloat) -> None:
        """Show the step and its loss (the global mean, as the record keeps it). A tensor's value is read here, on
        the main process only: the other ranks do not wait for their copy."""
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{float(loss):.4f}", refresh=False)
            self._bar.update(step - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def write_record(self, record: dict, path: Path) -> None:
        """Write the record; if that fails now (the folder was checked at start-up), print it to stderr so
        that the run's result is not lost, and fail."""
        if not self.is_main:
            return
        try:
            records.write_record(record, path)
        except OSError as e:
            print(records.to_json(record, sort_keys=True), file=sys.stderr, flush=True)
            raise RecordNotWritten(
                f"could not write the record to {path} ({e.strerror or e}); it is the JSON line above, on stderr"
            ) from e

    def summary(self, record: dict, path: Path) -> None:
        if not self.is_main:
            return
        if (invalid := host_bound_said(record.get("emulated"), spins(record.get("backend", "")))) is not None:
            print(f"warning: {invalid}", file=sys.stderr, flush=True)
        missing = records.accuracy_missing(record)
        acc = f"n/a ({missing})" if missing else f"{record['eval_accuracy']:.4f}"
        print(
            f"{record['task']} | {record['backend']} x{record['world_size']} | "
            f"{record['samples_per_sec']:.1f} samples/s | accuracy {acc} "
            f"({record['eval_count']} test samples) | final loss {record['final_loss']:.4f} | "
            f"{record['steps']} steps in {record['wall_time_s']:.1f} s | record: {path}",
            flush=True,
        )
