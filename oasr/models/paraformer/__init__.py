"""Paraformer (FunASR, non-autoregressive CIF): the architecture entry.

``PARAFORMER`` names the model class and converter as strings, so importing this package
imports neither torch nor the converter; ``oasr.models`` registers it lazily.
"""

from __future__ import annotations

from oasr.models.registry import ModelEntry

PARAFORMER = ModelEntry(
    name="paraformer",
    model_cls="oasr.models.paraformer.model:ParaformerModel",
    converters=("oasr.models.paraformer.converters:FunasrParaformerConverter",),
    families=("paraformer",),
    modes=("offline",),
    source_formats=("funasr",),
    description="FunASR Paraformer: SAN-M encoder (FSMN memory in attention), CIF predictor, "
    "non-autoregressive SAN-M decoder; LFR fbank + am.mvn",
)

__all__ = ["PARAFORMER"]
