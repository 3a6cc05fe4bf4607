"""The layer waist: every architecture is built from these, never from bare torch layers."""

from oasr.layers.activation import Gelu, Relu, Sigmoid, Swish, SwooshL, SwooshR, Tanh
from oasr.layers.attention import Attention
from oasr.layers.batchnorm import BatchNorm1d
from oasr.layers.conv import Conv1d, Conv2d, Conv2dActivation, DepthwiseConv1d
from oasr.layers.embedding import Embedding, VocabParallelEmbedding
from oasr.layers.ffn import FeedForward, GatedMLP
from oasr.layers.linear import (
    ColumnParallelLinear,
    Linear,
    LinearActivation,
    PointwiseConv1d,
    RowParallelLinear,
    TiedLinear,
)
from oasr.layers.norm import (
    ESPNET_EPS,
    QWEN2_RMS_EPS,
    TORCH_EPS,
    BiasNorm,
    LayerNorm,
    RMSNorm,
)
from oasr.layers.pooling import AvgPool1d
from oasr.layers.quantizable import QuantizableConv, QuantizableGemm
from oasr.layers.rnn import LSTM
from oasr.layers.rotary import NeoxRotaryEmbedding, apply_rotary_pos_emb
from oasr.layers.softmax import MaskedSoftmax

__all__ = [
    "ESPNET_EPS", "QWEN2_RMS_EPS", "TORCH_EPS", "LSTM", "Attention", "AvgPool1d", "BatchNorm1d",
    "BiasNorm", "ColumnParallelLinear", "Conv1d", "Conv2d", "Conv2dActivation", "DepthwiseConv1d",
    "Embedding", "FeedForward", "GatedMLP", "Gelu", "LayerNorm", "Linear", "LinearActivation",
    "MaskedSoftmax", "NeoxRotaryEmbedding", "PointwiseConv1d", "QuantizableConv",
    "QuantizableGemm", "RMSNorm", "Relu", "RowParallelLinear", "Sigmoid", "Swish", "SwooshL",
    "SwooshR", "Tanh", "TiedLinear", "VocabParallelEmbedding", "apply_rotary_pos_emb",
]
