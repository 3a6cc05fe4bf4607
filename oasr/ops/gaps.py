"""Declared kernel gaps: in-scope calls that no OASR kernel serves, named and counted.

A ``KernelGap`` names what is missing and where the fix belongs. An in-scope call with no kernel
must fall through a declared gap or it raises ``UndeclaredKernelGap``; ``oasr gaps`` counts the
calls that went through each. A gap is removed in the commit that lands its kernel. The layers'
gaps and the toolchain gap are declared here; a kernel binding declares the gaps of its own
limits beside it (``features-large-fft``, ``ctc-beam-width``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KERNEL_GAPS", "KernelGap", "UndeclaredKernelGap", "declare_gap", "require_gap"]


@dataclass(frozen=True)
class KernelGap:
    """A declared missing kernel: what is missing and which layer has to close it."""

    id: str
    what: str
    fix: str


class UndeclaredKernelGap(RuntimeError):
    """An in-scope call has no kernel and no declared gap."""


KERNEL_GAPS: dict[str, KernelGap] = {}


def declare_gap(gap: KernelGap) -> KernelGap:
    """Add ``gap`` to ``KERNEL_GAPS`` (idempotent for an equal declaration)."""
    if gap.id in KERNEL_GAPS and KERNEL_GAPS[gap.id] != gap:
        raise ValueError(f"kernel gap {gap.id!r} is already declared differently")
    KERNEL_GAPS[gap.id] = gap
    return gap


def require_gap(gap_id: str, what: str = "") -> KernelGap:
    """The declared gap ``gap_id``; raises ``UndeclaredKernelGap`` naming the fix."""
    gap = KERNEL_GAPS.get(gap_id)
    if gap is None:
        raise UndeclaredKernelGap(
            f"{what + ' has no kernel and ' if what else ''}kernel gap {gap_id!r} is not "
            "declared; declare it in KERNEL_GAPS (oasr.ops.declare_gap) or add the kernel"
        )
    return gap


GEMM = declare_gap(KernelGap(
    "gemm",
    "no OASR GEMM kernel: Linear, Column/RowParallelLinear, LinearActivation and PointwiseConv1d "
    "run cuBLAS through torch, with unfused epilogues",
    "a GEMM with fused bias/activation epilogues in oasr/csrc/kernels/gemm, routed by "
    "oasr.layers.linear",
))
NORM = declare_gap(KernelGap(
    "norm",
    "no fused normalization kernel: LayerNorm, RMSNorm, BiasNorm and the Add* residual forms "
    "run as separate torch ops",
    "a fused residual-add + norm kernel in oasr/csrc/kernels/norm, routed by oasr.layers.norm",
))
FMHA = declare_gap(KernelGap(
    "fmha",
    "no fused attention kernel: Attention runs torch SDPA with a materialized key mask",
    "a fused (paged) attention kernel taking kv_lens/kv_starts, routed by oasr.layers.attention",
))
MASKED_SOFTMAX = declare_gap(KernelGap(
    "masked-softmax",
    "no one-pass masked softmax: MaskedSoftmax runs add + masked_fill + softmax in torch",
    "a fused bias + two-mask softmax kernel, routed by oasr.layers.softmax",
))
CONV1D = declare_gap(KernelGap(
    "conv1d",
    "no BTC-native conv kernel: Conv1d/DepthwiseConv1d transpose to BCT around torch conv1d",
    "a BTC depthwise/dense conv1d kernel with fused masked residual, routed by oasr.layers.conv",
))
CONV2D = declare_gap(KernelGap(
    "conv2d",
    "no NHWC conv2d kernel: Conv2d/Conv2dActivation permute to NCHW around torch conv2d",
    "an NHWC direct/implicit-GEMM conv2d kernel, routed by oasr.layers.conv",
))
AVG_POOL1D = declare_gap(KernelGap(
    "avg-pool1d",
    "no BTC avg_pool1d kernel: AvgPool1d transposes to BCT around torch avg_pool1d",
    "a BTC pooling kernel, routed by oasr.layers.pooling",
))
RNN = declare_gap(KernelGap(
    "rnn",
    "no fused recurrent kernel: LSTM runs a per-step torch formula loop",
    "a fused persistent LSTM inference kernel, routed by oasr.layers.rnn",
))
ROTARY = declare_gap(KernelGap(
    "rotary",
    "no fused rotary kernel: rotary embeddings run as torch elementwise ops",
    "a fused in-place rotary kernel, routed by oasr.layers.rotary",
))
EMBEDDING = declare_gap(KernelGap(
    "embedding",
    "no OASR embedding gather: Embedding runs torch's index_select",
    "an embedding gather kernel (worth it only fused with the first norm), oasr.layers.embedding",
))
ACTIVATION = declare_gap(KernelGap(
    "activation",
    "no fused activation kernels: Gelu/Relu/Sigmoid/Tanh/Swish/SwooshL/SwooshR and glu run "
    "torch elementwise ops",
    "elementwise activation kernels, routed by oasr.layers.activation",
))
BMM = declare_gap(KernelGap(
    "bmm",
    "no OASR batched GEMM: oasr.layers.matmul.bmm runs torch.bmm",
    "a batched GEMM kernel, routed by oasr.layers.matmul",
))
BATCH_NORM = declare_gap(KernelGap(
    "batch-norm",
    "no batch-norm kernel: BatchNorm1d (inference, running statistics) runs torch batch_norm "
    "over (N, C) rows",
    "fold the running statistics into the preceding depthwise conv at load time, or a fused "
    "depthwise conv + batch norm + swish kernel, routed by oasr.layers.batchnorm",
))
CUDA_TOOLCHAIN = declare_gap(KernelGap(
    id="cuda-toolchain",
    what="where no prebuilt library is installed and nvcc is not found (OASR_NVCC, CUDA_HOME, "
         "PATH, /usr/local/cuda), OASR's CUDA kernels cannot be built; their calls run on torch "
         "(features, attention) or on the CPU (the CTC search)",
    fix="install the CUDA toolkit matching the driver, or set CUDA_HOME (or OASR_NVCC) to it",
))
