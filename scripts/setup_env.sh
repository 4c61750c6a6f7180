#!/usr/bin/env bash
# Create (once) the project's virtual environment and point ./.venv at it.
#
# The venv (~5.5 GB: torch is a CUDA build) lives in a cache outside the clone, keyed by a hash of
# everything that decides its contents: the dependency lists in pyproject.toml, the Python version,
# this script and the Horovod build script. A second clone, or a CI run on a fresh clone, reuses it;
# changing a dependency builds a new one. On a machine with no cache it builds everything from the
# package registry (torch and torchvision come from pip's local wheel cache where one exists).
#
# Environment: DISTBENCH_CACHE (default ~/.cache/distbench), PYTHON (default python3.11).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
CACHE=${DISTBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/distbench}

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "error: $PYTHON not found; distbench needs Python 3.11 (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi

deps=$("$PYTHON" - <<'PYEOF'
import json, sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(json.dumps({"deps": project["dependencies"], "extras": project.get("optional-dependencies", {}),
                  "python": sys.version.split()[0]}, sort_keys=True))
PYEOF
)
key=$( { echo "$deps"; cat scripts/setup_env.sh scripts/build_horovod.sh; } | sha256sum | cut -c1-16)
venv="$CACHE/venvs/$key"

if [ ! -f "$venv/.complete" ]; then
    echo "setting up the environment in $venv (first time only: several minutes)" >&2
    rm -rf "$venv"
    mkdir -p "$CACHE/venvs"
    "$PYTHON" -m venv "$venv"
    pip=("$venv/bin/python" -m pip --disable-pip-version-check)
    "${pip[@]}" install --quiet --upgrade pip setuptools wheel
    # torch first and alone, pinned, so that nothing below can pull a different build.
    "${pip[@]}" install --quiet "torch==2.14.1" "torchvision==0.29.1"
    mapfile -t reqs < <("$venv/bin/python" - <<'PYEOF'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
for req in project["dependencies"] + project["optional-dependencies"]["dev"]:
    print(req)
# Horovod's runtime and build requirements (it is built without build isolation).
for req in ["cloudpickle", "pyyaml", "packaging", "cffi>=1.4.0"]:
    print(req)
PYEOF
)
    "${pip[@]}" install --quiet "${reqs[@]}"
    wheel=$(scripts/build_horovod.sh "$venv/bin/python")
    "${pip[@]}" install --quiet --no-deps "$wheel"
    "$venv/bin/horovodrun" --check-build | grep -q '\[X\] PyTorch' || {
        echo "error: the Horovod build does not include PyTorch support" >&2; exit 1; }
    touch "$venv/.complete"
fi

if [ -e .venv ] && [ ! -L .venv ]; then
    echo "note: ./.venv is a directory of your own; using it as is (remove it to use $venv)" >&2
else
    ln -sfn "$venv" .venv
fi
