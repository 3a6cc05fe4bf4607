"""The CPU thread budget: how many cores this process may use, and how they are shared.

The host's core count is not the budget. A process is limited by its CPU affinity
(``os.sched_getaffinity``: taskset, cpusets, a container's ``--cpuset-cpus``) and by its
cgroup's CPU quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``: docker's
``--cpus``, Kubernetes limits), the smaller of the two, rounded up. Sizing torch's intra-op pool
from the host instead runs more threads than the process gets CPU time for, and every parallel
region then waits for a descheduled thread.

One budget covers torch's intra-op threads and our own pools: the audio-decoding prefetch
(``oasr.transcribe.prefetch``) gets the cores torch does not use on a CPU run (at least one), and
a GPU run's decoders all but one core; the output writer is one mostly idle thread.

OpenMP's spin-waiting: libgomp (torch's OpenMP) busy-waits between parallel regions unless
``OMP_WAIT_POLICY=PASSIVE``, burning the CPU that the prefetch threads, the writer and any other
process on the machine need. It is read once, when torch loads libgomp, so
``prefer_passive_wait()`` must run before ``import torch``; the ``oasr`` CLI calls it first
thing. A library user sets the variable in the environment instead (docs/quantization.md has
the measurements).
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuBudget", "ThreadPlan", "cgroup_cpu_limit", "configure_threads",
           "decode_workers", "plan_threads", "prefer_passive_wait", "usable_cores"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Decoding threads beyond this only contend for the GIL (one decodes ~1,600x real time).
MAX_DECODE_WORKERS = 8


@dataclass(frozen=True)
class CpuBudget:
    """The cores this process may use: ``cores = min(affinity, ceil(quota))``."""

    cores: int
    affinity: int
    quota: float | None  # cores the cgroup grants; None: no quota
    limited_by: str  # "affinity" or the cgroup file that set the quota

    def __str__(self) -> str:
        quota = "none" if self.quota is None else f"{self.quota:g}"
        return (f"{self.cores} cores (affinity {self.affinity}, cgroup quota {quota}; "
                f"limited by {self.limited_by})")


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except OSError:
        return None


def _own_cgroups(proc_cgroup: Path) -> dict[str, str]:
    """controller (or "" for the v2 unified hierarchy) -> this process's cgroup path."""
    out: dict[str, str] = {}
    text = _read(proc_cgroup) or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            out[""] = path
        for c in controllers.split(","):
            if c:
                out[c] = path
    return out


def _ancestors(base: Path, rel: str) -> list[Path]:
    """``base/rel`` and each parent up to ``base`` (a parent's limit applies too). A path that
    does not exist under ``base`` (a container mounting its own cgroup at the root) leaves
    ``base`` alone."""
    rel_parts = [p for p in rel.split("/") if p]
    dirs = [base.joinpath(*rel_parts[:i]) for i in range(len(rel_parts), -1, -1)]
    return [d for d in dirs if d.is_dir()] or [base]


def cgroup_cpu_limit(root: Path = CGROUP_ROOT,
                     proc_cgroup: Path = Path("/proc/self/cgroup")) -> tuple[float | None, str]:
    """(cores the cgroup grants, the file that said so); (None, "") when there is no quota.

    The tightest limit along this process's cgroup path, v2 (``cpu.max``: ``"QUOTA PERIOD"``
    or ``"max PERIOD"``) and v1 (``cpu.cfs_quota_us`` of -1 means none)."""
    own = _own_cgroups(proc_cgroup)
    best: tuple[float | None, str] = (None, "")

    def consider(cores: float, where: Path) -> None:
        nonlocal best
        if cores > 0 and (best[0] is None or cores < best[0]):
            best = (cores, str(where))

    for d in _ancestors(root, own.get("", "/")):
        text = _read(d / "cpu.max")
        if text:
            quota, _, period = text.partition(" ")
            if quota != "max" and period:
                consider(int(quota) / int(period), d / "cpu.max")
    for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        base = root / mount
        if not base.is_dir():
            continue
        for d in _ancestors(base, own.get("cpu", "/")):
            quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
            if quota and period and int(quota) > 0 and int(period) > 0:
                consider(int(quota) / int(period), d / "cpu.cfs_quota_us")
        break
    return best


def usable_cores(root: Path = CGROUP_ROOT,
                 proc_cgroup: Path = Path("/proc/self/cgroup")) -> CpuBudget:
    """The process's CPU budget from its affinity and its cgroup quota."""
    affinity = _affinity()
    quota, where = cgroup_cpu_limit(root, proc_cgroup)
    if quota is not None and math.ceil(quota) < affinity:
        return CpuBudget(max(1, math.ceil(quota)), affinity, quota, where)
    return CpuBudget(affinity, affinity, quota, "affinity")


@dataclass(frozen=True)
class ThreadPlan:
    """How a run spends its budget: torch's intra-op threads and the decoding prefetch."""

    budget: CpuBudget
    intra_op: int
    decode_workers: int

    def __str__(self) -> str:
        return (f"threads: torch {self.intra_op}, audio decoding {self.decode_workers}, "
                f"writer 1; budget {self.budget}")


def plan_threads(requested: int | None = None, device_type: str = "cpu",
                 budget: CpuBudget | None = None) -> ThreadPlan:
    """The thread plan for a run on ``device_type`` (``cpu`` or ``cuda``).

    ``requested`` (``--threads``) sets torch's intra-op threads; default: the budget's cores.
    On a CPU run decoding gets what torch leaves (at least 1); on a GPU run, where torch's CPU
    threads mostly wait, all cores but one (at most ``MAX_DECODE_WORKERS``).
    """
    budget = budget or usable_cores()
    if requested is not None and requested < 1:
        raise ValueError(f"--threads must be >= 1, got {requested}")
    intra = requested or budget.cores
    spare = budget.cores - (intra if device_type == "cpu" else 1)
    return ThreadPlan(budget, intra, max(1, min(MAX_DECODE_WORKERS, spare)))


def decode_workers(device_type: str = "cpu") -> int:
    """Audio-decoding threads for a run on ``device_type`` with torch's current intra-op
    thread count (what ``configure_threads`` set, or torch's default)."""
    import torch

    return plan_threads(torch.get_num_threads(), device_type).decode_workers


def configure_threads(requested: int | None = None, device_type: str = "cpu") -> ThreadPlan:
    """Plan the run's threads and set torch's intra-op pool to the plan. Without
    ``requested``, an ``OMP_NUM_THREADS`` in the environment is the user's choice and kept."""
    import torch

    if requested is None and os.environ.get("OMP_NUM_THREADS", "").strip().isdigit():
        requested = max(1, torch.get_num_threads())
    plan = plan_threads(requested, device_type)
    torch.set_num_threads(plan.intra_op)
    return plan


def prefer_passive_wait() -> bool:
    """Ask OpenMP not to spin between parallel regions (``OMP_WAIT_POLICY=PASSIVE``) unless
    the environment already chose; True when it can still take effect (torch not imported)."""
    if "torch" in sys.modules:
        return False
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return True
