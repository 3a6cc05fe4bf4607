"""The FastConformer model class for each head (``ctc``, ``rnnt``, ``tdt``)."""

from __future__ import annotations

__all__ = ["model_class"]


def model_class(head: str) -> type:
    from oasr.models.fastconformer.model import FastConformerCtc
    from oasr.models.fastconformer.transducer import FastConformerRnnt, FastConformerTdt

    classes = {"ctc": FastConformerCtc, "rnnt": FastConformerRnnt, "tdt": FastConformerTdt}
    if head not in classes:
        raise ValueError(f"no FastConformer head {head!r}; valid: {', '.join(classes)}")
    return classes[head]
