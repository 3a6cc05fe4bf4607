"""Who serves a layer call: an OASR kernel, or torch, and why.

OASR targets GPU inference, so torch is not a silent safety net. Every layer call is routed
here and lands in exactly one of these cases, each counted:

==================  =======================================================================
``kernel``          an OASR kernel serves it.
``out_of_scope``    CPU tensor or fp32/fp64 input: torch serves it, reported once. Not debt:
                    these paths exist so the CPU parity oracles can run.
``gap``             CUDA half-precision input and no kernel: a *declared* ``KernelGap`` in
                    ``KERNEL_GAPS`` lets torch serve it, counted; an undeclared one raises.
``policy``          a kernel exists and could serve the shape but is measured slower: torch
                    serves it, counted apart so it is never mistaken for a gap.
``torch_backend``   ``OASR_LAYERS_BACKEND=torch`` selected torch for everything.
==================  =======================================================================

``format_gap_report()`` prints the table; ``oasr gaps`` shows it.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from oasr import envs

logger = logging.getLogger("oasr.layers")

__all__ = [
    "KernelGap",
    "KernelImpl",
    "KERNEL_GAPS",
    "UndeclaredKernelGap",
    "declare_gap",
    "register_kernel",
    "registered_kernels",
    "select_kernel",
    "count_kernel",
    "count_torch_backend",
    "count_gap",
    "backend",
    "set_backend",
    "gap_counts",
    "reset_counts",
    "gap_report",
    "format_gap_report",
]

_HALF_DTYPES = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class KernelGap:
    """A declared missing kernel: what is missing and which layer has to close it."""

    id: str
    what: str
    fix: str


@dataclass(frozen=True)
class KernelImpl:
    """A compiled kernel serving one op.

    ``supports(*tensors)`` says whether the kernel can serve a call at all (a call it cannot
    serve falls to the op's declared gap); ``prefer(*tensors)`` says whether it *should*
    (a measured policy: ``False`` means torch is faster for this shape, counted as policy).
    """

    op: str
    fn: Callable[..., Any]
    source: str
    supports: Callable[..., bool] | None = None
    prefer: Callable[..., bool] | None = None


class UndeclaredKernelGap(RuntimeError):
    """An in-scope call has no kernel and no declared gap."""


KERNEL_GAPS: dict[str, KernelGap] = {}
_KERNELS: dict[str, KernelImpl] = {}
_COUNTS: Counter[tuple[str, str]] = Counter()
_REPORTED: set[tuple[str, str]] = set()
_LOCK = threading.Lock()
_BACKEND: list[str | None] = [None]  # resolved lazily from the environment


def declare_gap(gap: KernelGap) -> KernelGap:
    if gap.id in KERNEL_GAPS and KERNEL_GAPS[gap.id] != gap:
        raise ValueError(f"kernel gap {gap.id!r} is already declared differently")
    KERNEL_GAPS[gap.id] = gap
    return gap


def register_kernel(impl: KernelImpl) -> KernelImpl:
    if impl.op in _KERNELS:
        raise ValueError(
            f"a kernel for op {impl.op!r} is already registered ({_KERNELS[impl.op].source})"
        )
    _KERNELS[impl.op] = impl
    return impl


def registered_kernels() -> dict[str, KernelImpl]:
    return dict(_KERNELS)


def backend() -> str:
    if _BACKEND[0] is None:
        _BACKEND[0] = envs.layers_backend()
    return _BACKEND[0]  # type: ignore[return-value]


def set_backend(name: str | None) -> None:
    """Select ``'oasr'`` or ``'torch'`` for this process; ``None`` re-reads the environment."""
    if name is not None and name not in ("oasr", "torch"):
        raise ValueError(f"unknown layers backend {name!r}; valid: oasr, torch")
    _BACKEND[0] = name


def _count(kind: str, key: str) -> None:
    with _LOCK:
        _COUNTS[(kind, key)] += 1


def _out_of_scope(op: str, x: torch.Tensor) -> None:
    reason = "cpu" if not x.is_cuda else str(x.dtype).replace("torch.", "")
    key = f"{op}:{reason}"
    _count("out_of_scope", key)
    if key not in _REPORTED:
        _REPORTED.add(key)
        logger.info("oasr.layers: %s on %s is out of scope; torch serves it", op, reason)


def select_kernel(op: str, *tensors: torch.Tensor, gap: str) -> Callable[..., Any] | None:
    """Return the kernel that should serve this call, or ``None`` for the torch path.

    Args:
        op: the kernel op name (``"linear"``, ``"layer_norm"``, ...).
        tensors: the call's tensors; the first decides device and dtype scope.
        gap: the ``KernelGap`` id that covers this op when no kernel serves it.

    Raises:
        UndeclaredKernelGap: an in-scope call with no kernel and no declared gap.
    """
    if backend() == "torch":
        _count("torch_backend", op)
        return None
    x = tensors[0]
    if not x.is_cuda or x.dtype not in _HALF_DTYPES:
        _out_of_scope(op, x)
        return None
    impl = _KERNELS.get(op)
    if impl is not None and (impl.supports is None or impl.supports(*tensors)):
        if impl.prefer is not None and not impl.prefer(*tensors):
            _count("policy", op)
            return None
        _count("kernel", op)
        return impl.fn
    if gap in KERNEL_GAPS:
        _count("gap", gap)
        return None
    raise UndeclaredKernelGap(
        f"op {op!r} on {x.device} {x.dtype} has no kernel and kernel gap {gap!r} is not "
        "declared; declare it in KERNEL_GAPS (oasr/layers/gaps.py) or add the kernel"
    )


def count_kernel(op: str) -> None:
    """Count a call an OASR kernel served outside ``select_kernel`` (ops whose scope is not
    the layers' fp16/bf16 rule, e.g. decoders on any CUDA tensor)."""
    _count("kernel", op)


def count_torch_backend(op: str) -> None:
    """Count a call ``OASR_LAYERS_BACKEND=torch`` sent to torch outside ``select_kernel``."""
    _count("torch_backend", op)


def count_gap(gap_id: str) -> None:
    """Count a call that torch (or the CPU) served through declared gap ``gap_id``."""
    if gap_id not in KERNEL_GAPS:
        raise UndeclaredKernelGap(f"kernel gap {gap_id!r} is not declared in KERNEL_GAPS")
    _count("gap", gap_id)


def gap_counts() -> dict[tuple[str, str], int]:
    with _LOCK:
        return dict(_COUNTS)


def reset_counts() -> None:
    with _LOCK:
        _COUNTS.clear()
        _REPORTED.clear()


def gap_report() -> dict[str, Any]:
    """The report as plain data (what ``oasr gaps --json`` prints)."""
    counts = gap_counts()
    by_kind: dict[str, dict[str, int]] = {}
    for (kind, key), n in sorted(counts.items()):
        by_kind.setdefault(kind, {})[key] = n
    return {
        "backend": backend(),
        "declared_gaps": [
            {"id": g.id, "what": g.what, "fix": g.fix, "calls": counts.get(("gap", g.id), 0)}
            for g in sorted(KERNEL_GAPS.values(), key=lambda g: g.id)
        ],
        "kernels": sorted(
            ({"op": k.op, "source": k.source} for k in _KERNELS.values()), key=lambda d: d["op"]
        ),
        "calls": by_kind,
    }


def format_gap_report() -> str:
    report = gap_report()
    lines = [f"backend: {report['backend']}", "declared kernel gaps:"]
    for g in report["declared_gaps"]:
        lines.append(f"  {g['id']}: {g['what']} -> fix: {g['fix']} (calls: {g['calls']})")
    if not report["declared_gaps"]:
        lines.append("  none")
    lines.append("registered kernels:")
    lines += [f"  {k['op']} ({k['source']})" for k in report["kernels"]] or ["  none"]
    lines.append("calls by case:")
    for kind, keys in report["calls"].items():
        for key, n in keys.items():
            lines.append(f"  {kind:14s} {key}: {n}")
    if not report["calls"]:
        lines.append("  none recorded in this process")
    return "\n".join(lines)
