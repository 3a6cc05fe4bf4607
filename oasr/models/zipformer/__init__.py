"""Zipformer2 (icefall): the architecture entry, registered lazily by ``oasr.models``."""

from __future__ import annotations

from oasr.models.registry import ModelEntry

ZIPFORMER = ModelEntry(
    name="zipformer",
    model_cls="oasr.models.zipformer.model:ZipformerModel",
    converters=("oasr.models.zipformer.checkpoint:IcefallZipformerConverter",),
    families=("transducer", "ctc"),
    modes=("offline",),
    source_formats=("icefall", "native"),
    description="icefall Zipformer2: Conv2d+ConvNeXt subsampling, multi-resolution stacks, "
    "CTC head and / or the stateless transducer",
)

__all__ = ["ZIPFORMER"]
