"""``FastConformerConfig``: a FastConformer encoder (NVIDIA's Parakeet family) and its head.

One config serves the three heads: ``head`` is ``ctc`` (a per-frame classifier), ``rnnt``
(LSTM prediction network + additive joint) or ``tdt`` (the RNN-T joint widened by a duration
head). Fields are named for what they are; the converters read them from transformers'
``config.json`` (``encoder_config`` + head fields) or NeMo's ``model_config.yaml``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from oasr.models.config_dict import DictConfig

HEADS = ("ctc", "rnnt", "tdt")
ACTIVATIONS = ("silu", "relu", "gelu")


@dataclass
class FastConformerConfig(DictConfig):
    """A FastConformer ASR model.

    Encoder:
        num_mel_bins: input feature bins.
        d_model / layers / heads / ff_dim: width, blocks, attention heads, feed-forward width.
        conv_kernel: depthwise kernel of the convolution module.
        subsampling_factor: a power of two (8: three stride-2 stages); the first stage is a
            full Conv2d, the rest depthwise + pointwise.
        subsampling_channels / subsampling_kernel: the Conv2d stack's channels and kernel.
        xscale: scale the subsampled frames by ``sqrt(d_model)`` before the blocks.
        attention_bias / conv_bias: biases of the attention and feed-forward projections, and
            of the convolution module's convs.
        activation: the feed-forward and convolution-module activation.
        norm_eps / bn_eps: LayerNorm and BatchNorm eps.

    Heads:
        head: ``ctc``, ``rnnt`` or ``tdt``.
        vocab_size: output units including the blank.
        blank_id: the blank (CTC and transducer); Parakeet puts it last.
        pred_hidden / pred_layers: the LSTM prediction network's width and layers (transducers).
        joint_activation: the joint's activation (``relu``).
        max_symbols_per_step: non-blank emissions per frame before greedy forces an advance.
        durations: TDT duration values, in frames, in the duration head's order.
    """

    num_mel_bins: int = 80
    d_model: int = 1024
    layers: int = 24
    heads: int = 8
    ff_dim: int = 4096
    conv_kernel: int = 9
    subsampling_factor: int = 8
    subsampling_channels: int = 256
    subsampling_kernel: int = 3
    xscale: bool = True
    attention_bias: bool = True
    conv_bias: bool = True
    activation: str = "silu"
    norm_eps: float = 1e-5
    bn_eps: float = 1e-5
    head: str = "ctc"
    vocab_size: int = 1025
    blank_id: int = 1024
    pred_hidden: int = 640
    pred_layers: int = 2
    joint_activation: str = "relu"
    max_symbols_per_step: int = 10
    durations: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])

    def __post_init__(self) -> None:
        problems = []
        if self.head not in HEADS:
            problems.append(f"head={self.head!r} (valid: {', '.join(HEADS)})")
        stages = math.log2(self.subsampling_factor) if self.subsampling_factor > 0 else -1
        if stages < 1 or stages != int(stages):
            problems.append(f"subsampling_factor={self.subsampling_factor} (a power of two >= 2)")
        if self.d_model % self.heads:
            problems.append(f"d_model={self.d_model} is not divisible by heads={self.heads}")
        if self.conv_kernel % 2 == 0:
            problems.append(f"conv_kernel={self.conv_kernel} (odd: the conv is centred)")
        for name in ("activation", "joint_activation"):
            if getattr(self, name) not in ACTIVATIONS:
                problems.append(f"{name}={getattr(self, name)!r} (valid: {', '.join(ACTIVATIONS)})")
        if not 0 <= self.blank_id < self.vocab_size:
            problems.append(f"blank_id={self.blank_id} outside vocab_size={self.vocab_size}")
        if self.head == "tdt" and (not self.durations or min(self.durations) < 0):
            problems.append(f"durations={self.durations} (non-empty, each >= 0)")
        if self.max_symbols_per_step < 1:
            problems.append(f"max_symbols_per_step={self.max_symbols_per_step} (>= 1)")
        if problems:
            raise ValueError("FastConformerConfig: " + "; ".join(problems))
        self.durations = [int(d) for d in self.durations]

    @property
    def subsampling_stages(self) -> int:
        return int(math.log2(self.subsampling_factor))

    @property
    def subsampled_bins(self) -> int:
        """Feature bins left after the stride-2 padded Conv2d stages."""
        f = self.num_mel_bins
        pad = (self.subsampling_kernel - 1) // 2
        for _ in range(self.subsampling_stages):
            f = (f + 2 * pad - self.subsampling_kernel) // 2 + 1
        return f

    @property
    def joint_width(self) -> int:
        """The joint's output width: tokens, plus the durations for TDT."""
        return self.vocab_size + (len(self.durations) if self.head == "tdt" else 0)

