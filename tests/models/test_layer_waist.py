"""The ratchet: every registered architecture is built from ``oasr.layers`` only.

The tiny-config table is keyed off ``list_models()``: an architecture with no entry fails
rather than going uncovered. Each is built tiny on CPU, walked with ``named_modules()``, and
fails on any bare torch layer; its encoder also runs on CPU (the routed forms must not
raise on a CPU tensor).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from oasr.models.registry import get_model_entry, list_models

BARE_TORCH_LAYERS: tuple[type[nn.Module], ...] = (
    nn.Linear, nn.Bilinear, nn.Conv1d, nn.Conv2d, nn.ConvTranspose1d, nn.LayerNorm,
    nn.GroupNorm, nn.Embedding, nn.LSTM, nn.GRU, nn.RNN, nn.AvgPool1d, nn.MultiheadAttention,
    nn.GELU, nn.ReLU, nn.SiLU, nn.Sigmoid, nn.Tanh, nn.GLU, nn.Softmax, nn.LogSoftmax,
)


def bare_torch_layers(model: nn.Module) -> list[str]:
    """Names of the submodules that are bare torch layers instead of ``oasr.layers``."""
    return [
        f"{name or '<root>'}: {type(mod).__module__}.{type(mod).__name__}"
        for name, mod in model.named_modules()
        if type(mod) in BARE_TORCH_LAYERS
    ]


def _tiny_whisper() -> tuple[Any, Callable[[nn.Module], Any]]:
    from oasr.models.whisper.config import WhisperConfig

    cfg = WhisperConfig(
        n_mels=16, vocab_size=64, d_model=32, encoder_layers=1, encoder_attention_heads=2,
        decoder_layers=1, decoder_attention_heads=2, encoder_ffn_dim=48, decoder_ffn_dim=48,
        max_source_positions=10, max_target_positions=16,
    )

    def encode(model: nn.Module) -> Any:
        feats = torch.randn(2, 2 * cfg.max_source_positions, cfg.n_mels)
        return model.encode_offline(feats, torch.tensor([20, 12]))

    return cfg, encode


def _tiny_conformer() -> tuple[Any, Callable[[nn.Module], Any]]:
    from oasr.models.conformer.config import ConformerConfig

    cfg = ConformerConfig(
        input_dim=16, vocab_size=12, d_model=16, encoder_layers=1, encoder_heads=2,
        encoder_linear_units=24, cnn_module_kernel=3, decoder="bitransformer", decoder_layers=1,
        r_decoder_layers=1, decoder_heads=2, decoder_linear_units=24,
    )

    def encode(model: nn.Module) -> Any:
        feats = torch.randn(2, 23, cfg.input_dim)
        hidden, lens = model.encode_offline(feats, torch.tensor([23, 15]))
        return model.attention_scores(hidden, lens, [[[1, 2]], [[3]]], reverse_weight=0.5)

    return cfg, encode


# architecture -> () -> (tiny config, fn(model) running its encoder on CPU)
TINY_CONFIGS: dict[str, Callable[[], tuple[Any, Callable[[nn.Module], Any]]]] = {
    "whisper": _tiny_whisper,
    "conformer": _tiny_conformer,
}


def uncovered(names: list[str], table: dict[str, Any]) -> list[str]:
    return [n for n in names if n not in table]


def test_every_registered_architecture_has_a_tiny_config():
    missing = uncovered([e.name for e in list_models()], TINY_CONFIGS)
    assert not missing, f"add a tiny config to TINY_CONFIGS for: {missing}"


@pytest.mark.parametrize("name", [e.name for e in list_models()])
def test_architecture_uses_only_the_layer_waist(name):
    config, encode = TINY_CONFIGS[name]()
    model = get_model_entry(name).load_model_cls().from_config(config).eval()
    bare = bare_torch_layers(model)
    assert not bare, f"{name} uses bare torch layers; build them from oasr.layers: {bare}"
    with torch.no_grad():
        out = encode(model)
    assert out is not None


def test_ratchet_flags_bare_layers_and_passes_waist_layers():
    from oasr.layers import Linear

    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(2, 2)
            self.inner = nn.Sequential(nn.Conv1d(2, 2, 1), nn.GELU())
            self.ok = Linear(2, 2)

    found = bare_torch_layers(Bad())
    assert found == [
        "proj: torch.nn.modules.linear.Linear",
        "inner.0: torch.nn.modules.conv.Conv1d",
        "inner.1: torch.nn.modules.activation.GELU",
    ]


def test_ratchet_fails_for_an_architecture_with_no_tiny_config():
    assert uncovered(["whisper", "brand-new-arch"], TINY_CONFIGS) == ["brand-new-arch"]
