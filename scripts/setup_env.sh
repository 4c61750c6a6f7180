#!/usr/bin/env bash
# Create (once) the project's virtual environment and point ./.venv at it.
#
# The venv (~5.5 GB: torch is a CUDA build) lives in a cache outside the clone, keyed by a hash of
# everything that decides its contents: the dependency lists in pyproject.toml, the Python version,
# this script, the check and the Horovod build script. A second clone, or a CI run on a fresh clone, reuses it;
# changing a dependency builds a new one. On a machine with no cache it builds everything from the
# package registry (torch and torchvision come from pip's local wheel cache where one exists).
#
# The set-up runs in named steps; each one marks itself done in the venv (.step-NAME) when it succeeds. A failed
# step says its name, what the steps before it built stays, and the next run continues from the failed step:
# nothing is built or fetched twice (pip keeps what it downloaded in its own cache, the Horovod wheel is cached
# in $CACHE/wheels). The last step checks the result (scripts/check_env.sh); only then is the venv complete.
#
# Usage: scripts/setup_env.sh [--print-venv]   (--print-venv: print where the venv for this checkout is, and stop)
# Environment: DISTBENCH_CACHE (default ~/.cache/distbench), PYTHON (default python3.11).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
CACHE=${DISTBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/distbench}

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "error: $PYTHON not found; distbench needs Python 3.11 (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi

# What decides the venv's contents, read from pyproject.toml (the one place the versions are written).
deps=$("$PYTHON" - <<'PYEOF'
import json, sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(json.dumps({"deps": project["dependencies"], "extras": project.get("optional-dependencies", {}),
                  "python": sys.version.split()[0]}, sort_keys=True))
PYEOF
)
key=$( { echo "$deps"; cat scripts/setup_env.sh scripts/check_env.sh scripts/build_horovod.sh; } | sha256sum | cut -c1-16)
venv="$CACHE/venvs/$key"
if [ "${1:-}" = "--print-venv" ]; then
    echo "$venv"
    exit 0
fi

step=""
say_which_step_failed() {
    local rc=$?
    if [ "$rc" -ne 0 ] && [ -n "$step" ]; then
        echo "error: set-up step '$step' failed (exit $rc); the steps before it are kept in $venv: run the same" \
             "command again to continue from '$step'" >&2
    fi
}
trap say_which_step_failed EXIT

# run_step NAME COMMAND...: run COMMAND unless step NAME is marked done in the venv; mark it when it succeeds.
run_step() {
    local name=$1
    shift
    [ -f "$venv/.step-$name" ] && return 0
    step=$name
    echo "set-up: $name" >&2
    "$@"
    touch "$venv/.step-$name"
    step=""
}

new_venv() {
    rm -rf "$venv"  # a venv cut short before its own step was marked: start it again
    mkdir -p "$CACHE/venvs"
    "$PYTHON" -m venv "$venv"
}

pip_install() {
    "$venv/bin/python" -m pip --disable-pip-version-check install --quiet "$@"
}

# requirements GROUP: one requirement per line: "torch" (torch and torchvision, pinned in pyproject.toml), "rest"
# (every other dependency, the dev extra, and what Horovod needs to build and run).
requirements() {
    "$venv/bin/python" - "$1" <<'PYEOF'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
reqs = project["dependencies"] + project["optional-dependencies"]["dev"]
is_torch = lambda req: req.split("==")[0].strip() in ("torch", "torchvision")
if sys.argv[1] == "torch":
    print("\n".join(r for r in reqs if is_torch(r)))
else:
    # Horovod's runtime and build requirements (it is built without build isolation)
    print("\n".join([r for r in reqs if not is_torch(r)] + ["cloudpickle", "pyyaml", "packaging", "cffi>=1.4.0"]))
PYEOF
}

install_group() {
    local listed reqs
    listed=$(requirements "$1")  # a failure here stops the step (a process substitution would hide it)
    mapfile -t reqs <<<"$listed"
    pip_install "${reqs[@]}"
}

# DeepSpeed: without its compiled ops (ZeRO with a torch optimizer needs none) and against this venv's torch (its
# setup imports torch). On a machine without a GPU its communication needs one op (deepspeed_shm_comm): built into the
# package at install (DS_BUILD_SHM_COMM=1, about a minute on 2 cores), as DeepSpeed pre-builds ops, so that no run
# compiles it. (Built at run time instead, its build flags hold the venv's path as each process sees it, through
# ./.venv or the cache, and the two forms rebuild it in turn: 40-120 s in a run.) --no-cache-dir: pip would
# otherwise reuse a wheel it built without the op.
install_deepspeed() {
    local req shm=0
    req=$("$venv/bin/python" -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["deepspeed"])')
    "$venv/bin/python" -c 'import sys, torch; sys.exit(torch.cuda.is_available())' && shm=1
    DS_BUILD_OPS=0 DS_BUILD_SHM_COMM=$shm pip_install --no-build-isolation --no-cache-dir "$req"
    if [ "$shm" = 1 ] && ! DS_ACCELERATOR=cpu "$venv/bin/python" -c \
        'import sys; from deepspeed.git_version_info import installed_ops; sys.exit(not installed_ops["deepspeed_shm_comm"])'; then
        echo "error: deepspeed was installed without its deepspeed_shm_comm op" >&2
        return 1
    fi
}

install_horovod() {
    local wheel
    wheel=$(scripts/build_horovod.sh "$venv/bin/python")
    pip_install --no-deps "$wheel"
}

if [ ! -f "$venv/.complete" ]; then
    echo "setting up the environment in $venv (first time only: a few minutes)" >&2
    run_step venv new_venv
    run_step tools pip_install --upgrade pip setuptools wheel
    # torch first and alone, pinned, so that nothing below can pull a different build.
    run_step torch install_group torch
    run_step packages install_group rest
    run_step horovod install_horovod
    run_step deepspeed install_deepspeed
    run_step check scripts/check_env.sh "$venv"
    touch "$venv/.complete"
    echo "set-up: done" >&2
fi

if [ -e .venv ] && [ ! -L .venv ]; then
    echo "note: ./.venv is a directory of your own; using it as is (remove it to use $venv)" >&2
else
    ln -sfn "$venv" .venv
fi
