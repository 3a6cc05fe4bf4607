"""``oasr.ops``: the one room that owns dispatch. The lowest floor: torch, stdlib, ``oasr.envs``.

* ``gaps``: ``KernelGap``, ``KERNEL_GAPS``, ``declare_gap`` and the built-in gaps.
* ``build``: the ``BuildSpec`` of each CUDA kernel library (sources, flags, launcher table).
* ``dispatch``: ``Kernel`` registration, the ``Route`` every caller asks, the backend.
* ``counting``: per-thread counters, ``snapshot`` / ``counts_since`` for one run.
* ``report``: the gap report and the one-line dispatch summary of a run.

Layers, feature frontends, the GPU CTC search and the paged decode attention all route here:
``route(op, gap=...).select(x, *rest)`` is the one call.
"""

from oasr.ops.build import LIBRARIES, BuildSpec, KernelBuildError, SignatureMismatch
from oasr.ops.counting import CASES, counts_since, gap_counts, reset_counts, snapshot
from oasr.ops.dispatch import (
    CUDA,
    CUDA_HALF,
    Kernel,
    Route,
    backend,
    register_kernel,
    registered_kernels,
    route,
    set_backend,
)
from oasr.ops.gaps import KERNEL_GAPS, KernelGap, UndeclaredKernelGap, declare_gap, require_gap
from oasr.ops.report import (
    DISPATCH_METADATA_KEY,
    dispatch_json,
    dispatch_summary,
    format_dispatch_line,
    format_gap_report,
    gap_here,
    gap_report,
    kernel_states,
    record_dispatch,
)

__all__ = [
    "CASES", "CUDA", "CUDA_HALF", "DISPATCH_METADATA_KEY", "KERNEL_GAPS", "LIBRARIES",
    "BuildSpec", "Kernel", "KernelBuildError", "KernelGap", "Route", "SignatureMismatch",
    "UndeclaredKernelGap", "backend", "counts_since", "declare_gap", "dispatch_json",
    "dispatch_summary", "format_dispatch_line", "format_gap_report", "gap_counts", "gap_here",
    "gap_report", "kernel_states", "record_dispatch", "register_kernel", "registered_kernels",
    "require_gap", "reset_counts", "route", "set_backend", "snapshot",
]
