"""FastConformer against transformers' Parakeet classes: tiny random checkpoints saved with
``save_pretrained``, converted by our converter, decoded by our families."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers", reason="pip install 'transformers>=5.23'")
tf = pytest.importorskip("transformers")
if not hasattr(tf, "ParakeetForTDT"):
    pytest.skip("transformers has no ParakeetForTDT; pip install 'transformers>=5.23'",
                allow_module_level=True)

from oasr.engine.decode.tdt_graph import TdtDeviceGreedy  # noqa: E402
from oasr.engine.decode.tdt_search import tdt_greedy  # noqa: E402
from oasr.engine.decode.transducer_search import greedy_search  # noqa: E402
from oasr.models.fastconformer.converters import HfParakeetRnntConverter  # noqa: E402
from oasr.models.fastconformer.transducer import FastConformerRnnt  # noqa: E402
from oasr.models.registry import build_model_from_checkpoint, detect_converter  # noqa: E402
from tests.models.fastconformer.hf_tiny import VOCAB, save_hf  # noqa: E402
from tests.models.fastconformer.reference import hf_hypotheses  # noqa: E402

BLANK = VOCAB - 1


def _batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    lens = torch.tensor([160, 97, 40])
    mask = torch.arange(160)[None] < lens[:, None]
    return torch.randn(3, 160, 16) * mask[..., None], lens, mask


@pytest.fixture(scope="module")
def ctc_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    folder = tmp_path_factory.mktemp("parakeet_ctc")
    return folder, save_hf("ctc", folder)


def test_ctc_encoder_and_greedy_match_transformers(ctc_folder) -> None:
    folder, hf = ctc_folder
    assert detect_converter(folder).architecture == "parakeet_ctc"
    ours = build_model_from_checkpoint(folder).eval()
    feats, lens, mask = _batch()
    with torch.no_grad():
        ref = hf.encoder(feats, attention_mask=mask.long())
        hidden, hidden_lens = ours.encode_offline(feats, lens)
        valid = ref.attention_mask.bool()
        assert hidden_lens.tolist() == valid.sum(-1).tolist()
        torch.testing.assert_close(hidden[valid], ref.last_hidden_state[valid],
                                   atol=1e-5, rtol=1e-5)
        log_probs, _ = ours.forward_offline(feats, lens)
        ref_ids = hf.generate(feats, attention_mask=mask.long())
    assert torch.equal(log_probs.argmax(-1)[valid], ref_ids[valid])


def test_rnnt_greedy_matches_transformers(tmp_path: Path) -> None:
    hf = save_hf("rnnt", tmp_path)
    assert isinstance(detect_converter(tmp_path), HfParakeetRnntConverter)
    ours = build_model_from_checkpoint(tmp_path).eval()
    assert isinstance(ours, FastConformerRnnt)
    cfg = ours.config
    feats, lens, mask = _batch()
    with torch.no_grad():
        out = hf.generate(feats, attention_mask=mask.long(), decoder_start_token_id=BLANK,
                          max_new_tokens=2000)
        hidden, hidden_lens = ours.encode_offline(feats, lens)
        hyps = greedy_search(ours.predictor, ours.joiner, hidden, hidden_lens,
                             max_sym_per_frame=cfg.max_symbols_per_step)
    ref = hf_hypotheses(out, hidden_lens, BLANK)
    assert any(r[0] for r in ref)
    assert [(h.tokens, h.frames) for h in hyps] == ref


def test_tdt_greedy_matches_transformers(tmp_path: Path) -> None:
    hf = save_hf("tdt", tmp_path, blank_bias=0.0)
    ours = build_model_from_checkpoint(tmp_path).eval()
    cfg = ours.config
    feats, lens, mask = _batch()
    with torch.no_grad():
        out = hf.generate(feats, attention_mask=mask.long(), decoder_start_token_id=BLANK,
                          max_new_tokens=2000)
        hidden, hidden_lens = ours.encode_offline(feats, lens)
        # transformers' TDT loop has no per-frame symbol limit: match it with an unreachable one
        hyps = tdt_greedy(ours.predictor, ours.joiner, hidden, hidden_lens, cfg.blank_id,
                          cfg.vocab_size, cfg.durations, max_symbols_per_step=10**6)
    ref = hf_hypotheses(out, hidden_lens, BLANK)
    assert any(r[0] for r in ref)
    assert [(h.tokens, h.frames) for h in hyps] == ref


def test_rnnt_beam_is_refused_for_the_recurrent_predictor(tmp_path: Path) -> None:
    from oasr.engine.decode.registry import build_decode_strategy

    save_hf("rnnt", tmp_path)
    model = build_model_from_checkpoint(tmp_path).eval()
    assert model.decode_families == ("transducer",)
    build_decode_strategy("transducer", model, {"beam_size": 1})
    with pytest.raises(ValueError, match="recurrent"):
        build_decode_strategy("transducer", model, {"beam_size": 4})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["ctc", "tdt"])
def test_cuda_fp32_matches_transformers(kind: str, tmp_path: Path) -> None:
    hf = save_hf(kind, tmp_path, blank_bias=0.0, extractor=False).cuda()
    ours = build_model_from_checkpoint(tmp_path).eval().cuda()
    feats, lens, mask = (t.cuda() for t in _batch())
    with torch.no_grad():
        hidden, hidden_lens = ours.encode_offline(feats, lens)
        if kind == "ctc":
            valid = hf.encoder(feats, attention_mask=mask.long()).attention_mask.bool()
            ref_ids = hf.generate(feats, attention_mask=mask.long())
            log_probs, _ = ours.forward_offline(feats, lens)
            assert torch.equal(log_probs.argmax(-1)[valid], ref_ids[valid])
            return
        out = hf.generate(feats, attention_mask=mask.long(), decoder_start_token_id=BLANK,
                          max_new_tokens=2000)
        cfg = ours.config
        hyps = tdt_greedy(ours.predictor, ours.joiner, hidden, hidden_lens, cfg.blank_id,
                          cfg.vocab_size, cfg.durations, max_symbols_per_step=10**6)
        graphed = TdtDeviceGreedy(ours.predictor, ours.joiner, cfg.blank_id, cfg.vocab_size,
                                  cfg.durations).search(hidden, hidden_lens, 10**6)
    ref = hf_hypotheses(out, hidden_lens.cpu(), BLANK)
    assert [(h.tokens, h.frames) for h in hyps] == ref
    assert [(h.tokens, h.frames) for h in graphed] == ref  # the device loop, from graphs
