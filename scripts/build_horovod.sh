#!/usr/bin/env bash
# Build (once) and print the path of a Horovod 0.28.1 wheel that works with the venv's torch.
#
# Horovod's last release predates torch 2.14, so its sdist is patched before building:
#   1. root CMakeLists.txt: C++14 -> C++17 (gloo and the core need it with current compilers);
#   2. horovod/torch/CMakeLists.txt: C++14 -> C++20 (torch 2.14 headers require C++20);
#   3. cmake/Modules/FindPytorch.cmake: do not switch to a CUDA extension just because torch is a
#      CUDA build and nvcc exists; only when Horovod GPU operations were requested (HAVE_CUDA).
# The wheel is cached outside the repository, keyed by horovod version, torch version and this
# script's own hash, so changing the patches or torch rebuilds it and nothing else does.
#
# Usage: scripts/build_horovod.sh PYTHON   (PYTHON: the venv's interpreter, with torch installed)
set -euo pipefail
PY=${1:?usage: build_horovod.sh PYTHON}
HVD_VERSION=0.28.1
CACHE=${DISTBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/distbench}
torch_version=$("$PY" -c 'import torch; print(torch.__version__)')
script_hash=$(sha256sum "$0" | cut -c1-12)
key="hvd${HVD_VERSION}-torch${torch_version}-${script_hash}"
out="$CACHE/wheels/$key"
shopt -s nullglob
built=("$out"/horovod-*.whl)
if [ ${#built[@]} -gt 0 ]; then
    echo "${built[0]}"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "building Horovod $HVD_VERSION for torch $torch_version (a few minutes, once; cached in $out)" >&2
"$PY" -m pip download --quiet --no-deps --no-binary :all: "horovod==$HVD_VERSION" -d "$work" >&2
tar -xzf "$work/horovod-$HVD_VERSION.tar.gz" -C "$work"
src="$work/horovod-$HVD_VERSION"

sed -i 's/^set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$src/CMakeLists.txt"
sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 20)/' "$src/horovod/torch/CMakeLists.txt"
"$PY" - "$src/cmake/Modules/FindPytorch.cmake" <<'PYEOF'
import sys
path = sys.argv[1]
text = open(path).read()
anchor = 'string(TOUPPER "${Pytorch_CUDA}" Pytorch_CUDA)\n'
assert anchor in text, "FindPytorch.cmake changed upstream; update build_horovod.sh"
text = text.replace(anchor, anchor + "if(NOT HAVE_CUDA)\n    set(Pytorch_CUDA FALSE)\nendif()\n", 1)
open(path, "w").write(text)
PYEOF
grep -q 'CMAKE_CXX_STANDARD 17' "$src/CMakeLists.txt"
grep -q 'CMAKE_CXX_STANDARD 20' "$src/horovod/torch/CMakeLists.txt"

export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
       HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_CPU_OPERATIONS=GLOO \
       MAKEFLAGS="-j$(nproc)"
"$PY" -m pip wheel --no-build-isolation --no-deps -w "$work/dist" "$src" >&2
mkdir -p "$out"
mv "$work"/dist/horovod-*.whl "$out/"
built=("$out"/horovod-*.whl)
echo "${built[0]}"
