"""The feature-frontend axis: ``register_extractor`` / ``build_extractor``."""

from __future__ import annotations

from oasr.features.spec import ExtractorSpec, FeatureConfig, StreamingFraming
from oasr.registry import Registry

EXTRACTORS: Registry[ExtractorSpec] = Registry(
    "feature extractor", entry_point_group="oasr.extractors"
)

# Built-in frontends, imported on first use.
EXTRACTORS.register("whisper_logmel", "oasr.features.whisper_logmel:WHISPER_LOGMEL")
EXTRACTORS.register("fbank", "oasr.features.kaldi_specs:FBANK")
EXTRACTORS.register("mfcc", "oasr.features.kaldi_specs:MFCC")

# FastConformer (Parakeet / NeMo) frontend.
EXTRACTORS.register("parakeet_logmel", "oasr.features.parakeet_spec:PARAKEET_LOGMEL")


def register_extractor(spec: ExtractorSpec) -> ExtractorSpec:
    EXTRACTORS.register(spec.kind, spec)
    return spec


def build_extractor(config: FeatureConfig) -> ExtractorSpec:
    return EXTRACTORS.get(config.feature_type)


__all__ = [
    "EXTRACTORS",
    "ExtractorSpec",
    "FeatureConfig",
    "StreamingFraming",
    "build_extractor",
    "register_extractor",
]
