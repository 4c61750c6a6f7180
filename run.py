#!/usr/bin/env python
"""distbench entry point: `python run.py --backend {single,ddp,accelerate,horovod}` (see --help)."""

import sys

from distbench.cli import main

if __name__ == "__main__":
    sys.exit(main())
