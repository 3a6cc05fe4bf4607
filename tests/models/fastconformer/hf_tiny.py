"""Tiny random transformers Parakeet checkpoints, saved in the upstream layout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

ENCODER = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
               subsampling_conv_channels=8, num_mel_bins=16, conv_kernel_size=9,
               dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0)
VOCAB = 21  # blank last


def randomize(model: torch.nn.Module, seed: int = 0, blank_bias: float = 1.0,
              scale: float = 0.3) -> None:
    """Every float parameter and BatchNorm statistic random, so no term hides at its init."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if not t.is_floating_point() or name.endswith("inv_freq"):
                continue
            if name.endswith("running_var"):
                t.copy_(torch.rand(t.shape, generator=g) + 0.5)
            else:
                t.copy_(torch.randn(t.shape, generator=g) * scale)
        head = getattr(getattr(model, "joint", None), "head", None)
        if head is not None:
            # Token logits from the joint's input rather than its bias, and blanks frequent
            # enough that rows advance on both emissions and blanks.
            head.weight.mul_(4.0)
            head.bias.zero_()
            head.bias[model.config.blank_token_id] = blank_bias


def write_tokenizer(folder: Path, vocab: int = VOCAB) -> None:
    """A word-level tokenizer.json over ``vocab`` units (the last is the blank)."""
    from tokenizers import Tokenizer, decoders, models

    units = {f"w{i}": i for i in range(vocab - 1)}
    units["<blank>"] = vocab - 1
    tok = Tokenizer(models.WordLevel(units, unk_token="<blank>"))
    tok.decoder = decoders.WordPiece(prefix="##")  # joins with spaces
    tok.save(str(folder / "tokenizer.json"))


def save_hf(kind: str, folder: Path, seed: int = 0, blank_bias: float = 1.0,
            extractor: bool = True, **overrides: Any) -> torch.nn.Module:
    """A random ``ParakeetFor{CTC,RNNT,TDT}`` saved with ``save_pretrained`` (+ tokenizer and
    feature-extractor configs); returns the model in eval mode."""
    import transformers as tf

    torch.manual_seed(seed)
    blank = VOCAB - 1
    if kind == "ctc":
        cfg = tf.ParakeetCTCConfig(vocab_size=VOCAB, pad_token_id=blank,
                                   encoder_config=dict(ENCODER), **overrides)
        model = tf.ParakeetForCTC(cfg)
    else:
        cls_cfg, cls = {"rnnt": (tf.ParakeetRNNTConfig, tf.ParakeetForRNNT),
                        "tdt": (tf.ParakeetTDTConfig, tf.ParakeetForTDT)}[kind]
        cfg = cls_cfg(vocab_size=VOCAB, blank_token_id=blank, pad_token_id=blank,
                      decoder_hidden_size=24, num_decoder_layers=2,
                      encoder_config=dict(ENCODER), **overrides)
        model = cls(cfg)
    randomize(model, seed, blank_bias)
    model.eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    write_tokenizer(folder)
    if extractor:  # its construction needs librosa; the converter's defaults are its defaults
        tf.ParakeetFeatureExtractor(feature_size=ENCODER["num_mel_bins"]).save_pretrained(folder)
    json.loads((folder / "config.json").read_text())  # written
    return model
