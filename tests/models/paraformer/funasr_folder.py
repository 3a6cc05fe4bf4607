"""A tiny random Paraformer built from FunASR's own classes, saved in FunASR's folder layout
(``config.yaml``, ``model.pt``, ``tokens.json``, ``am.mvn``), and FunASR's one-shot inference
over it (``Paraformer.inference`` without the tokenizer: encode, predictor, decoder, argmax).

FunASR's ``Paraformer`` class itself imports training-only modules (``six``); its inference is
the composition below of the three modules it builds.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch

pytest.importorskip("funasr", reason="pip install --no-deps funasr==1.4.16")
# FunASR's frontend module imports its EEND feature module (librosa) at import time; the
# fbank/LFR/CMVN path used here never touches it.
sys.modules.setdefault("funasr.frontends.eend_ola_feature",
                       types.ModuleType("funasr.frontends.eend_ola_feature"))
from funasr.frontends.wav_frontend import WavFrontend  # noqa: E402
from funasr.models.paraformer.cif_predictor import CifPredictorV2  # noqa: E402
from funasr.models.paraformer.decoder import ParaformerSANMDecoder  # noqa: E402
from funasr.models.sanm.encoder import SANMEncoder  # noqa: E402

N_MELS, LFR_M, LFR_N = 8, 7, 6
TOKENS = ["<blank>", "<s>", "</s>"] + list("abcdefghijklmnopqrstuvwxyz") + ["he@@", "llo", "<unk>"]

CONFIG = {
    "model": "Paraformer",
    "model_conf": {"ctc_weight": 0.0, "lsm_weight": 0.1, "predictor_weight": 1.0, "sos": 1,
                   "eos": 2},
    "frontend": "WavFrontend",
    "frontend_conf": {"fs": 16000, "window": "hamming", "n_mels": N_MELS, "frame_length": 25,
                      "frame_shift": 10, "lfr_m": LFR_M, "lfr_n": LFR_N, "dither": 0.0},
    "encoder": "SANMEncoder",
    "encoder_conf": {"output_size": 16, "attention_heads": 2, "linear_units": 24,
                     "num_blocks": 3, "dropout_rate": 0.0, "positional_dropout_rate": 0.0,
                     "attention_dropout_rate": 0.0, "input_layer": "pe",
                     "pos_enc_class": "SinusoidalPositionEncoder", "normalize_before": True,
                     "kernel_size": 5, "sanm_shfit": 0, "selfattention_layer_type": "sanm"},
    "decoder": "ParaformerSANMDecoder",
    "decoder_conf": {"attention_heads": 2, "linear_units": 24, "num_blocks": 3,
                     "dropout_rate": 0.0, "positional_dropout_rate": 0.0,
                     "self_attention_dropout_rate": 0.0, "src_attention_dropout_rate": 0.0,
                     "att_layer_num": 2, "kernel_size": 5, "sanm_shfit": 0},
    "predictor": "CifPredictorV2",
    "predictor_conf": {"idim": 16, "threshold": 1.0, "l_order": 1, "r_order": 1,
                       "tail_threshold": 0.45},
}


class FunasrParaformer(torch.nn.Module):
    """FunASR's three Paraformer modules under their state-dict prefixes."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        c = CONFIG
        enc = {k: v for k, v in c["encoder_conf"].items()
               if k not in ("pos_enc_class", "selfattention_layer_type")}
        self.encoder = SANMEncoder(input_size=N_MELS * LFR_M, **enc)
        self.predictor = CifPredictorV2(**c["predictor_conf"])
        self.decoder = ParaformerSANMDecoder(vocab_size=len(TOKENS), encoder_output_size=16,
                                             **c["decoder_conf"])
        # Sharper CIF weights than the default init, so rows fire a varied number of tokens.
        with torch.no_grad():
            self.predictor.cif_output.weight.mul_(4.0)
        self.eval()

    @torch.no_grad()
    def infer(self, feats: torch.Tensor, lens: torch.Tensor) -> dict[str, object]:
        """``Paraformer.inference`` from normalised LFR features, one call."""
        enc, enc_lens, _ = self.encoder(feats, lens)
        mask = (torch.arange(enc.shape[1])[None, :] < enc_lens[:, None])[:, None, :]
        embeds, token_num, alphas, peaks = self.predictor(enc, None, mask, ignore_id=-1)
        token_num = token_num.round().long()
        logits = self.decoder(enc, enc_lens, embeds, token_num)[0]
        logp = torch.log_softmax(logits, dim=-1)
        ids = []
        for i in range(feats.shape[0]):
            row = logp[i, :token_num[i]].argmax(-1).tolist()
            ids.append([t for t in row if t not in (0, 1, 2)])
        return {"encoder": enc, "encoder_lens": enc_lens, "alphas": alphas, "peaks": peaks,
                "token_num": token_num, "ids": ids}


def write_am_mvn(path: Path, shift: torch.Tensor, scale: torch.Tensor) -> None:
    n = shift.numel()

    def vec(v: torch.Tensor) -> str:
        return " ".join(f"{x:.6f}" for x in v.tolist())

    path.write_text(f"<Nnet>\n<Splice> {n} {n}\n[ 0 ]\n<AddShift> {n} {n}\n"
                    f"<LearnRateCoef> 0 [ {vec(shift)} ]\n<Rescale> {n} {n}\n"
                    f"<LearnRateCoef> 0 [ {vec(scale)} ]\n</Nnet>\n", encoding="utf-8")


def write_folder(folder: Path, seed: int = 0) -> FunasrParaformer:
    """The FunASR folder for a fresh random model; returns that model."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    model = FunasrParaformer(seed)
    torch.save(model.state_dict(), folder / "model.pt")
    (folder / "config.yaml").write_text(yaml.safe_dump(CONFIG), encoding="utf-8")
    (folder / "tokens.json").write_text(json.dumps(TOKENS), encoding="utf-8")
    g = torch.Generator().manual_seed(seed + 1)
    dim = N_MELS * LFR_M
    # Roughly a log-mel's statistics: mean about -10, spread about 3.
    write_am_mvn(folder / "am.mvn", 10.0 + torch.randn(dim, generator=g),
                 0.3 + 0.05 * torch.rand(dim, generator=g))
    return model


def funasr_frontend(folder: Path) -> WavFrontend:
    return WavFrontend(cmvn_file=str(folder / "am.mvn"), **CONFIG["frontend_conf"])
