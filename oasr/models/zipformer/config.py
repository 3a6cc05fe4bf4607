"""Zipformer2 (icefall) encoder geometry: one entry per multi-resolution stack."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass
class ZipformerConfig:
    """icefall's ``--encoder-dim`` etc., one value per stack (``downsampling_factor``)."""

    feature_dim: int = 80
    downsampling_factor: tuple[int, ...] = (1, 2, 4, 8, 4, 2)
    encoder_dim: tuple[int, ...] = (192, 256, 384, 512, 384, 256)
    num_encoder_layers: tuple[int, ...] = (2, 2, 3, 4, 3, 2)
    query_head_dim: tuple[int, ...] = (32,)
    pos_head_dim: tuple[int, ...] = (4,)
    value_head_dim: tuple[int, ...] = (12,)
    num_heads: tuple[int, ...] = (4, 4, 4, 8, 4, 4)
    feedforward_dim: tuple[int, ...] = (512, 768, 1024, 1536, 1024, 768)
    cnn_module_kernel: tuple[int, ...] = (31, 31, 15, 15, 15, 31)
    pos_dim: int = 48
    output_downsampling_factor: int = 2
    causal: bool = False
    # Subsampler (Conv2dSubsampling + ConvNeXt) channels.
    layer1_channels: int = 8
    layer2_channels: int = 32
    layer3_channels: int = 128
    # Heads (icefall's AsrModel): CTC and / or the stateless transducer.
    vocab_size: int = 500
    blank_id: int = 0
    unk_id: int | None = None
    use_ctc: bool = False
    use_transducer: bool = True
    decoder_dim: int = 512
    joiner_dim: int = 512
    context_size: int = 2
    # Streaming (causal checkpoints) decodes in chunks of this many subsampled (50 Hz) frames
    # seeing this many back: icefall's streaming_decode.py --chunk-size / --left-context-frames.
    decode_chunk_size: int = 16
    decode_left_context_frames: int = 128
    # Causal checkpoints: frames of log(1e-10) appended to every utterance before decoding, as
    # icefall's decode.py (offline) and streaming_decode.py (``tail_pad_len``) append them.
    decode_tail_pad_frames: int = 30

    def __post_init__(self) -> None:
        n = len(self.downsampling_factor)
        for name in ("encoder_dim", "num_encoder_layers", "query_head_dim", "pos_head_dim",
                     "value_head_dim", "num_heads", "feedforward_dim", "cnn_module_kernel"):
            value = getattr(self, name)
            value = (value,) if isinstance(value, int) else tuple(value)
            if len(value) == 1:
                value = value * n
            if len(value) != n:
                raise ValueError(f"{name} has {len(value)} entries, downsampling_factor {n}")
            setattr(self, name, value)
        self.downsampling_factor = tuple(self.downsampling_factor)
        if not (self.use_ctc or self.use_transducer):
            raise ValueError("a Zipformer model needs a CTC or a transducer head")
        if self.output_downsampling_factor != 2:
            raise ValueError("Zipformer2's output downsampling is 2 (icefall asserts it)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ZipformerConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"ZipformerConfig does not have the fields: {', '.join(unknown)}")
        if "decode_tail_pad_frames" not in data:
            # Written before the conversion recorded icefall's front end (snip_edges=False,
            # high_freq=-400) and its chunked decoding: that bundle computes other features.
            raise ValueError("this Zipformer bundle was converted by an older oasr that did not "
                             "record icefall's feature options or chunked decoding; convert "
                             "the icefall checkpoint again (oasr convert SRC BUNDLE --overwrite)")
        return cls(**data)

    @property
    def output_dim(self) -> int:
        return max(self.encoder_dim)

    @property
    def subsampling_rate(self) -> int:
        """Feature frames per output frame: the subsampler's 2, then the output's 2."""
        return 2 * self.output_downsampling_factor
