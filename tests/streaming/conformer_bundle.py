"""A chunk-wise Conformer bundle for streaming tests.

Upstream WeNet's tiny causal, dynamic-chunk checkpoint (``tests/fixtures/wenet_tiny/
causal_conv2d8``) is converted by our converter (tokenizer, frontend, config); its weights are
then replaced by a random 4x Conformer of the same family with a global CMVN measured on the
test audio, so the model's hidden states vary with speech and its CTC head emits varied
tokens (the fixture itself has no CMVN: on raw fbank its tiny encoder saturates to a few
tokens). The bundle's config and sha256 are rewritten to match.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import soundfile as sf
from safetensors.torch import save_file

from oasr.models.conformer.converters import WenetConformerConverter
from tests.models.conformer.wenet_fixtures import fixture_dir
from tests.transcribe.conftest import LIBRISPEECH as DATA


def write_conformer_bundle(dst: Path, seed: int = 0) -> Path:
    import torch

    from oasr.engine.input_processor import InputProcessor
    from oasr.engine.request import Request
    from oasr.models.bundle import read_bundle
    from oasr.models.conformer.config import ConformerConfig
    from oasr.models.conformer.model import ConformerModel

    WenetConformerConverter().convert(fixture_dir("causal_conv2d8"), dst)
    cfg_path = dst / "oasr_config.json"
    meta = json.loads(cfg_path.read_text())
    cfg = dict(meta["model_config"], global_cmvn=True, d_model=32, encoder_heads=4,
               encoder_layers=2, encoder_linear_units=64, input_layer="conv2d",
               cnn_module_norm="batch_norm")
    meta["model_config"] = cfg
    cfg_path.write_text(json.dumps(meta, indent=2))
    torch.manual_seed(seed)
    model = ConformerModel(ConformerConfig.from_dict(cfg)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
        model.ctc.ctc_lo.weight.mul_(4.0)
    audio, _ = two_utterances()
    frontend = InputProcessor(read_bundle(dst).build_feature_config(), "cpu")
    feats, _ = frontend([Request("cmvn", audio)])
    model.encoder.global_cmvn.mean.copy_(feats[0].mean(0))
    model.encoder.global_cmvn.istd.copy_(1.0 / feats[0].std(0).clamp_min(1e-3))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    weights = dst / "model.safetensors"
    save_file(state, str(weights))
    meta["provenance"]["weights_sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    cfg_path.write_text(json.dumps(meta, indent=2))
    return dst


def two_utterances(gap_s: float = 2.0) -> tuple[np.ndarray, int]:
    """Two LibriSpeech utterances with ``gap_s`` of silence between them (16 kHz)."""
    import pytest

    paths = [DATA / f"1688-142285-000{i}.flac" for i in (2, 3)]
    if not all(p.is_file() for p in paths):
        pytest.skip(f"needs {paths[0].parent}")
    a, sr = sf.read(paths[0], dtype="float32")
    b, _ = sf.read(paths[1], dtype="float32")
    return np.concatenate([a, np.zeros(int(gap_s * sr), np.float32), b]), sr
