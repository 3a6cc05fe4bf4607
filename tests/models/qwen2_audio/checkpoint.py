"""A tiny random Qwen2-Audio checkpoint in transformers' layout, and a ChatML tokenizer.

The tokenizer is a ``tokenizers`` WordLevel model built here (no download): words ``t1`` ..
``t89`` and the ChatML / audio special tokens at the top of the 96-id vocabulary.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

VOCAB = 96
SPECIALS = {"<|AUDIO|>": 90, "<|endoftext|>": 91, "<|im_start|>": 92, "<|im_end|>": 93,
            "<|audio_bos|>": 94, "<|audio_eos|>": 95}
N_MELS = 16
SOURCE_POSITIONS = 20  # 40 mel frames: a 0.4 s window


def write_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{f"t{i}": i for i in range(1, 90)}, **SPECIALS}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tok.add_special_tokens(list(SPECIALS))
    tok.save(str(folder / "tokenizer.json"))


def hf_config(tie: bool = False, source_positions: int = SOURCE_POSITIONS):
    from transformers import Qwen2AudioConfig

    return Qwen2AudioConfig(
        audio_config=dict(model_type="qwen2_audio_encoder", num_mel_bins=N_MELS,
                          encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=48,
                          d_model=32, max_source_positions=source_positions),
        text_config=dict(model_type="qwen2", vocab_size=VOCAB, hidden_size=32,
                         intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=1024,
                         rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=tie),
        audio_token_index=SPECIALS["<|AUDIO|>"],
    )


def make_checkpoint(folder: Path, seed: int = 0, tie: bool = False,
                    source_positions: int = SOURCE_POSITIONS):
    """Save a random tiny ``Qwen2AudioForConditionalGeneration`` (and its tokenizer) to
    ``folder``; returns the transformers model (eval, fp32)."""
    transformers = pytest.importorskip(
        "transformers", reason="pip install 'transformers>=5' (the Qwen2-Audio oracle)")
    pytest.importorskip("tokenizers", reason="pip install tokenizers")
    major, minor = (int(v) for v in transformers.__version__.split(".")[:2])
    if (major, minor) < (5, 24):  # older save_pretrained writes the LM under other keys
        pytest.skip(f"the oracle is transformers >= 5.24 (here {transformers.__version__}, whose "
                    "save_pretrained layout the converter does not read); pip install "
                    "'transformers>=5.24'")
    torch.manual_seed(seed)
    model = transformers.Qwen2AudioForConditionalGeneration(
        hf_config(tie, source_positions)).eval()
    with torch.no_grad():  # larger than the init's std 0.02, so greedy choices are not ties
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.8, 1.2)
            else:
                p.normal_(0.0, 0.3)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    write_tokenizer(folder)
    return model
