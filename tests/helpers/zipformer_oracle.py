"""The upstream oracle: PyPI ``zipformer`` (icefall's code), imported with stubs.

The package imports ``atdataset`` (training-time data loading), ``torchaudio`` (its CLI's
audio loading), ``kaldialign`` / ``kaldifst`` (WER scoring, n-gram LM) and TensorBoard at module
level; neither is used by the model's forward or by the searches, so stub modules stand in
for them in ``sys.modules`` before the import. ``oracle()`` returns ``None`` when the package
is absent, and tests skip naming the install command (``ORACLE_MISSING``).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any

ORACLE_MISSING = ("the zipformer oracle is not installed: pip install --no-deps zipformer==0.1.3 "
                  "kaldialign kaldifst simple-sentencepiece")


def _stub(name: str, **attrs: Any) -> None:
    """Put a module named ``name`` in ``sys.modules`` unless a real one is installed."""
    if name in sys.modules or importlib.util.find_spec(name.split(".")[0]) is not None:
        return
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules.setdefault(name, mod)


def _unused(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a training-only upstream path was reached from an oracle test")


def oracle() -> types.SimpleNamespace | None:
    """The upstream modules (``zipformer``, ``model``, ``subsampling``, ``search``) or None."""
    if importlib.util.find_spec("zipformer") is None:
        return None
    _stub("atdataset", SpecAugment=_unused, time_warp=_unused, fix_random_seed=_unused,
          ATDataloader=_unused, Fbank=_unused)
    _stub("torchaudio", load=_unused, info=_unused)
    # WER alignment and the n-gram LM's FST: imported at module level, used by neither the
    # model nor the searches the oracle tests call.
    _stub("kaldialign", align=_unused, edit_distance=_unused)
    _stub("kaldifst", StdVectorFst=_unused, StdConstFst=_unused)
    if importlib.util.find_spec("tensorboard") is None:
        board = types.ModuleType("torch.utils.tensorboard")
        board.SummaryWriter = _unused  # type: ignore[attr-defined]
        sys.modules.setdefault("torch.utils.tensorboard", board)
    from zipformer.decode import search
    from zipformer.modules import model, subsampling, zipformer

    return types.SimpleNamespace(zipformer=zipformer, model=model, subsampling=subsampling,
                                 search=search)


def asr_model(up: types.SimpleNamespace, cfg: Any, *, use_ctc: bool, chunk_size: int = -1,
              left_context_frames: int = -1) -> Any:
    """icefall's ``AsrModel`` with the geometry of our ``ZipformerConfig`` ``cfg`` (per-stack
    options as its "a,b,c" strings), whole-utterance attention (or, for a causal ``cfg``, one
    streaming ``chunk_size`` / ``left_context_frames``), the stateless transducer and
    optionally the CTC head; random (untrained) weights."""
    def csv(v: Any) -> str:
        return ",".join(map(str, v))

    return up.model.AsrModel(
        feature_dim=cfg.feature_dim, downsampling_factor=csv(cfg.downsampling_factor),
        encoder_dim=csv(cfg.encoder_dim), num_encoder_layers=csv(cfg.num_encoder_layers),
        encoder_unmasked_dim=csv(cfg.encoder_dim), query_head_dim=csv(cfg.query_head_dim),
        pos_head_dim=csv(cfg.pos_head_dim), value_head_dim=csv(cfg.value_head_dim),
        num_heads=csv(cfg.num_heads), feedforward_dim=csv(cfg.feedforward_dim),
        cnn_module_kernel=csv(cfg.cnn_module_kernel), pos_dim=cfg.pos_dim, causal=cfg.causal,
        chunk_size=str(chunk_size), left_context_frames=str(left_context_frames),
        use_ctc=use_ctc, use_transducer=True, vocab_size=cfg.vocab_size,
        decoder_dim=cfg.decoder_dim, joiner_dim=cfg.joiner_dim, context_size=cfg.context_size)
