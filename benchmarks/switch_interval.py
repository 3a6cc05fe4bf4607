"""``oasr`` with the GIL switch interval set from ``GIL_SWITCH_MS`` (milliseconds; Python's
default is 5): the arm of ``gpu_transcribe_e2e.py --also-switch-interval-ms``, which asks whether
handing the GIL over sooner lets the decoding threads keep up with a busy engine thread
(benchmarks/cpu_decode_contention.py measures the mechanism on the CPU). Arguments as ``oasr``'s."""

from __future__ import annotations

import os
import sys

from oasr.cli.app import main

sys.setswitchinterval(float(os.environ["GIL_SWITCH_MS"]) / 1000.0)

if __name__ == "__main__":
    main()
