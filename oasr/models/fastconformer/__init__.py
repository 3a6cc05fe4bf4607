"""FastConformer (NVIDIA Parakeet): the architecture entries, one per head.

``parakeet_ctc``, ``parakeet_rnnt`` and ``parakeet_tdt`` share the encoder
(``oasr.models.fastconformer.encoder``) and differ in the head and the decode family they
serve. Entries name classes as strings, so importing this package imports no torch.
"""

from __future__ import annotations

from oasr.models.registry import ModelEntry

_CONV = "oasr.models.fastconformer.converters:"
_NEMO = "oasr.models.fastconformer.nemo:"

PARAKEET_CTC = ModelEntry(
    name="parakeet_ctc",
    model_cls="oasr.models.fastconformer.model:FastConformerCtc",
    converters=(_CONV + "HfParakeetCtcConverter", _NEMO + "NemoCtcConverter"),
    families=("ctc",),
    modes=("offline",),
    source_formats=("huggingface", "nemo", "native"),
    description="FastConformer (8x depthwise-separable subsampling, rel-pos attention) + CTC head",
)
PARAKEET_RNNT = ModelEntry(
    name="parakeet_rnnt",
    model_cls="oasr.models.fastconformer.transducer:FastConformerRnnt",
    converters=(_CONV + "HfParakeetRnntConverter", _NEMO + "NemoRnntConverter"),
    families=("transducer",),
    modes=("offline",),
    source_formats=("huggingface", "nemo", "native"),
    description="FastConformer + LSTM prediction network + additive joint (RNN-T)",
)
PARAKEET_TDT = ModelEntry(
    name="parakeet_tdt",
    model_cls="oasr.models.fastconformer.transducer:FastConformerTdt",
    converters=(_CONV + "HfParakeetTdtConverter", _NEMO + "NemoTdtConverter"),
    families=("tdt",),
    modes=("offline",),
    source_formats=("huggingface", "nemo", "native"),
    description="FastConformer + LSTM prediction network + token-and-duration joint (TDT)",
)

__all__ = ["PARAKEET_CTC", "PARAKEET_RNNT", "PARAKEET_TDT"]
