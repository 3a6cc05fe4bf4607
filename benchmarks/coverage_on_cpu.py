"""``oasr`` with the coverage detector on the CPU whatever the engine's device (on a thread of its
own beside the engine, as before the detector moved to the GPU): the baseline arm of
``gpu_transcribe_e2e.py --baseline-cpu-detector``. Arguments as ``oasr``'s."""

from __future__ import annotations

import oasr.transcribe.coverage as coverage
from oasr.cli.app import main

_build = coverage.build_coverage_detector


def _on_cpu(*args, **kwargs):
    return _build(*args, **{**kwargs, "device": "cpu"})


coverage.build_coverage_detector = _on_cpu

if __name__ == "__main__":
    main()
