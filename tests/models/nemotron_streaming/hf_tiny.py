"""A tiny random transformers ``NemotronAsrStreamingForRNNT`` saved in the upstream layout."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.models.fastconformer.hf_tiny import randomize, write_tokenizer

VOCAB = 21  # blank last
# left context 6 frames; lookahead 1 -> chunks of 2 encoder frames (left context = 3 chunks)
ENCODER = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
               subsampling_conv_channels=8, num_mel_bins=16, conv_kernel_size=5,
               sliding_window=7, default_num_lookahead_tokens=1,
               dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0)


def save_hf(folder: Path, seed: int = 0, blank_bias: float = 1.0) -> torch.nn.Module:
    """A random ``NemotronAsrStreamingForRNNT`` saved with ``save_pretrained`` (+ tokenizer and
    feature-extractor configs); returns the model in eval mode."""
    import pytest
    import transformers as tf

    try:  # older transformers' reference extractor needs librosa
        extractor = tf.NemotronAsrStreamingFeatureExtractor(
            feature_size=ENCODER["num_mel_bins"])
    except ImportError as exc:
        pytest.skip(f"the reference feature extractor cannot be built: {exc}".strip())
    torch.manual_seed(seed)
    blank = VOCAB - 1
    cfg = tf.NemotronAsrStreamingConfig(vocab_size=VOCAB, blank_token_id=blank, pad_token_id=blank,
                                        decoder_hidden_size=24, num_decoder_layers=2,
                                        encoder_config=dict(ENCODER))
    model = tf.NemotronAsrStreamingForRNNT(cfg)
    randomize(model, seed, blank_bias)
    model.eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    write_tokenizer(folder, VOCAB)
    extractor.save_pretrained(folder)
    return model
