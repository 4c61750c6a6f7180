#!/usr/bin/env python
"""distbench entry point: `python run.py --backend {single,ddp,accelerate,horovod}` (see --help)."""

import os
import sys

from distbench.cli import main

if __name__ == "__main__":
    code = main()
    # Everything is written and flushed, the process group destroyed: leave without interpreter finalization.
    # torch._dynamo (imported by Adam/AdamW) keeps a gloo process group alive past destroy_process_group; its
    # worker thread then drops the last collective's Python tensor while the interpreter finalizes, taking the
    # GIL ends the thread inside a noexcept destructor, and the process aborts ("terminate called without an
    # active exception", SIGABRT) after its work is done: seen in about 1 run in 10 of a user task with Adam
    # under torchrun x2 (pytorch/pytorch#179291; benchmarks/scaling.py's worker leaves the same way).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0)
