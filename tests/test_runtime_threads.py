"""The CPU budget from affinity and cgroup quotas, and how a run spends it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oasr import runtime_threads as rt


def _cgroup(tmp: Path, lines: str) -> Path:
    proc = tmp / "proc_cgroup"
    proc.write_text(lines)
    return proc


def test_v2_quota_along_the_path_takes_the_tightest(tmp_path):
    root = tmp_path / "cg"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "cpu.max").write_text("150000 100000\n")
    (root / "a" / "b" / "cpu.max").write_text("max 100000\n")
    proc = _cgroup(tmp_path, "0::/a/b\n")
    assert rt.cgroup_cpu_limit(root, proc) == (1.5, str(root / "a" / "cpu.max"))


def test_v2_in_a_container_reads_its_own_root(tmp_path):
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cpu.max").write_text("200000 100000\n")
    proc = _cgroup(tmp_path, "0::/kubepods/pod1/ctr\n")  # not mounted inside the container
    assert rt.cgroup_cpu_limit(root, proc)[0] == 2.0


def test_v1_cfs_quota(tmp_path):
    root = tmp_path / "cg"
    d = root / "cpu,cpuacct" / "docker" / "x"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text("50000\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    (root / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")
    (root / "cpu,cpuacct" / "cpu.cfs_period_us").write_text("100000\n")
    proc = _cgroup(tmp_path, "4:cpu,cpuacct:/docker/x\n0::/\n")
    assert rt.cgroup_cpu_limit(root, proc)[0] == 0.5


def test_no_quota_anywhere(tmp_path):
    root = tmp_path / "cg"
    root.mkdir()
    assert rt.cgroup_cpu_limit(root, _cgroup(tmp_path, "0::/\n")) == (None, "")


def test_the_budget_is_the_smaller_of_affinity_and_the_rounded_up_quota(tmp_path, monkeypatch):
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cpu.max").write_text("150000 100000\n")
    monkeypatch.setattr(rt, "_affinity", lambda: 8)
    budget = rt.usable_cores(root, _cgroup(tmp_path, "0::/\n"))
    assert (budget.cores, budget.affinity, budget.quota) == (2, 8, 1.5)
    assert "cpu.max" in budget.limited_by and "2 cores" in str(budget)
    monkeypatch.setattr(rt, "_affinity", lambda: 1)
    assert rt.usable_cores(root, _cgroup(tmp_path, "0::/\n")).cores == 1


def test_this_process_budget_is_within_its_affinity():
    budget = rt.usable_cores()
    assert 1 <= budget.cores <= len(os.sched_getaffinity(0))


def test_plans_share_one_budget():
    budget = rt.CpuBudget(4, 4, None, "affinity")
    cpu = rt.plan_threads(None, "cpu", budget)
    assert (cpu.intra_op, cpu.decode_workers) == (4, 1)
    assert rt.plan_threads(2, "cpu", budget).decode_workers == 2
    gpu = rt.plan_threads(None, "cuda", budget)
    assert (gpu.intra_op, gpu.decode_workers) == (4, 3)
    big = rt.CpuBudget(64, 64, None, "affinity")
    assert rt.plan_threads(None, "cuda", big).decode_workers == rt.MAX_DECODE_WORKERS
    with pytest.raises(ValueError, match="--threads must be >= 1"):
        rt.plan_threads(0, "cpu", budget)


def test_passive_wait_is_set_only_before_torch_loads():
    code = ("import os, sys; from oasr.runtime_threads import prefer_passive_wait; "
            "print(prefer_passive_wait(), os.environ.get('OMP_WAIT_POLICY'), "
            "'torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["True", "PASSIVE", "False"]
    env["OMP_WAIT_POLICY"] = "ACTIVE"  # the user's choice stands
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[1] == "ACTIVE"
    late = "import torch; " + code
    out = subprocess.run([sys.executable, "-c", late], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[0] == "False"
