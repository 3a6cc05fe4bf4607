"""FunASR Paraformer folders -> ``ParaformerModel``: ``config.yaml`` + ``model.pt`` (or the
older ``model.pb``, the same torch state dict) + ``tokens.json`` / ``tokens.txt`` + ``am.mvn``.

Shapes and options come from ``config.yaml`` (``ParaformerConfig.from_funasr`` refuses the
encoder / decoder / predictor variants not implemented); the ``am.mvn`` shift and scale become
the model's ``cmvn_shift`` / ``cmvn_scale`` buffers; the frontend is FunASR's ``WavFrontend``
(Kaldi fbank on 16-bit-scaled samples, LFR ``lfr_m`` / ``lfr_n``), declared as a
``FeatureConfig`` the engine reproduces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from oasr.features.spec import FeatureConfig
from oasr.models.converter import BaseCheckpointConverter, MappedWeights, read_yaml
from oasr.models.paraformer.config import ParaformerConfig
from oasr.models.safe_load import load_torch_checkpoint
from oasr.models.weight_map import Rule, WeightMap
from oasr.tokenizers.base import TokenizerSpec

__all__ = ["FunasrParaformerConverter", "read_config_yaml"]

CONFIG_NAME = "config.yaml"
WEIGHT_NAMES = ("model.pt", "model.pb")
TOKEN_NAMES = ("tokens.json", "tokens.txt")
MVN_NAME = "am.mvn"
# FunASR's names are ours once a DataParallel ``module.`` is stripped; names we do not know
# are kept, so the load report refuses them as unexpected.
_FUNASR_KEYS = WeightMap(
    Rule(r"(?:module\.)?decoder\.embed\..*",
         reason="token embedding the NAR decoder never reads"),
    Rule(r"(?:module\.)?(?:ctc|criterion_att)\..*",
         reason="training-only head (CTC loss / label smoothing)"),
    Rule(r"(?:module\.)?(.*)", r"\1"),
)


def read_config_yaml(path: Path) -> dict[str, Any] | None:
    """FunASR's ``config.yaml`` in ``path``, or ``None`` when absent (a damaged one raises
    ``CorruptCheckpointFileError`` naming it)."""
    return read_yaml(Path(path) / CONFIG_NAME)


def _first(path: Path, names: tuple[str, ...]) -> Path | None:
    return next((path / n for n in names if (path / n).is_file()), None)


class FunasrParaformerConverter(BaseCheckpointConverter):
    """A FunASR / ModelScope Paraformer model folder."""

    architecture = "paraformer"
    source_format = "funasr"
    detect_specificity = 10
    looks_for = "config.yaml with model: Paraformer, model.pt|model.pb, tokens.json|tokens.txt"
    config_class = "oasr.models.paraformer.config:ParaformerConfig"

    def detect(self, path: Path) -> bool:
        path = Path(path)
        if not path.is_dir() or _first(path, WEIGHT_NAMES) is None:
            return False
        if _first(path, TOKEN_NAMES) is None:
            return False
        cfg = read_config_yaml(path)
        return bool(cfg) and cfg.get("model") == "Paraformer"

    def _tokens(self, path: Path) -> Path:
        found = _first(path, TOKEN_NAMES)
        if found is None:
            raise FileNotFoundError(f"{path} has no token list ({' or '.join(TOKEN_NAMES)})")
        return found

    def build_config(self, path: Path) -> ParaformerConfig:
        from oasr.tokenizers.funasr_char import read_funasr_tokens

        path = Path(path)
        cfg = read_config_yaml(path)
        if not cfg or cfg.get("model") != "Paraformer":
            raise ValueError(f"{path}/{CONFIG_NAME} is not a FunASR Paraformer config "
                             "(model: Paraformer)")
        vocab = len(read_funasr_tokens(self._tokens(path)))
        declared = cfg.get("vocab_size")
        if declared is not None and int(declared) != vocab:
            raise ValueError(f"{path}: config.yaml vocab_size={declared} but the token list has "
                             f"{vocab} tokens")
        return ParaformerConfig.from_funasr(cfg, vocab)

    def expected_shapes(self, config: ParaformerConfig) -> dict[str, tuple[int, ...]]:
        from oasr.models.paraformer.model import ParaformerModel

        with torch.device("meta"):
            model = ParaformerModel(config)
        return {k: tuple(v.shape) for k, v in model.state_dict().items()}

    def map_weights(self, path: Path, config: ParaformerConfig) -> MappedWeights:
        from oasr.vad.fsmn import load_am_mvn

        path = Path(path)
        ckpt = _first(path, WEIGHT_NAMES)
        if ckpt is None:
            raise FileNotFoundError(f"{path} has no weights ({' or '.join(WEIGHT_NAMES)})")
        raw = load_torch_checkpoint(ckpt)
        for wrapper in ("state_dict", "model"):
            if isinstance(raw, dict) and isinstance(raw.get(wrapper), dict):
                raw = raw[wrapper]
        if not isinstance(raw, dict) or not all(isinstance(v, torch.Tensor) for v in raw.values()):
            raise ValueError(f"{ckpt} does not hold a state dict of tensors")
        out, _ = _FUNASR_KEYS.apply(raw)  # the last rule matches every key
        mvn = path / MVN_NAME
        if not mvn.is_file():
            raise FileNotFoundError(f"{path} has no {MVN_NAME}: Paraformer's features are "
                                    "normalised by it; copy it from the model folder")
        shift, scale = load_am_mvn(mvn)
        if shift.numel() != config.input_dim:
            raise ValueError(f"{mvn} has {shift.numel()} dims; the encoder reads "
                             f"{config.input_dim}")
        out.put("cmvn_shift", shift, str(mvn))
        out.put("cmvn_scale", scale, str(mvn))
        return out

    def build_feature_config(self, config: ParaformerConfig) -> FeatureConfig:
        return FeatureConfig(
            "fbank", sample_rate=16000, num_mel_bins=config.num_mel_bins,
            frame_length_ms=25.0, frame_shift_ms=10.0,
            params={"window_type": "hamming", "dither": 0.0, "audio_scale": 32768.0},
            lfr_m=config.lfr_m, lfr_n=config.lfr_n,
        )

    def build_tokenizer_spec(self, path: Path) -> TokenizerSpec:
        return TokenizerSpec(kind="funasr_char", files={"tokens": self._tokens(Path(path)).name})
