#!/usr/bin/env python
"""distbench entry point: `python run.py --backend {single,ddp,accelerate,...}` (see --help).

`python run.py -m MODULE ARGS` runs a module of this checkout as `python -m MODULE ARGS` would: for a launcher that
starts a script by its path only (Fabric's `fabric run`), the commbench worker and the contract script.
"""

import runpy
import sys

if __name__ == "__main__" and sys.argv[1:2] == ["-m"] and len(sys.argv) > 2:
    module, sys.argv = sys.argv[2], sys.argv[2:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    sys.exit(0)

from distbench import leave  # noqa: E402
from distbench.cli import main  # noqa: E402

if __name__ == "__main__":
    # Everything is written and the process group destroyed: leave without interpreter finalization (see leave)
    leave(main())
