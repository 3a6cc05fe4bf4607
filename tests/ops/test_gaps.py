"""The declared gaps: each names what is missing and its fix; redeclaring differently refuses."""

from __future__ import annotations

import pytest

from oasr import ops


def test_every_builtin_gap_names_its_fix():
    for gid in ("gemm", "norm", "fmha", "masked-softmax", "conv1d", "conv2d", "avg-pool1d",
                "rnn", "rotary", "embedding", "activation", "bmm", "batch-norm"):
        gap = ops.KERNEL_GAPS[gid]
        assert gap.what and "oasr.layers" in gap.fix
    assert "nvcc" in ops.KERNEL_GAPS["cuda-toolchain"].what


def test_declare_is_idempotent_and_refuses_a_different_declaration():
    gap = ops.KERNEL_GAPS["gemm"]
    assert ops.declare_gap(gap) is gap
    with pytest.raises(ValueError, match="already declared differently"):
        ops.declare_gap(ops.KernelGap("gemm", "other", "other"))


def test_require_gap_raises_naming_the_fix():
    assert ops.require_gap("gemm") is ops.KERNEL_GAPS["gemm"]
    with pytest.raises(ops.UndeclaredKernelGap, match="declare it in KERNEL_GAPS"):
        ops.require_gap("no-such-gap", "op 'x'")
