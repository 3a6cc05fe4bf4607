"""One tiny CPU configuration per registered architecture, and a forward that exercises it.

Keyed by architecture name and checked against ``list_models()`` (``uncovered``): a new
architecture with no entry here fails the layer-waist and the contract tests instead of going
unchecked. ``exercise(model)`` runs every surface a decode family calls (encoder, head,
decoder steps), so a bare GEMM anywhere on those paths is seen by the waist's trace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

Exercise = Callable[[nn.Module], Any]


def tiny_whisper() -> tuple[Any, Exercise]:
    from oasr.models.whisper.config import WhisperConfig

    cfg = WhisperConfig(
        n_mels=16, vocab_size=64, d_model=32, encoder_layers=1, encoder_attention_heads=2,
        decoder_layers=1, decoder_attention_heads=2, encoder_ffn_dim=48, decoder_ffn_dim=48,
        max_source_positions=10, max_target_positions=16,
    )

    def exercise(model: nn.Module) -> Any:
        feats = torch.randn(2, 2 * cfg.max_source_positions, cfg.n_mels)
        enc = model.encode_offline(feats, torch.tensor([20, 12]))
        prompt = torch.tensor([[1, 2], [1, 2]])
        logits, state = model.decoder.prefill(enc, prompt, capacity=6)
        logits = model.decoder.step(logits.argmax(-1), state)
        state = model.decoder.select(state, torch.tensor([1]))
        model.decoder.step(logits[1:].argmax(-1), state)
        tokens = torch.tensor([[1, 2, 3], [1, 4, 5]])
        model.decoder.forced_logits(enc, tokens)
        cross = model.decoder.cross_kv(enc, None)
        return model.decoder.cross_attention_scores(tokens, cross.k, cross.v, [(0, 1)])

    return cfg, exercise


def tiny_conformer() -> tuple[Any, Exercise]:
    from oasr.models.conformer.config import ConformerConfig

    cfg = ConformerConfig(
        input_dim=16, vocab_size=12, d_model=16, encoder_layers=1, encoder_heads=2,
        encoder_linear_units=24, cnn_module_kernel=3, decoder="bitransformer", decoder_layers=1,
        r_decoder_layers=1, decoder_heads=2, decoder_linear_units=24,
    )

    def exercise(model: nn.Module) -> Any:
        feats = torch.randn(2, 23, cfg.input_dim)
        lens = torch.tensor([23, 15])
        model.forward_offline(feats, lens)
        hidden, hidden_lens = model.encode_offline(feats, lens)
        return model.attention_scores(hidden, hidden_lens, [[[1, 2]], [[3]]], reverse_weight=0.5)

    return cfg, exercise


def tiny_qwen2_audio() -> tuple[Any, Exercise]:
    from oasr.models.qwen2_audio.config import Qwen2AudioConfig

    cfg = Qwen2AudioConfig(
        n_mels=16, audio_d_model=32, audio_layers=1, audio_heads=2, audio_ffn_dim=48,
        max_source_positions=10, vocab_size=64, hidden_size=32, intermediate_size=48,
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, audio_token_id=60, eos_token_ids=[61, 62], pad_token_id=61,
    )

    def exercise(model: nn.Module) -> Any:
        feats = torch.randn(2, 2 * cfg.max_source_positions, cfg.n_mels)
        audio, lens = model.encode_offline(feats, torch.tensor([20, 12]))
        ids = torch.tensor([[61, 1, 60, 60, 2], [1, 60, 60, 60, 2]])
        starts = torch.tensor([1, 0])
        embeds = model.decoder.embed(ids)
        logits, state = model.decoder.prefill_embeds(embeds, starts, capacity=8)
        logits = model.decoder.step(logits.argmax(-1), state)
        state = model.decoder.select(state, torch.tensor([1]))
        model.decoder.step(logits[1:].argmax(-1), state)
        return model.decoder.forced_logits(embeds, starts), audio, lens

    return cfg, exercise


def tiny_zipformer() -> tuple[Any, Exercise]:
    from oasr.models.zipformer.config import ZipformerConfig

    cfg = ZipformerConfig(
        feature_dim=20, downsampling_factor=(1, 2), encoder_dim=(16, 24),
        num_encoder_layers=1, query_head_dim=8, pos_head_dim=4, value_head_dim=4, num_heads=2,
        feedforward_dim=32, cnn_module_kernel=5, pos_dim=16, layer1_channels=4,
        layer2_channels=8, layer3_channels=16, vocab_size=12, use_ctc=True,
        decoder_dim=16, joiner_dim=16,
    )

    def exercise(model: nn.Module) -> Any:
        feats = torch.randn(2, 41, cfg.feature_dim)
        lens = torch.tensor([41, 30])
        model.forward_offline(feats, lens)
        hidden, _ = model.encode_offline(feats, lens)
        state = model.predictor.init_state(2, hidden.device)
        dec = model.joiner.project_decoder(model.predictor.predict(state))
        return model.joiner(model.joiner.project_encoder(hidden[:, 0]), dec)

    return cfg, exercise


# -- Paraformer -----------------------------------------------------------------------------
def tiny_paraformer() -> tuple[Any, Exercise]:
    from oasr.models.paraformer.config import ParaformerConfig

    cfg = ParaformerConfig(
        input_dim=16, vocab_size=12, d_model=16, encoder_layers=2, encoder_heads=2,
        encoder_linear_units=24, encoder_kernel_size=3, decoder_layers=2, decoder_att_layers=1,
        decoder_heads=2, decoder_linear_units=24, decoder_kernel_size=3,
    )

    def exercise(model: nn.Module) -> Any:
        feats = torch.randn(2, 13, cfg.input_dim)
        hidden, lens = model.encode_offline(feats, torch.tensor([13, 9]))
        cif = model.predict(hidden, lens)
        return model.nar_decode(cif, hidden, lens)

    return cfg, exercise


TINY_CONFIGS: dict[str, Callable[[], tuple[Any, Exercise]]] = {
    "whisper": tiny_whisper,
    "conformer": tiny_conformer,
    "qwen2_audio": tiny_qwen2_audio,
    "zipformer": tiny_zipformer,
    "paraformer": tiny_paraformer,
}


def uncovered(names: list[str], table: dict[str, Any] = TINY_CONFIGS) -> list[str]:
    return [n for n in names if n not in table]


def build_tiny(name: str) -> tuple[nn.Module, Exercise]:
    """Architecture ``name`` built tiny on CPU in eval mode, and its exercise."""
    from oasr.models.registry import get_model_entry

    config, exercise = TINY_CONFIGS[name]()
    return get_model_entry(name).load_model_cls().from_config(config).eval(), exercise


# -- FastConformer (Parakeet) ---------------------------------------------------------------
def _tiny_fastconformer(head: str) -> tuple[Any, Exercise]:
    from oasr.models.fastconformer.config import FastConformerConfig

    cfg = FastConformerConfig(
        num_mel_bins=16, d_model=16, layers=1, heads=2, ff_dim=24, conv_kernel=3,
        subsampling_channels=4, head=head, vocab_size=12, blank_id=11, pred_hidden=8,
        pred_layers=1,
    )

    def exercise(model: nn.Module) -> Any:
        feats = torch.randn(2, 40, cfg.num_mel_bins)
        lens = torch.tensor([40, 25])
        if head == "ctc":
            return model.forward_offline(feats, lens)
        from oasr.engine.decode.tdt_search import tdt_greedy
        from oasr.engine.decode.transducer_search import greedy_search

        hidden, hidden_lens = model.encode_offline(feats, lens)
        if head == "rnnt":
            return greedy_search(model.predictor, model.joiner, hidden, hidden_lens,
                                 max_sym_per_frame=2)
        return tdt_greedy(model.predictor, model.joiner, hidden, hidden_lens, cfg.blank_id,
                          cfg.vocab_size, cfg.durations, cfg.max_symbols_per_step)

    return cfg, exercise


TINY_CONFIGS["parakeet_ctc"] = lambda: _tiny_fastconformer("ctc")
TINY_CONFIGS["parakeet_rnnt"] = lambda: _tiny_fastconformer("rnnt")
TINY_CONFIGS["parakeet_tdt"] = lambda: _tiny_fastconformer("tdt")


# -- Nemotron streaming (cache-aware FastConformer RNN-T) ------------------------------------
def _tiny_nemotron_streaming() -> tuple[Any, Exercise]:
    from oasr.models.nemotron_streaming.config import NemotronStreamingConfig

    cfg = NemotronStreamingConfig(
        num_mel_bins=16, d_model=16, layers=1, heads=2, ff_dim=24, conv_kernel=3,
        subsampling_channels=4, vocab_size=12, blank_id=11, pred_hidden=8, pred_layers=1,
        left_context=4, lookahead=1,
    )

    def exercise(model: nn.Module) -> Any:
        from oasr.engine.decode.transducer_search import greedy_search

        feats = torch.randn(2, 41, cfg.num_mel_bins)
        hidden, hidden_lens = model.encode_offline(feats, torch.tensor([41, 25]))
        state = model.init_stream_cache(1)
        first, state = model.encode_chunk(feats[:1, :cfg.first_chunk_features()], state)
        return (greedy_search(model.predictor, model.joiner, hidden, hidden_lens,
                              max_sym_per_frame=2), first)

    return cfg, exercise


TINY_CONFIGS["nemotron_streaming"] = _tiny_nemotron_streaming
