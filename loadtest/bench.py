#!/usr/bin/env python3
"""weft's benchmark runner: `python3 loadtest/bench.py SCENARIO [options]` (see --help and
loadtest/README.md, "Running a scenario"). The code is in loadtest/bench/."""

import sys

from bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
