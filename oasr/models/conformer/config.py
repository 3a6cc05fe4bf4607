"""``ConformerConfig``: a WeNet U2 / U2++ Conformer's dimensions and its parameter-name contract.

The parameter names (``parameter_shapes``) are WeNet's ``ASRModel`` state-dict keys, so a
``final.pt`` maps onto them with two changes only: the sinusoidal position tables (``*.pe``)
and BatchNorm's ``num_batches_tracked`` are not weights, and the pointwise convolutions are
stored as GEMM matrices (out, in) rather than Conv1d kernels (out, in, 1).
"""

from __future__ import annotations

from dataclasses import dataclass

from oasr.models.config_dict import DictConfig

# input_layer -> the Conv2d stack's (kernel, stride) per layer; rates 4, 6 and 8.
SUBSAMPLING_LAYERS: dict[str, tuple[tuple[int, int], ...]] = {
    "conv2d": ((3, 2), (3, 2)),
    "conv2d6": ((3, 2), (5, 3)),
    "conv2d8": ((3, 2), (3, 2), (3, 2)),
}
DECODERS = ("transformer", "bitransformer")
CONV_NORMS = ("batch_norm", "layer_norm")
ENCODER_ACTIVATIONS = ("swish", "relu", "gelu")
DECODER_ACTIVATIONS = ("relu", "swish", "gelu")


def subsampling_rate(input_layer: str) -> int:
    """Frames of input per encoder frame: the product of the strides."""
    rate = 1
    for _, stride in SUBSAMPLING_LAYERS[input_layer]:
        rate *= stride
    return rate


def subsampled_freq(input_layer: str, input_dim: int) -> int:
    """Feature bins left after the Conv2d stack (valid convolutions, no padding)."""
    f = input_dim
    for kernel, stride in SUBSAMPLING_LAYERS[input_layer]:
        f = (f - kernel) // stride + 1
    return f


@dataclass
class ConformerConfig(DictConfig):
    """A Conformer CTC / attention-rescoring model (WeNet's ``ASRModel`` with a
    ``ConformerEncoder``).

    Encoder:
        input_dim: feature bins (fbank ``num_mel_bins``).
        d_model: hidden width (WeNet ``output_size``).
        encoder_layers / encoder_heads / encoder_linear_units: blocks, attention heads and
            feed-forward inner width.
        input_layer: ``conv2d`` (4x), ``conv2d6`` (6x) or ``conv2d8`` (8x) subsampling.
        cnn_module_kernel: depthwise kernel of the convolution module.
        cnn_module_norm: ``batch_norm`` or ``layer_norm`` after the depthwise conv.
        causal: left-only depthwise conv (streaming-trained models).
        use_cnn_module / macaron_style: the convolution module and the half-step macaron
            feed-forward (both on in every released Conformer).
        activation: feed-forward and convolution-module activation (``swish``).
        conv_bias: whether the convolution module's convs carry biases.
        norm_eps / conv_norm_eps: LayerNorm eps, and the convolution module norm's eps.
        global_cmvn: the encoder holds ``global_cmvn.mean`` / ``istd`` buffers.
        static_chunk_size / use_dynamic_chunk: the chunk training recipe. A model trained with
            a static chunk (and no dynamic chunk) attends within chunks even offline, as WeNet
            does; dynamic-chunk models attend over the whole utterance offline.
        max_positions: length of the precomputed sinusoidal table (grown on demand).

    Decoder (attention rescoring):
        decoder: ``transformer`` (left-to-right) or ``bitransformer`` (U2++: also right-to-left).
        decoder_layers / r_decoder_layers: blocks of the l2r and r2l decoders.
        decoder_heads / decoder_linear_units / decoder_activation: as in the encoder.

    Vocabulary and decoding metadata:
        vocab_size: output units (CTC and decoder).
        blank_id: the CTC blank; sos_id / eos_id: the decoder's start and end (WeNet shares one
            id, ``vocab_size - 1``, unless the config names others).
        reverse_weight: the r2l weight the model was trained with (a decoding default).
    """

    input_dim: int = 80
    vocab_size: int = 5000
    d_model: int = 256
    encoder_layers: int = 12
    encoder_heads: int = 4
    encoder_linear_units: int = 2048
    input_layer: str = "conv2d"
    cnn_module_kernel: int = 15
    cnn_module_norm: str = "batch_norm"
    causal: bool = False
    use_cnn_module: bool = True
    macaron_style: bool = True
    activation: str = "swish"
    conv_bias: bool = True
    norm_eps: float = 1e-5
    conv_norm_eps: float = 1e-5
    global_cmvn: bool = True
    static_chunk_size: int = 0
    use_dynamic_chunk: bool = False
    max_positions: int = 5000

    decoder: str = "bitransformer"
    decoder_layers: int = 6
    r_decoder_layers: int = 0
    decoder_heads: int = 4
    decoder_linear_units: int = 2048
    decoder_activation: str = "relu"

    blank_id: int = 0
    sos_id: int | None = None
    eos_id: int | None = None
    reverse_weight: float = 0.0

    def __post_init__(self) -> None:
        for name in ("input_dim", "vocab_size", "d_model", "encoder_layers", "encoder_heads",
                     "encoder_linear_units", "cnn_module_kernel", "decoder_heads",
                     "decoder_linear_units", "max_positions"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"ConformerConfig.{name} must be a positive int, got {value!r}")
        for name in ("decoder_layers", "r_decoder_layers", "static_chunk_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"ConformerConfig.{name} must be an int >= 0, got {value!r}")
        choices = {
            "input_layer": tuple(SUBSAMPLING_LAYERS), "cnn_module_norm": CONV_NORMS,
            "decoder": DECODERS, "activation": ENCODER_ACTIVATIONS,
            "decoder_activation": DECODER_ACTIVATIONS,
        }
        for name, valid in choices.items():
            if getattr(self, name) not in valid:
                raise ValueError(f"ConformerConfig.{name}={getattr(self, name)!r}; valid: "
                                 f"{', '.join(valid)}")
        for heads in ("encoder_heads", "decoder_heads"):
            if self.d_model % getattr(self, heads):
                raise ValueError(f"ConformerConfig: d_model={self.d_model} is not divisible by "
                                 f"{heads}={getattr(self, heads)}")
        if not self.causal and self.cnn_module_kernel % 2 == 0:
            raise ValueError(f"a non-causal convolution module needs an odd kernel, got "
                             f"cnn_module_kernel={self.cnn_module_kernel}")
        if subsampled_freq(self.input_layer, self.input_dim) <= 0:
            raise ValueError(f"input_dim={self.input_dim} is too small for {self.input_layer}")
        if self.sos_id is None:
            self.sos_id = self.vocab_size - 1
        if self.eos_id is None:
            self.eos_id = self.vocab_size - 1
        for name in ("blank_id", "sos_id", "eos_id"):
            value = getattr(self, name)
            if not 0 <= value < self.vocab_size:
                raise ValueError(f"ConformerConfig.{name}={value} is outside the vocabulary "
                                 f"({self.vocab_size})")
        if not 0.0 <= self.reverse_weight <= 1.0:
            raise ValueError(f"reverse_weight must be in [0, 1], got {self.reverse_weight}")

    # -- derived ----------------------------------------------------------------------------
    @property
    def subsampling_rate(self) -> int:
        return subsampling_rate(self.input_layer)

    @property
    def has_r2l_decoder(self) -> bool:
        return self.decoder == "bitransformer"

    # -- the key contract -------------------------------------------------------------------
    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter and persistent buffer of the model and its shape."""
        d, f = self.d_model, self.input_dim
        shapes: dict[str, tuple[int, ...]] = {}
        if self.global_cmvn:
            shapes["encoder.global_cmvn.mean"] = (f,)
            shapes["encoder.global_cmvn.istd"] = (f,)
        cin = 1
        for i, (k, _) in enumerate(SUBSAMPLING_LAYERS[self.input_layer]):
            shapes[f"encoder.embed.conv.{2 * i}.weight"] = (d, cin, k, k)
            shapes[f"encoder.embed.conv.{2 * i}.bias"] = (d,)
            cin = d
        out = "encoder.embed.out.0" if self.input_layer == "conv2d" else "encoder.embed.linear"
        shapes.update(_linear(out, d * subsampled_freq(self.input_layer, f), d))
        for i in range(self.encoder_layers):
            p = f"encoder.encoders.{i}."
            shapes.update(_attention(p + "self_attn.", d))
            shapes[p + "self_attn.linear_pos.weight"] = (d, d)
            head_dim = d // self.encoder_heads
            shapes[p + "self_attn.pos_bias_u"] = (self.encoder_heads, head_dim)
            shapes[p + "self_attn.pos_bias_v"] = (self.encoder_heads, head_dim)
            shapes.update(_ffn(p + "feed_forward.", d, self.encoder_linear_units))
            shapes.update(_norm(p + "norm_ff.", d))
            shapes.update(_norm(p + "norm_mha.", d))
            if self.macaron_style:
                shapes.update(_ffn(p + "feed_forward_macaron.", d, self.encoder_linear_units))
                shapes.update(_norm(p + "norm_ff_macaron.", d))
            if self.use_cnn_module:
                c = p + "conv_module."
                shapes.update(_linear(c + "pointwise_conv1", d, 2 * d, self.conv_bias))
                shapes[c + "depthwise_conv.weight"] = (d, 1, self.cnn_module_kernel)
                if self.conv_bias:
                    shapes[c + "depthwise_conv.bias"] = (d,)
                shapes.update(_norm(c + "norm.", d))
                if self.cnn_module_norm == "batch_norm":
                    shapes[c + "norm.running_mean"] = (d,)
                    shapes[c + "norm.running_var"] = (d,)
                shapes.update(_linear(c + "pointwise_conv2", d, d, self.conv_bias))
                shapes.update(_norm(p + "norm_conv.", d))
                shapes.update(_norm(p + "norm_final.", d))
        shapes.update(_norm("encoder.after_norm.", d))
        shapes.update(_linear("ctc.ctc_lo", d, self.vocab_size))
        if self.decoder == "bitransformer":
            shapes.update(self._decoder_shapes("decoder.left_decoder.", self.decoder_layers))
            shapes.update(self._decoder_shapes("decoder.right_decoder.", self.r_decoder_layers))
        else:
            shapes.update(self._decoder_shapes("decoder.", self.decoder_layers))
        return shapes

    def _decoder_shapes(self, prefix: str, layers: int) -> dict[str, tuple[int, ...]]:
        d = self.d_model
        shapes: dict[str, tuple[int, ...]] = {prefix + "embed.0.weight": (self.vocab_size, d)}
        for i in range(layers):
            p = f"{prefix}decoders.{i}."
            shapes.update(_attention(p + "self_attn.", d))
            shapes.update(_attention(p + "src_attn.", d))
            shapes.update(_ffn(p + "feed_forward.", d, self.decoder_linear_units))
            for n in ("norm1.", "norm2.", "norm3."):
                shapes.update(_norm(p + n, d))
        shapes.update(_norm(prefix + "after_norm.", d))
        shapes.update(_linear(prefix + "output_layer", d, self.vocab_size))
        return shapes

    # -- (de)serialisation -------------------------------------------------------------------

    def __str__(self) -> str:
        dec = f"{self.decoder}({self.decoder_layers}" + (
            f"+{self.r_decoder_layers})" if self.has_r2l_decoder else ")")
        return (
            f"Conformer(d_model={self.d_model}, layers={self.encoder_layers}, "
            f"heads={self.encoder_heads}, {self.input_layer}/{self.subsampling_rate}x, "
            f"kernel={self.cnn_module_kernel}{' causal' if self.causal else ''}, "
            f"decoder={dec}, vocab={self.vocab_size})"
        )


def _linear(
    prefix: str, fan_in: int, fan_out: int, bias: bool = True
) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {prefix + ".weight": (fan_out, fan_in)}
    if bias:
        out[prefix + ".bias"] = (fan_out,)
    return out


def _attention(prefix: str, d: int) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for name in ("linear_q", "linear_k", "linear_v", "linear_out"):
        out.update(_linear(prefix + name, d, d))
    return out


def _ffn(prefix: str, d: int, hidden: int) -> dict[str, tuple[int, ...]]:
    return {**_linear(prefix + "w_1", d, hidden), **_linear(prefix + "w_2", hidden, d)}


def _norm(prefix: str, d: int) -> dict[str, tuple[int, ...]]:
    return {prefix + "weight": (d,), prefix + "bias": (d,)}
