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


def reference_extractor():
    """transformers' ``NemotronAsrStreamingFeatureExtractor`` for the tiny encoder; the test
    skips, naming the reason, where it cannot be built (older transformers need librosa)."""
    import pytest
    import transformers as tf

    try:
        return tf.NemotronAsrStreamingFeatureExtractor(feature_size=ENCODER["num_mel_bins"])
    except ImportError as exc:
        pytest.skip(f"the reference feature extractor cannot be built: {exc}".strip())


def save_hf(folder: Path, seed: int = 0, blank_bias: float = 1.0) -> torch.nn.Module:
    """A random ``NemotronAsrStreamingForRNNT`` saved with ``save_pretrained`` (+ tokenizer and
    feature-extractor configs); returns the model in eval mode."""
    import transformers as tf

    extractor = reference_extractor()
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


# a few of the checkpoint's language slots (its processor_config.json carries the full table)
PROMPTS = {"en-US": 0, "en": 0, "de-DE": 9, "de": 9, "fr": 8, "auto": 101}


def save_hf_prompted(folder: Path, seed: int = 0, blank_bias: float = 0.0) -> torch.nn.Module:
    """A random ``Nemotron3_5AsrForRNNT`` (the language-prompted checkpoint) saved with
    ``save_pretrained``, its processor (with ``prompt_dictionary``) beside it."""
    import pytest
    import transformers as tf

    if not hasattr(tf, "Nemotron3_5AsrForRNNT"):
        pytest.skip("transformers has no Nemotron3_5AsrForRNNT; pip install "
                    "'transformers>=5.24'")
    extractor = reference_extractor()
    torch.manual_seed(seed)
    blank = VOCAB - 1
    width = ENCODER["hidden_size"]
    cfg = tf.Nemotron3_5AsrConfig(vocab_size=VOCAB, blank_token_id=blank, pad_token_id=blank,
                                  decoder_hidden_size=24, num_decoder_layers=2,
                                  prompt_intermediate_size=2 * width,
                                  encoder_config=dict(ENCODER))
    model = tf.Nemotron3_5AsrForRNNT(cfg)
    randomize(model, seed, blank_bias)
    # Fully random, the fusion MLP drowns the frames in its biases and every row emits one
    # token; here it passes the frames (relu(x) - relu(-x)) and adds a random per-language
    # shift, every weight still perturbed.
    g = torch.Generator().manual_seed(seed + 1)
    eye = torch.eye(width)
    with torch.no_grad():
        p = model.prompt_projector
        p.linear_1.weight.copy_(torch.cat([
            torch.cat([eye, -eye]), torch.randn(2 * width, cfg.num_prompts, generator=g) * 0.1], 1))
        p.linear_2.weight.copy_(torch.cat([eye, -eye], 1))
        for t in (p.linear_1.weight, p.linear_2.weight, p.linear_1.bias, p.linear_2.bias):
            t.copy_(t * (t != 0) + torch.randn(t.shape, generator=g) * 0.02)
    model.eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    write_tokenizer(folder, VOCAB)
    tokenizer = tf.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    tf.Nemotron3_5AsrProcessor(extractor, tokenizer,
                               prompt_dictionary=dict(PROMPTS)).save_pretrained(folder)
    return model


def reference_chunk(hf: torch.nn.Module, chunk: torch.Tensor, cache, padding, lookahead: int):
    """One chunk through transformers' cache-aware encoder: (output, cache, padding cache).

    The K/V cache is ``cache`` (argument and output field) in transformers >= 5.25 and
    ``past_key_values`` before (5.17 - 5.24); the name is read off the output class.
    """
    import transformers as tf

    fields = tf.NemotronAsrStreamingEncoderModelOutput.__dataclass_fields__
    name = "cache" if "cache" in fields else "past_key_values"
    out = hf.encoder(input_features=chunk, padding_cache=padding, use_cache=True,
                     num_lookahead_tokens=lookahead, **{name: cache})
    return out, getattr(out, name), out.padding_cache
