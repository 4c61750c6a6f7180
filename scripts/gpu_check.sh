#!/usr/bin/env bash
# The device check, prepared to run once on a machine with one GPU (issue 37): that machine's own python3 and torch,
# nothing fetched, no Horovod; the wheels of scripts/gpu_wheels.sh installed from ./wheelhouse where they came along.
# It runs the GPU tier (tests/gpu: four at a time, then the two that compare timings one at a time, alone on the GPU),
# a short compare of single and every backend that runs there, at world size 1 on the GPU, and distbench against the
# hand-written loops (benchmarks/overhead.py's pairs, both timed to the GPU's finished work) at world size 1, and
# writes everything under one folder, at most 8 files (what the device tool brings back): $OUT where the device tool
# sets it, else ./results/gpu-check. Under 9.5 minutes on one H200 (each part has its own time limit); PARTS and
# REPEATS make it shorter. The wheels are installed into that python (the machine is given back bare).
# Exit status: the GPU tier's.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-results/gpu-check}
mkdir -p "$out"
PY=${PY:-python3}
parts=${PARTS:-tier compare overhead}  # what to run (a shorter check: PARTS="tier compare")
if [ -d wheelhouse ]; then  # installed, not unpacked: a launcher is its package's command (deepspeed's)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check wheelhouse/*.whl 2>&1 | tail -3
fi
export HF_HUB_OFFLINE=1 DISTBENCH_NO_DOWNLOAD=1 PYTHONUNBUFFERED=1
{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
    "$PY" -c 'import platform, torch; print(platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
    echo "cores: $(nproc)"
    "$PY" -c 'import distbench, importlib.util as u; print("distbench imports; deepspeed:", bool(u.find_spec("deepspeed")), "horovod:", bool(u.find_spec("horovod")), "lightning_fabric:", bool(u.find_spec("lightning_fabric")))'
    "$PY" -c 'import deepspeed, lightning_fabric, mlxtend, accelerate; print("deepspeed", deepspeed.__version__, "lightning_fabric", lightning_fabric.__version__, "accelerate", accelerate.__version__)'
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
tier=0
if [[ $parts == *tier* ]]; then
    timing="phases_on_the_device_clock or profile_times"  # the tests that compare two timings: alone on the GPU
    timeout 150 "$PY" -m pytest -v -rs -p no:cacheprovider -n 4 tests/gpu -k "not ($timing)" \
        -o addopts="--durations=20" 2>&1 | tee "$out/gpu-tier.log"
    tier=${PIPESTATUS[0]}
    timeout 75 "$PY" -m pytest -v -rs -s -p no:cacheprovider tests/gpu -k "$timing" -o addopts="--durations=20" \
        2>&1 | tee "$out/gpu-tier-timing.log"
    [ "${PIPESTATUS[0]}" -ne 0 ] && tier=1
fi
if [[ $parts == *compare* ]]; then  # every backend there at world size 1, one after another (--repeats rounds)
    backends=single,ddp,accelerate,fsdp,accelerate-fsdp,fabric
    "$PY" -c 'import deepspeed' 2>/dev/null && backends+=,deepspeed,accelerate-deepspeed
    # 4 loader workers: the host's drawing of the synthetic images off the step (the first run's data phase: 40-50 %)
    timeout 150 "$PY" run.py compare --task synthetic-resnet --model resnet18 --image-size 64 --batch-size 64 \
        --backends "$backends" --nprocs 1 --max-steps 20 --loader-workers 4 --repeats "${REPEATS:-2}" \
        --out "$out/compare" 2>&1 | tail -40 | tee "$out/compare.log"
    tar czf "$out/compare.tar.gz" -C "$out" compare && rm -rf "$out/compare"  # one file back
fi
if [[ $parts == *overhead* ]]; then
    timeout 150 "$PY" - "$out/overhead.md" <<'EOF' 2>&1 | tee "$out/overhead.log"
import sys, tempfile
from pathlib import Path
from benchmarks.overhead import overhead_rows, table
with tempfile.TemporaryDirectory() as tmp:  # MNIST, ddp and accelerate x1 (no Horovod there), 2 pairs of 200 steps
    rows = overhead_rows("mnist", ["ddp", "accelerate"], [1], 2, 200, Path(tmp), None)
Path(sys.argv[1]).write_text("\n".join(table(rows)) + "\n")
EOF
fi
echo "GPU tier exit status: $tier; results under $out"
exit "$tier"
