"""The chunk-wise policy over the ``slot`` runtime: the tiny causal encoder of
``tests/engine/test_streaming_runtimes.py`` (declared slot states) behind a fbank frontend and a
CTC head; the streamed final equals greedy CTC over the encoder's offline chunk-masked output.
No registered architecture declares ``slot`` with a CTC head yet, so this runs the recognizer
on a stand-in engine (the model, frontend, tokenizer and the ``ctc`` family it reads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

from oasr.engine.decode.ctc import CtcDecodeStrategy, CtcOptions, ctc_search
from oasr.engine.decode.frame_sync import FrameSyncStrategy
from oasr.engine.decode.streaming import StreamingSession
from oasr.engine.input_processor import InputProcessor
from oasr.engine.request import Request
from oasr.features import FeatureConfig
from oasr.streaming import StreamingRecognizer, StreamOptions
from oasr.tokenizers.symbol_table import SymbolTableTokenizer
from oasr.vad.endpointer import EndpointConfig
from tests.engine.test_streaming_runtimes import F, T, TinyCausalEncoder

V = 6


class SlotEncoder(TinyCausalEncoder):
    streaming_kind = "slot"
    subsampling_rate = 1
    right_context = 0
    streaming_chunk_frames = T

    def streaming_geometry(self, chunk):
        return None


class SlotCtcModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = SlotEncoder()
        self.head = nn.Linear(self.encoder.out.out_features, V)
        self.config = SimpleNamespace(blank_id=0)
        with torch.no_grad():
            self.encoder.out.bias.zero_()  # keep the frame-to-frame variation dominant
            self.head.weight.mul_(100.0)

    def ctc_log_probs(self, hidden):
        return self.head(hidden).log_softmax(-1)


def _setup():
    torch.manual_seed(0)
    model = SlotCtcModel().eval()
    inputs = InputProcessor(FeatureConfig(feature_type="fbank", num_mel_bins=F), "cpu")
    tok = SymbolTableTokenizer({0: "<blank>", 1: "a", 2: "b", 3: "c", 4: "d", 5: "e"},
                               special_units=["<blank>"])
    rng = np.random.default_rng(0)
    frames = 40 * T
    n = 400 + 160 * (frames - 1)
    # Noise whose loudness and colour change every 50 ms: features that vary frame to frame.
    gain = np.repeat(10 ** rng.uniform(-3, 0, size=n // 800 + 1), 800)[:n]
    tone = np.sin(2 * np.pi * np.repeat(rng.uniform(100, 4000, n // 800 + 1), 800)[:n]
                  * np.arange(n) / 16000)
    audio = (gain * (0.5 * rng.standard_normal(n) + tone)).astype(np.float32)
    feats, _ = inputs([Request("x", audio)])
    assert feats.shape[1] == frames
    with torch.no_grad():
        lp = model.ctc_log_probs(model.encoder.offline(feats))
    return model, inputs, tok, audio, lp


def _stream(model, inputs, tok, strategy, audio):
    """The stand-in engine around ``strategy``, the audio streamed in 2000-sample pieces."""
    engine = SimpleNamespace(
        model=model, inputs=inputs, tokenizer=tok, sample_rate=16000, strategy=strategy,
        runner=SimpleNamespace(device=torch.device("cpu"), dtype=torch.float32))
    rec = StreamingRecognizer(engine, StreamOptions(endpoint=EndpointConfig(enabled=False)))
    assert rec.policy.kind == "slot"
    s = rec.create_stream()
    for i in range(0, len(audio), 2000):
        s.accept_waveform(16000, audio[i:i + 2000])
        while rec.is_ready(s):
            rec.decode_streams([s])
    s.input_finished()
    finals = []
    while rec.is_ready(s):
        rec.decode_streams([s])
        if rec.is_endpoint(s):
            finals.append(rec.get_result(s))
            rec.reset(s)
    return s, finals


def test_slot_runtime_stream_equals_offline_chunk_masked_ctc():
    model, inputs, tok, audio, lp = _setup()
    strategy = CtcDecodeStrategy(model, CtcOptions(beam_size=1), tokenizer=tok,
                                 feature_config=inputs.config)
    assert strategy.clock.seconds_per_frame == 0.01
    s, finals = _stream(model, inputs, tok, strategy, audio)
    want = ctc_search(lp.numpy(), np.array([lp.shape[1]]), 0, 1, 1.0, 1)[0][0]
    assert len(want.tokens) > 10
    assert len(finals) == 1 and finals[0].committed == tok.decode(want.tokens.tolist())
    assert s.stats.decodes == 40


@dataclass
class ArgmaxSearch:
    """Every non-blank frame's argmax, repeats kept (not CTC's collapse)."""

    tokens: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    frame: int = 0

    def feed(self, ids: list[int]) -> None:
        for i, t in enumerate(ids):
            if t:
                self.tokens.append(t)
                self.frames.append(self.frame + i)
                self.probs.append(1.0)
        self.frame += len(ids)

    def best(self) -> ArgmaxSearch:
        return self

    def stable_prefix(self) -> int:
        return len(self.tokens)

    def reset(self) -> None:
        self.__init__()


class ArgmaxSession(StreamingSession):
    name = "frame_argmax"

    def new_search(self) -> ArgmaxSearch:
        return ArgmaxSearch()

    def feed(self, searches, out, out_lens, languages) -> None:
        ids = self.strategy.model.ctc_log_probs(out).argmax(-1)
        for r, search in enumerate(searches):
            search.feed(ids[r, :int(out_lens[r])].tolist())


class ArgmaxStrategy(FrameSyncStrategy):
    name = "frame_argmax"
    streaming_session = ArgmaxSession


def test_a_new_family_streams_by_declaring_its_session():
    """A family defined here, not known to ``oasr.streaming``: its declared session drives the
    chunk-wise policy, and the final is its own search over the offline output."""
    model, inputs, tok, audio, lp = _setup()
    strategy = ArgmaxStrategy(model, tokenizer=tok, feature_config=inputs.config)
    _, finals = _stream(model, inputs, tok, strategy, audio)
    ids = [t for t in lp[0].argmax(-1).tolist() if t]
    assert any(a == b for a, b in zip(ids, ids[1:]))  # repeats: not what CTC would emit
    assert len(finals) == 1 and finals[0].committed == tok.decode(ids)
