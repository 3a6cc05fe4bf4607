"""Nemotron streaming RNN-T (NVIDIA's cache-aware FastConformer): the architecture entry.

The encoder (``encoder.py``) is FastConformer with the chunked-limited attention mask, a causal
subsampling and a causal LayerNorm convolution module, so a chunk encodes from a per-stream
cache exactly as the whole utterance does offline; the head is Parakeet's LSTM transducer.
The entry names classes as strings, so importing this package imports no torch.
"""

from __future__ import annotations

from oasr.models.registry import ModelEntry

NEMOTRON_STREAMING = ModelEntry(
    name="nemotron_streaming",
    model_cls="oasr.models.nemotron_streaming.model:NemotronStreamingRnnt",
    converters=("oasr.models.nemotron_streaming.converter:HfNemotronStreamingConverter",
                "oasr.models.nemotron_streaming.converter:HfNemotronPromptedConverter"),
    families=("transducer",),
    modes=("offline", "streaming"),
    source_formats=("huggingface", "native"),
    description="cache-aware FastConformer (chunked-limited attention, causal convs) + LSTM "
                "RNN-T",
)

__all__ = ["NEMOTRON_STREAMING"]
