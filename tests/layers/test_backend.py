"""The routing mechanism: out of scope, declared gap, undeclared gap, kernel, policy."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from oasr.layers import _backend
from oasr.layers._backend import (
    KERNEL_GAPS,
    KernelGap,
    KernelImpl,
    UndeclaredKernelGap,
    declare_gap,
    format_gap_report,
    gap_counts,
    select_kernel,
)


@dataclass
class FakeCudaTensor:
    """Stands in for a CUDA half tensor: routing reads only these attributes."""

    dtype: torch.dtype = torch.float16
    is_cuda: bool = True
    device: str = "cuda:0"


@pytest.fixture(autouse=True)
def _clean_state(monkeypatch):
    _backend.reset_counts()
    _backend.set_backend("oasr")
    monkeypatch.setattr(_backend, "_KERNELS", {})
    yield
    _backend.set_backend(None)
    _backend.reset_counts()


def test_cpu_and_fp32_are_out_of_scope_and_reported_once(caplog):
    caplog.set_level("INFO", logger="oasr.layers")
    x = torch.randn(3)
    for _ in range(3):
        assert select_kernel("linear", x, gap="gemm") is None
    assert select_kernel("linear", FakeCudaTensor(dtype=torch.float32), gap="gemm") is None
    counts = gap_counts()
    assert counts[("out_of_scope", "linear:cpu")] == 3
    assert counts[("out_of_scope", "linear:float32")] == 1
    assert sum("out of scope" in r.message for r in caplog.records) == 2  # once per key


def test_declared_gap_is_counted_and_undeclared_raises():
    declare_gap(KernelGap("test-gap", "no test kernel", "write it"))
    try:
        for _ in range(2):
            assert select_kernel("test_op", FakeCudaTensor(), gap="test-gap") is None
        assert gap_counts()[("gap", "test-gap")] == 2
        assert "test-gap: no test kernel -> fix: write it (calls: 2)" in format_gap_report()
        with pytest.raises(UndeclaredKernelGap, match="'undeclared-gap' is not declared"):
            select_kernel("test_op", FakeCudaTensor(dtype=torch.bfloat16), gap="undeclared-gap")
    finally:
        del KERNEL_GAPS["test-gap"]


def test_kernel_serves_in_scope_calls_and_policy_is_counted_apart():
    def kernel(x):
        return "kernel"

    _backend.register_kernel(KernelImpl(
        "test_op", kernel, source="tests",
        supports=lambda x: x.dtype == torch.float16,
        prefer=lambda x: x.device != "cuda:1",
    ))
    assert select_kernel("test_op", FakeCudaTensor(), gap="gemm") is kernel
    assert select_kernel("test_op", FakeCudaTensor(device="cuda:1"), gap="gemm") is None
    # Unsupported shape/dtype falls to the op's declared gap.
    assert select_kernel("test_op", FakeCudaTensor(dtype=torch.bfloat16), gap="gemm") is None
    counts = gap_counts()
    assert counts[("kernel", "test_op")] == 1
    assert counts[("policy", "test_op")] == 1
    assert counts[("gap", "gemm")] == 1
    with pytest.raises(ValueError, match="already registered"):
        _backend.register_kernel(KernelImpl("test_op", kernel, source="again"))


def test_torch_backend_selects_torch_everywhere(monkeypatch):
    monkeypatch.setenv("OASR_LAYERS_BACKEND", "torch")
    _backend.set_backend(None)
    assert _backend.backend() == "torch"
    assert select_kernel("linear", FakeCudaTensor(), gap="undeclared-anything") is None
    assert gap_counts()[("torch_backend", "linear")] == 1


def test_backend_env_refuses_auto(monkeypatch):
    monkeypatch.setenv("OASR_LAYERS_BACKEND", "auto")
    _backend.set_backend(None)
    with pytest.raises(ValueError, match="there is no 'auto'"):
        _backend.backend()


def test_every_builtin_gap_names_its_fix():
    import oasr.layers.gaps  # noqa: F401

    for gid in ("gemm", "norm", "fmha", "masked-softmax", "conv1d", "conv2d", "avg-pool1d",
                "rnn", "rotary", "embedding", "activation", "bmm"):
        gap = KERNEL_GAPS[gid]
        assert gap.what and "oasr.layers" in gap.fix
