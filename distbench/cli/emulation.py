"""`run.py profile`: a task's step measured module by module on this machine's device (distbench/emulation/)."""

from __future__ import annotations

from pathlib import Path

from distbench.cli.declared import command, new_app, param, run_options

# the options of a run that say what is profiled: the task, its data and model, the micro-batch, precision, threads
TASK_OPTIONS = ("task", "model", "data_dir", "max_length", "image_size", "batch_size", "dropout", "precision")
RUN_OPTIONS = (*TASK_OPTIONS, "seed", "threads", "force")


def profile(values: dict) -> None:
    from distbench.config import RunConfig
    from distbench.emulation.profile import profile as measure
    from distbench.emulation.profile import table

    own = {k: values.pop(k) for k in ("steps", "warmup", "output")}
    result = measure(RunConfig(**values, progress=False), **own)
    print(table(result))
    print(f"profile written to {own['output']}")


def profile_app():
    app = new_app()
    params = [
        param("output", Path, help="Write the profile here (.json)."),
        *run_options(RUN_OPTIONS),
        param("steps", int, 20, help="Steps measured, after --warmup steps."),
        param("warmup", int, 5, help="Steps run first and not measured."),
    ]
    command(
        app,
        "profile",
        params,
        profile,
        help="Time each module that owns parameters, forward and backward, and the optimizer's step per parameter "
        "byte, at --batch-size as one process's micro-batch, on this machine's device: one JSON file.",
    )
    return app
