"""The gap report: what dispatch can serve here and what a process (or one run) dispatched.

``gap_report()`` is the data ``oasr gaps --json`` prints; ``format_gap_report()`` its text.
``dispatch_summary(counts)`` / ``format_dispatch_line(counts)`` describe one run's counts (from
``counting.counts_since``): the line ``oasr transcribe`` and ``oasr bench`` end with, and the
object they record in the output metadata (``DISPATCH_METADATA_KEY``) and the bench JSON.
"""

from __future__ import annotations

import json
from typing import Any

from oasr.ops import counting
from oasr.ops.build import LIBRARIES
from oasr.ops.dispatch import backend, registered_kernels, routes
from oasr.ops.gaps import CUDA_TOOLCHAIN, KERNEL_GAPS

__all__ = ["DISPATCH_METADATA_KEY", "dispatch_json", "dispatch_summary", "format_dispatch_line",
           "format_gap_report", "gap_here", "gap_report", "kernel_states", "record_dispatch"]

DISPATCH_METADATA_KEY = "oasr.dispatch"


def kernel_states() -> dict[str, str]:
    """Each registered kernel's op -> what an in-scope, supported call gets here
    (``kernel``, ``torch_backend`` or ``gap:cuda-toolchain``)."""
    from oasr.ops.dispatch import Route

    known = {r.op: r for r in routes()}
    out = {}
    for op in sorted(registered_kernels()):
        r = known.get(op) or Route(op, gap="cuda-toolchain")
        out[op] = r.static_case()
    return out


def gap_here(gap_id: str) -> str:
    """Whether the gap ``gap_id`` holds on this machine: every gap but the toolchain's is a
    kernel not written yet; the toolchain's depends on finding nvcc."""
    if gap_id != CUDA_TOOLCHAIN.id:
        return "applies: no kernel written yet"
    from oasr.ops.build import KernelBuildError, find_nvcc

    try:
        nvcc = find_nvcc()
    except KernelBuildError as exc:
        return f"applies: {str(exc).split(';')[0]}"
    return f"does not apply here: nvcc found ({nvcc})"


def gap_report(counts: counting.Counts | None = None) -> dict[str, Any]:
    """The report as plain data; ``counts`` defaults to this process's since the last reset."""
    counts = counting.gap_counts() if counts is None else counts
    states = kernel_states()
    return {
        "backend": backend(),
        "declared_gaps": [
            {"id": g.id, "what": g.what, "fix": g.fix, "here": gap_here(g.id),
             "calls": counts.get(("gap", g.id), 0)}
            for g in sorted(KERNEL_GAPS.values(), key=lambda g: g.id)
        ],
        "kernels": [
            {"op": k.op, "source": k.source, "library": k.library.name if k.library else None,
             "state": states[k.op]}
            for k in sorted(registered_kernels().values(), key=lambda k: k.op)
        ],
        "libraries": sorted(LIBRARIES),
        "calls": dispatch_summary(counts)["calls"],
    }


def format_gap_report(counts: counting.Counts | None = None) -> str:
    report = gap_report(counts)
    lines = [f"backend: {report['backend']}", "declared kernel gaps:"]
    for g in report["declared_gaps"]:
        lines.append(f"  {g['id']}: {g['what']} -> fix: {g['fix']} ({g['here']}; calls: "
                     f"{g['calls']})")
    if not report["declared_gaps"]:
        lines.append("  none")
    lines.append("registered kernels:")
    lines += [f"  {k['op']} ({k['source']}): {k['state']}" for k in report["kernels"]] or [
        "  none"]
    lines.append("calls by case:")
    for case, keys in report["calls"].items():
        for key, n in keys.items():
            lines.append(f"  {case:14s} {key}: {n}")
    if not report["calls"]:
        lines.append("  none recorded")
    return "\n".join(lines)


def dispatch_summary(counts: counting.Counts) -> dict[str, Any]:
    """``{"backend", "total", "cases": {case: calls}, "calls": {case: {name: calls}}}``, every
    case present in ``cases`` (zeros included), names sorted by calls then name."""
    calls: dict[str, dict[str, int]] = {}
    for (case, key), n in counts.items():
        calls.setdefault(case, {})[key] = n
    ordered = {case: dict(sorted(calls[case].items(), key=lambda kv: (-kv[1], kv[0])))
               for case in (*counting.CASES, *sorted(set(calls) - set(counting.CASES)))
               if case in calls}
    return {
        "backend": backend(),
        "total": sum(counts.values()),
        "cases": {case: sum(ordered.get(case, {}).values()) for case in counting.CASES},
        "calls": ordered,
    }


def dispatch_json(counts: counting.Counts) -> str:
    """``dispatch_summary`` as compact JSON (the Parquet metadata value)."""
    return json.dumps(dispatch_summary(counts), sort_keys=True, separators=(",", ":"))


def format_dispatch_line(counts: counting.Counts, max_names: int = 4) -> str:
    """One line: ``dispatch (backend oasr): kernel 3 (fbank 1, ...); gap 40 (gemm 30, ...);
    policy 0; out_of_scope 0; torch_backend 0; quantized 0``; at most ``max_names`` names per
    case."""
    summary = dispatch_summary(counts)
    parts = []
    for case in counting.CASES:
        names = summary["calls"].get(case, {})
        shown = ", ".join(f"{k} {n}" for k, n in list(names.items())[:max_names])
        if len(names) > max_names:
            shown += f", +{len(names) - max_names} more"
        parts.append(f"{case} {summary['cases'][case]}" + (f" ({shown})" if shown else ""))
    return f"dispatch (backend {summary['backend']}): " + "; ".join(parts)


def record_dispatch(metadata: dict[str, str], counts: counting.Counts) -> dict[str, str]:
    """Put ``counts`` into an output's key-value ``metadata`` under ``DISPATCH_METADATA_KEY``
    (the Parquet file metadata of ``oasr transcribe``); returns ``metadata``."""
    metadata[DISPATCH_METADATA_KEY] = dispatch_json(counts)
    return metadata
