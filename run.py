#!/usr/bin/env python
"""distbench entry point: `python run.py --backend {single,ddp,accelerate,horovod}` (see --help)."""

from distbench import leave
from distbench.cli import main

if __name__ == "__main__":
    # Everything is written and the process group destroyed: leave without interpreter finalization (see leave)
    leave(main())
