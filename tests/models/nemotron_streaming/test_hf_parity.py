"""nemotron_streaming against transformers' ``NemotronAsrStreamingForRNNT``: a tiny random
checkpoint saved with ``save_pretrained``, converted by our converter; offline encoder and
greedy tokens against its ``generate``, chunk-by-chunk encoder frames against its cache API and
streamed tokens against its streaming ``generate`` (a generator of mel chunks)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

tf = pytest.importorskip("transformers", reason="pip install 'transformers>=5.24'")
if not hasattr(tf, "NemotronAsrStreamingForRNNT"):
    pytest.skip("transformers has no NemotronAsrStreamingForRNNT; pip install "
                "'transformers>=5.24'", allow_module_level=True)

from oasr.engine.decode.transducer_search import greedy_search  # noqa: E402
from oasr.engine.decode.transducer_streaming import TransducerGreedyStream  # noqa: E402
from oasr.models.nemotron_streaming.model import NemotronStreamingRnnt  # noqa: E402
from oasr.models.registry import build_model_from_checkpoint, detect_converter  # noqa: E402
from tests.models.fastconformer.reference import hf_hypotheses  # noqa: E402
from tests.models.nemotron_streaming.hf_tiny import VOCAB, reference_chunk, save_hf  # noqa: E402

BLANK = VOCAB - 1
LOOKAHEAD = 1  # the tiny checkpoint's default: 2-frame chunks, 6 frames of left context


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    path = tmp_path_factory.mktemp("nemotron_streaming")
    return path, save_hf(path)


def _chunks(feats: torch.Tensor, lookahead: int) -> list[torch.Tensor]:
    first, per = 1 + 8 * lookahead, 8 * (lookahead + 1)
    out, p = [feats[:, :first]], first
    while p + per <= feats.shape[1]:
        out.append(feats[:, p:p + per])
        p += per
    return out


def test_offline_encoder_and_greedy_match_generate(folder) -> None:
    path, hf = folder
    assert detect_converter(path).architecture == "nemotron_streaming"
    ours = build_model_from_checkpoint(path).eval()
    assert isinstance(ours, NemotronStreamingRnnt)
    assert ours.config.left_context == 6 and ours.config.lookahead == LOOKAHEAD
    torch.manual_seed(1)
    lens = torch.tensor([201, 130])
    mask = torch.arange(201)[None] < lens[:, None]
    feats = torch.randn(2, 201, 16) * mask[..., None]
    with torch.no_grad():
        ref = hf.encoder(feats, attention_mask=mask.long(), num_lookahead_tokens=LOOKAHEAD)
        hidden, hidden_lens = ours.encode_offline(feats, lens)
        valid = ref.attention_mask.bool()
        assert hidden_lens.tolist() == valid.sum(-1).tolist()
        for b, n in enumerate(hidden_lens.tolist()):
            torch.testing.assert_close(hidden[b, :n], ref.last_hidden_state[b, :n],
                                       atol=2e-5, rtol=1e-4)
        out = hf.generate(feats, attention_mask=mask.long(), decoder_start_token_id=BLANK,
                          num_lookahead_tokens=LOOKAHEAD, max_new_tokens=2000)
        hyps = greedy_search(ours.predictor, ours.joiner, hidden, hidden_lens,
                             max_sym_per_frame=ours.config.max_symbols_per_step)
    expected = hf_hypotheses(out, hidden_lens, BLANK)
    assert any(r[0] for r in expected)
    assert [(h.tokens, h.frames) for h in hyps] == expected


@pytest.mark.parametrize("lookahead", [LOOKAHEAD, 0, 3])
def test_chunked_encoder_matches_reference_cache_api(folder, lookahead: int) -> None:
    from transformers import DynamicCache

    path, hf = folder
    ours = build_model_from_checkpoint(path).eval()
    torch.manual_seed(2)
    chunks = _chunks(torch.randn(1, 300, 16), lookahead)
    ref_frames, ours_frames = [], []
    with torch.no_grad():
        cache, padding = DynamicCache(config=hf.config.encoder_config), None
        state = ours.init_stream_cache(1)
        for c in chunks:
            o, cache, padding = reference_chunk(hf, c, cache, padding, lookahead)
            y, state = ours.encode_chunk(c, state, lookahead)
            assert y.shape[1] == lookahead + 1
            ref_frames.append(o.last_hidden_state)
            ours_frames.append(y)
    ref_all, ours_all = torch.cat(ref_frames, 1), torch.cat(ours_frames, 1)
    assert ref_all.shape[1] > 3 * (ours.config.left_context + 1)  # the cache wraps
    torch.testing.assert_close(ours_all, ref_all, atol=2e-5, rtol=1e-4)


def test_streamed_tokens_match_streaming_generate(folder) -> None:
    path, hf = folder
    ours = build_model_from_checkpoint(path).eval()
    torch.manual_seed(3)
    chunks = _chunks(torch.randn(1, 297, 16), LOOKAHEAD)
    with torch.no_grad():
        out = hf.generate(input_features=(c for c in chunks), decoder_start_token_id=BLANK,
                          num_lookahead_tokens=LOOKAHEAD)
        state, frames = ours.init_stream_cache(1), []
        for c in chunks:
            y, state = ours.encode_chunk(c, state, LOOKAHEAD)
            frames.append(y)
        hidden = torch.cat(frames, 1)
        n = torch.tensor([hidden.shape[1]])
        hyps = greedy_search(ours.predictor, ours.joiner, hidden, n,
                             max_sym_per_frame=ours.config.max_symbols_per_step)
    expected = hf_hypotheses(out, n, BLANK)
    assert expected[0][0]
    assert [(h.tokens, h.frames) for h in hyps] == expected


def test_stateful_runtime_matches_reference_streaming(folder) -> None:
    """Three streams through the ``stateful`` runtime, started at different steps (cohorts mix
    first and later chunks): each stream's frames equal the reference's streaming encoder
    (batch 1) and its greedy tokens, searched chunk by chunk, the reference's streaming
    ``generate``."""
    from transformers import DynamicCache

    from oasr.engine.streaming_backend import build_streaming_backend

    path, hf = folder
    ours = build_model_from_checkpoint(path).eval()
    assert ours.encoder.streaming_kind == "stateful"
    backend = build_streaming_backend(ours)
    torch.manual_seed(4)
    streams = {i: _chunks(torch.randn(1, n, 16), LOOKAHEAD)
               for i, n in enumerate([297, 217, 153])}
    start = {0: 0, 1: 2, 2: 5}
    got: dict[int, list[torch.Tensor]] = {i: [] for i in streams}
    cfg = ours.config
    searches = {i: TransducerGreedyStream(ours.predictor, ours.joiner, cfg.max_symbols_per_step)
                for i in streams}
    with torch.no_grad():
        for step in range(40):
            cohort = [i for i in streams
                      if start[i] <= step < start[i] + len(streams[i])]
            if not cohort:
                continue
            for i in cohort:
                if step == start[i]:
                    backend.allocate(i)
            chunks = [streams[i][step - start[i]][0] for i in cohort]
            width = max(c.shape[0] for c in chunks)
            x = torch.zeros(len(cohort), width, 16)
            for r, c in enumerate(chunks):
                x[r, :c.shape[0]] = c
            lens = torch.tensor([c.shape[0] for c in chunks])
            out, out_lens = backend.forward_step(cohort, x, lens)
            for r, i in enumerate(cohort):
                got[i].append(out[r:r + 1, :int(out_lens[r])])
                searches[i].feed(out[r, :int(out_lens[r])])
                if step - start[i] == len(streams[i]) - 1:
                    backend.free(i)
        for i, chunks in streams.items():
            cache, padding, ref = DynamicCache(config=hf.config.encoder_config), None, []
            for c in chunks:
                o, cache, padding = reference_chunk(hf, c, cache, padding, LOOKAHEAD)
                ref.append(o.last_hidden_state)
            hidden = torch.cat(got[i], 1)
            torch.testing.assert_close(hidden, torch.cat(ref, 1), atol=2e-5, rtol=1e-4)
            out = hf.generate(input_features=(c for c in chunks), decoder_start_token_id=BLANK,
                              num_lookahead_tokens=LOOKAHEAD)
            n = torch.tensor([hidden.shape[1]])
            hyp = searches[i].best()
            assert [(hyp.tokens, hyp.frames)] == hf_hypotheses(out, n, BLANK)


def test_stateful_runtime_refuses_a_wrong_chunk(folder) -> None:
    from oasr.engine.streaming_backend import build_streaming_backend

    path, _ = folder
    backend = build_streaming_backend(build_model_from_checkpoint(path).eval())
    backend.allocate(0)
    with pytest.raises(ValueError, match="feature frames first"):
        backend.forward_step([0], torch.zeros(1, 16, 16), torch.tensor([16]))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_stateful_runtime_matches_reference(folder) -> None:
    from transformers import DynamicCache

    from oasr.engine.streaming_backend import build_streaming_backend

    path, hf = folder
    hf = hf.cuda()
    ours = build_model_from_checkpoint(path).eval().cuda()
    backend = build_streaming_backend(ours, device="cuda")
    backend.allocate(0)
    torch.manual_seed(5)
    chunks = _chunks(torch.randn(1, 297, 16, device="cuda"), LOOKAHEAD)
    ref, got = [], []
    with torch.no_grad():
        cache, padding = DynamicCache(config=hf.config.encoder_config), None
        for c in chunks:
            o, cache, padding = reference_chunk(hf, c, cache, padding, LOOKAHEAD)
            ref.append(o.last_hidden_state)
            out, lens = backend.forward_step([0], c, torch.tensor([c.shape[1]], device="cuda"))
            got.append(out[:, :int(lens[0])])
    torch.testing.assert_close(torch.cat(got, 1), torch.cat(ref, 1), atol=1e-4, rtol=1e-3)


def test_configure_streaming_picks_a_trained_lookahead(folder) -> None:
    path, hf = folder
    ours = build_model_from_checkpoint(path).eval()
    enc = ours.encoder
    with pytest.raises(ValueError, match="trained with lookaheads"):
        enc.configure_streaming(chunk_frames=3)
    with pytest.raises(ValueError, match="left context"):
        enc.configure_streaming(chunk_frames=1, left_chunks=2)
    enc.configure_streaming(chunk_frames=1, left_chunks=6)  # lookahead 0
    assert enc.streaming_chunk_frames == 1 and ours.config.first_chunk_features() == 1
    torch.manual_seed(6)
    feats = torch.randn(1, 120, 16)
    with torch.no_grad():
        ref = hf.encoder(feats, attention_mask=torch.ones(1, 120, dtype=torch.long),
                         num_lookahead_tokens=0).last_hidden_state
        hidden, _ = ours.encode_offline(feats, torch.tensor([120]))
    torch.testing.assert_close(hidden, ref, atol=2e-5, rtol=1e-4)
