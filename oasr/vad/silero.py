"""Silero VAD (v5/v6, MIT) built from ``oasr.layers``, loading the ``silero-vad`` package's weights.

The network reads windows of ``frame + context`` samples (16 kHz: 512 + 64; 8 kHz: 256 + 32), the
context being the previous window's last samples (zeros before the first). Per window:

1. reflect-pad ``pad`` samples on the right; an STFT as a strided convolution with a fixed
   basis (``stft_conv``: 2 * (n_fft / 2 + 1) channels, kernel n_fft, hop n_fft / 2) and its
   magnitude -> (4, n_fft / 2 + 1);
2. four Conv1d + ReLU (strides 1, 2, 2, 1) -> one 128-dim vector;
3. an LSTM cell carried across windows, ReLU, a 1x1 conv and a sigmoid -> P(speech).

Only step 3 carries state, so the offline path runs steps 1-2 for every window of every row as
one batch and steps the LSTM over the window axis.

Weights: the package's TorchScript archive ``silero_vad.jit`` holds both rates' networks, and
its ONNX exports hold the same numbers; that is what ``load_silero_vad()`` runs, so it is the
default source (read as a state dict, never executed). The package's
``silero_vad_16k.safetensors`` (its tinygrad port's file) holds *different* 16 kHz weights:
``source="safetensors"`` loads those, and its probabilities differ from the jit's by up to ~0.6
on real speech, so it is not the reference model.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers import LSTM, Conv1d, Relu, Sigmoid
from oasr.models.torchscript_weights import load_torchscript_tensors
from oasr.vad.spec import SpeechDetector, SpeechProbs, VadFraming, VadSpec

SAFETENSORS = "silero_vad_16k.safetensors"
JIT = "silero_vad.jit"
HIDDEN = 128
# Per sample rate: (n_fft, samples per probability, left context samples).
GEOMETRY = {16000: (256, 512, 64), 8000: (128, 256, 32)}


class SileroNet(nn.Module):
    """One sample rate's network. ``encode`` windows (W, frame + context) -> (W, 128);
    ``decode`` (B, N, 128) and (h, c) each (1, B, 128) -> probs (B, N), (h, c); with
    ``lengths`` (B,) a row's state stops after its own frames."""

    def __init__(self, n_fft: int) -> None:
        super().__init__()
        self.n_fft = n_fft
        self.pad = n_fft // 4
        self.bins = n_fft // 2 + 1
        self.stft_conv = Conv1d(1, 2 * self.bins, n_fft, stride=n_fft // 2, bias=False)
        self.conv1 = Conv1d(self.bins, 128, 3, padding=1)
        self.conv2 = Conv1d(128, 64, 3, stride=2, padding=1)
        self.conv3 = Conv1d(64, 64, 3, stride=2, padding=1)
        self.conv4 = Conv1d(64, HIDDEN, 3, padding=1)
        self.relu = Relu()
        self.lstm = LSTM(HIDDEN, HIDDEN)
        self.final_conv = Conv1d(HIDDEN, 1, 1)
        self.sigmoid = Sigmoid()

    def encode(self, windows: torch.Tensor) -> torch.Tensor:
        x = F.pad(windows.unsqueeze(1), (0, self.pad), mode="reflect")  # (W, 1, L + pad)
        spec = self.stft_conv(x.transpose(1, 2))  # (W, frames, 2 * bins)
        real, imag = spec[..., : self.bins], spec[..., self.bins:]
        x = torch.sqrt(real * real + imag * imag)
        for conv in (self.conv1, self.conv2, self.conv3, self.conv4):
            x = self.relu(conv(x))
        return x.mean(dim=1)  # (W, 128): the encoder leaves one frame per window

    def decode(self, feats: torch.Tensor, h: torch.Tensor, c: torch.Tensor,
               lengths: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, (h, c) = self.lstm(feats, (h, c), lengths=lengths)
        probs = self.sigmoid(self.final_conv(self.relu(out)))  # (B, N, 1)
        return probs.squeeze(-1), h, c


@contextlib.contextmanager
def _ieee_convolutions(device: torch.device) -> Iterator[None]:
    """cuDNN convolutions in full fp32 (not TF32, torch's default for them) on a CUDA device:
    the probabilities then match the CPU's, where a threshold decides every frame. Through the
    legacy flag, which sets conv and RNN alike: setting one of them by the per-operator API
    makes torch refuse to read the legacy flag (torch 2.9+) wherever it is read later."""
    if device.type != "cuda":
        yield
        return
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = old


@dataclass
class SileroState:
    """Per-stream (or stacked) state: h, c (1, B, 128); context (B, context samples)."""

    h: torch.Tensor
    c: torch.Tensor
    context: torch.Tensor


def _package_dir() -> Path | None:
    # find_spec on the top-level name locates the package without importing it: importing
    # silero_vad calls torch.set_num_threads(1) for the whole process.
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data"
    return path if (path / JIT).is_file() else None


def _lstm_keys(prefix: str, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {f"lstm.{k}_l0": sd[f"{prefix}{k}"]
            for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}


def _load_16k(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    sd = load_file(str(path))
    out = {k: v for k, v in sd.items() if not k.startswith("lstm_cell.")}
    out.update(_lstm_keys("lstm_cell.", sd))
    return out


def _load_jit(path: Path, sample_rate: int) -> dict[str, torch.Tensor]:
    # The archive's tensors only: its TorchScript code is never compiled or run.
    sd = load_torchscript_tensors(path)
    p = "_model." if sample_rate == 16000 else "_model_8k."
    out = {"stft_conv.weight": sd[p + "stft.forward_basis_buffer"],
           "final_conv.weight": sd[p + "decoder.decoder.2.weight"],
           "final_conv.bias": sd[p + "decoder.decoder.2.bias"]}
    for i in range(4):
        for kind in ("weight", "bias"):
            out[f"conv{i + 1}.{kind}"] = sd[f"{p}encoder.{i}.reparam_conv.{kind}"]
    out.update(_lstm_keys(p + "decoder.rnn.", sd))
    return out


class SileroVad(SpeechDetector):
    """Silero VAD at 16 and 8 kHz. ``weights``: a folder holding ``silero_vad.jit`` (and, for
    ``source="safetensors"``, ``silero_vad_16k.safetensors``), as the ``silero-vad`` package
    installs it."""

    stateful = True

    def __init__(self, weights: str | Path, device: str | torch.device = "cpu",
                 source: str = "jit") -> None:
        if source not in ("jit", "safetensors"):
            raise ValueError(f"Silero weight source {source!r}: expected 'jit' or 'safetensors'")
        self.weights = Path(weights)
        self.device = torch.device(device)
        self.source = source
        self._nets: dict[int, SileroNet] = {}

    @staticmethod
    def find_weights(model_dir: str | Path | None) -> Path | None:
        if model_dir is None:
            return _package_dir()
        path = Path(model_dir)
        return path if (path / JIT).is_file() or (path / SAFETENSORS).is_file() else None

    def net(self, sample_rate: int) -> SileroNet:
        if sample_rate not in GEOMETRY:
            raise ValueError(f"Silero VAD runs at {sorted(GEOMETRY)} Hz, not {sample_rate}; "
                             "resample the audio first")
        if sample_rate not in self._nets:
            if self.source == "safetensors":
                if sample_rate != 16000:
                    raise ValueError("the Silero safetensors file holds only the 16 kHz network")
                sd = _load_16k(self.weights / SAFETENSORS)
            else:
                sd = _load_jit(self.weights / JIT, sample_rate)
            net = SileroNet(GEOMETRY[sample_rate][0])
            net.load_state_dict(sd, strict=True)
            self._nets[sample_rate] = net.to(self.device).eval()
        return self._nets[sample_rate]

    # -- offline ------------------------------------------------------------------------
    def detect(self, waveforms: torch.Tensor, lengths: torch.Tensor,
               sample_rate: int) -> SpeechProbs:
        """waveforms (B, T) float, lengths (B,) -> probabilities (B, ceil(T / frame))."""
        _, frame, _ = GEOMETRY[sample_rate]
        b = waveforms.shape[0]
        lengths = lengths.to(torch.long).cpu()
        n = -(-waveforms.shape[1] // frame)
        wav = waveforms.to(self.device, torch.float32)
        # Samples past a row's end are zero, as the reference pads its last window.
        keep = torch.arange(wav.shape[1], device=wav.device) < lengths.to(wav.device)[:, None]
        wav = F.pad(wav * keep, (0, n * frame - wav.shape[1]))
        state = self.init_state(b, sample_rate)
        probs, _ = self.detect_streaming(wav, state, sample_rate)
        frames = (lengths + frame - 1) // frame
        probs = probs * (torch.arange(n, device=probs.device) < frames.to(probs.device)[:, None])
        return SpeechProbs(probs, frames, frame / sample_rate)

    # -- streaming ----------------------------------------------------------------------
    def init_state(self, batch: int, sample_rate: int) -> SileroState:
        ctx = GEOMETRY[sample_rate][2]
        zeros = torch.zeros(1, batch, HIDDEN, device=self.device)
        return SileroState(zeros, zeros.clone(), torch.zeros(batch, ctx, device=self.device))

    @torch.inference_mode()
    def detect_streaming(self, chunk: torch.Tensor, state: SileroState, sample_rate: int,
                         frames: torch.Tensor | None = None) -> tuple[torch.Tensor, SileroState]:
        """chunk (B, k * frame) -> probs (B, k) and the state after it; ``frames`` (B,): the
        whole frames of each row (the rest padding), which its state stops after."""
        net = self.net(sample_rate)
        _, frame, ctx = GEOMETRY[sample_rate]
        b, t = chunk.shape
        if t % frame:
            raise ValueError(f"a Silero chunk is a whole number of {frame}-sample frames at "
                             f"{sample_rate} Hz, got {t} samples")
        x = torch.cat([state.context, chunk.to(self.device, torch.float32)], dim=1)
        n = t // frame
        windows = x.unfold(1, frame + ctx, frame)  # (B, n, frame + ctx)
        if frames is not None:
            frames = frames.to(self.device, torch.long)
        with _ieee_convolutions(self.device):
            feats = net.encode(windows.reshape(b * n, frame + ctx)).reshape(b, n, HIDDEN)
            probs, h, c = net.decode(feats, state.h, state.c, lengths=frames)
        if frames is None:
            return probs, SileroState(h, c, x[:, x.shape[1] - ctx:].clone())
        # each row's next context: the ctx samples before its own end
        ends = frames * frame + ctx  # (B,) in x
        idx = ends[:, None] - ctx + torch.arange(ctx, device=x.device)
        return probs, SileroState(h, c, torch.gather(x, 1, idx))

    def stack_states(self, states: list[SileroState]) -> SileroState:
        return SileroState(torch.cat([s.h for s in states], dim=1),
                           torch.cat([s.c for s in states], dim=1),
                           torch.cat([s.context for s in states], dim=0))

    def unstack_states(self, state: SileroState) -> list[SileroState]:
        return [SileroState(state.h[:, i:i + 1], state.c[:, i:i + 1], state.context[i:i + 1])
                for i in range(state.context.shape[0])]


SILERO_SPEC = VadSpec(
    "silero", SileroVad, consumes="waveform", modes=("presegment", "stream", "posthoc"),
    needs_weights=True, stateful=True,
    framing=VadFraming(frame_samples={16000: 512, 8000: 256},
                       context_samples={16000: 64, 8000: 32}),
    weights_hint="install the weights with `pip install 'oasr[vad]'` (PyPI silero-vad) or pass "
                 "--vad-model-dir to a folder holding silero_vad.jit",
)
