#!/usr/bin/env bash
# The set-up's check of a venv (scripts/setup_env.sh runs it last): Horovod was built with its PyTorch extension
# and Gloo, which `horovodrun --check-build` reports after loading the extension against this venv's torch.
#
# The report is read whole, then searched. It was once piped into `grep -q`, which exits at its first match while
# horovodrun may still be writing; horovodrun then died of the broken pipe and, under pipefail, failed a good
# build (5 runs in 6 on one machine). tests/unit/test_setup.py runs this check many times against a horovodrun that
# writes its report in pieces.
#
# Usage: scripts/check_env.sh VENV
set -euo pipefail
venv=${1:?usage: check_env.sh VENV}
report=$("$venv/bin/horovodrun" --check-build)
for part in PyTorch Gloo; do
    if [[ $report != *"[X] $part"* ]]; then
        echo "error: the Horovod build in $venv lacks $part support; horovodrun --check-build says:" >&2
        echo "$report" >&2
        exit 1
    fi
done
