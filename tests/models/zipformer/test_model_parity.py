"""icefall's Zipformer ``AsrModel`` (CTC + stateless transducer) against ours, end to end:
random weights in icefall's layout, converted by ``model_state_dict``, then CTC greedy,
transducer greedy and modified beam search through our decode families must give upstream's
hypotheses token for token."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.engine.decode import build_decode_strategy
from oasr.engine.request import DecodingOptions, Request
from oasr.models.zipformer.config import ZipformerConfig
from oasr.models.zipformer.converters import model_state_dict
from oasr.models.zipformer.model import ZipformerModel
from tests.helpers.zipformer_oracle import asr_model
from tests.models.zipformer.test_encoder_parity import TINY

HEADS = dict(vocab_size=13, blank_id=0, use_ctc=True, use_transducer=True, decoder_dim=16,
             joiner_dim=20, context_size=2)
# icefall's AsrModel builds its subsampler with the default channels (8, 32, 128).
GEOMETRY = {**TINY, "layer1_channels": 8, "layer2_channels": 32, "layer3_channels": 128}


def models(up, seed, causal=False):
    cfg = ZipformerConfig(**GEOMETRY, **HEADS, causal=causal)
    torch.manual_seed(seed)
    ref = asr_model(up, cfg, use_ctc=True)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.2)
        for p in list(ref.decoder.parameters()) + list(ref.joiner.parameters()):
            p.mul_(4.0)  # sharp transducer logits, so labels are emitted
        for p in ref.ctc_output.parameters():
            p.mul_(4.0)
    ref.eval()
    ours = ZipformerModel(cfg)
    ours.load_state_dict(model_state_dict(ref.state_dict()), strict=True)
    return ref, ours.eval()


def batch(seed, f):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 81, f, generator=g), torch.tensor([81, 60, 42])


def requests(n):
    return [Request(str(i), np.zeros(160, np.float32), DecodingOptions()) for i in range(n)]


@pytest.mark.parametrize("seed", [0, 1])
def test_ctc_and_transducer_hypotheses_match_icefall(up, seed):
    ref, ours = models(up, seed)
    feats, lens = batch(seed, ours.config.feature_dim)
    want_ctc, want_greedy, want_beam = [], [], []
    with torch.no_grad():
        hidden, hidden_lens = ours.encode_offline(feats, lens)
        for b in range(3):  # icefall decoding each utterance alone (ours: any batch)
            n = int(lens[b])
            enc, enc_lens = ref.forward_encoder(feats[b:b + 1, :n], lens[b:b + 1])
            assert int(hidden_lens[b]) == int(enc_lens[0])
            torch.testing.assert_close(hidden[b, :int(enc_lens[0])], enc[0], rtol=1e-4,
                                       atol=1e-4)
            want_ctc += up.search.ctc_greedy_search(ref.ctc_output(enc), enc_lens)
            want_greedy += up.search.greedy_search(ref, enc, enc_lens)
            want_beam += up.search.modified_beam_search(ref, enc, enc_lens, beam=4)
    ctc = build_decode_strategy("ctc", ours, {"beam_size": 1})
    lp, lp_lens = ours.forward_offline(feats, lens)
    got_ctc = [o.token_ids for o in ctc.decode_offline(lp, lp_lens, requests(3))]
    greedy = build_decode_strategy("transducer", ours)
    got_greedy = [o.token_ids for o in greedy.decode_offline(hidden, hidden_lens, requests(3))]
    fused = build_decode_strategy("transducer", ours, {"fused": True})
    got_fused = [o.token_ids for o in fused.decode_offline(hidden, hidden_lens, requests(3))]
    beam = build_decode_strategy("transducer", ours, {"beam_size": 4})
    got_beam = [o.token_ids for o in beam.decode_offline(hidden, hidden_lens, requests(3))]
    assert sum(map(len, want_greedy)) > 0 and sum(map(len, want_ctc)) > 0
    assert got_ctc == want_ctc
    assert got_greedy == want_greedy
    assert got_fused == want_greedy  # greedy_decode.cuh on the host executor
    assert got_beam == want_beam


def test_default_family_and_missing_head():
    cfg = ZipformerConfig(**TINY, **{**HEADS, "use_transducer": False})
    model = ZipformerModel(cfg)
    assert model.default_decode_type == "ctc"
    with pytest.raises(TypeError, match="predictor"):
        build_decode_strategy("transducer", model)
