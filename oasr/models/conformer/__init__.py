"""Conformer (WeNet U2 / U2++): the architecture entry.

``CONFORMER`` names the model class and converter as strings, so importing this package
imports neither torch nor the converter; ``oasr.models`` registers it lazily.
"""

from __future__ import annotations

from oasr.models.registry import ModelEntry

CONFORMER = ModelEntry(
    name="conformer",
    model_cls="oasr.models.conformer.model:ConformerModel",
    converters=("oasr.models.conformer.converters:WenetConformerConverter",),
    families=("ctc", "ctc_aed_rescoring"),
    modes=("offline",),
    source_formats=("wenet", "native"),
    description="WeNet U2/U2++ Conformer: conv2d subsampling + conformer encoder, CTC head, "
    "attention decoder(s) for rescoring",
)

__all__ = ["CONFORMER"]
