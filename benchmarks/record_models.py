"""Random-weight checkpoints of the benchmarked families at their real shapes, written in the
layout each upstream project ships, for the throughput benchmark of record.

No real weights exist here for most families, so each model is built with random weights by
upstream's own code (transformers, icefall's zipformer package) and saved as upstream saves it;
the benchmark then runs ``oasr convert SRC BUNDLE`` and ``oasr transcribe -m BUNDLE`` on it as a
user would. Every ``build_*`` takes ``(folder, small=False, **knobs)``, writes into ``folder``
and returns a dict: ``source`` (what ``oasr convert`` / ``-m`` take), ``convert_args``,
``transcribe_args``, ``shape``, ``params``, ``weights``, ``peer``, plus what the knobs set.
``small=True`` is a tiny model of the same family, for CPU smoke runs.

    python benchmarks/record_models.py FAMILY OUT_DIR [--small] [--convert BUNDLE_DIR]

Qwen2-Audio is not built: its 16 GB of weights make the process path too slow to stage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _p in (str(REPO), str(HERE)):  # tests.* helpers and gpu_parakeet, however we are imported
    if _p not in sys.path:
        sys.path.insert(0, _p)

from gpu_parakeet import FULL as PARAKEET  # noqa: E402
from gpu_parakeet import SMALL as PARAKEET_SMALL  # noqa: E402
from gpu_parakeet import VOCAB as PARAKEET_VOCAB  # noqa: E402
from gpu_parakeet import build_checkpoint, write_tokenizer  # noqa: E402

Record = dict[str, Any]

# openai/whisper-large-v3-turbo's config.json and generation_config.json alignment heads.
TURBO = dict(d_model=1280, encoder_layers=32, decoder_layers=4, encoder_attention_heads=20,
             decoder_attention_heads=20, encoder_ffn_dim=5120, decoder_ffn_dim=5120,
             num_mel_bins=128, max_source_positions=1500, max_target_positions=448)
TURBO_SMALL = dict(TURBO, d_model=64, encoder_layers=2, decoder_layers=2,
                   encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                   decoder_ffn_dim=128)
TURBO_HEADS = [[2, 4], [2, 11], [3, 3], [3, 6], [3, 11], [3, 14]]
TINY_EN_VOCAB = 51864  # the tokenizer is tiny.en's; the real turbo has 51866 (multilingual)

# parakeet-ctc-0.6b reads 80 mel bins (its preprocessor's features: 80); tdt-0.6b-v2 reads 128.
CTC_MELS = 80

# icefall's published "large" LibriSpeech Zipformer (RESULTS.md), the rest train.py's defaults.
ZIPFORMER_LARGE = dict(
    downsampling_factor=(1, 2, 4, 8, 4, 2), num_encoder_layers=(2, 2, 4, 5, 4, 2),
    feedforward_dim=(512, 768, 1536, 2048, 1536, 768), encoder_dim=(192, 256, 512, 768, 512, 256),
    encoder_unmasked_dim=(192, 192, 256, 320, 256, 192), num_heads=(4, 4, 4, 8, 4, 4),
    cnn_module_kernel=(31, 31, 15, 15, 15, 31), query_head_dim=32, value_head_dim=12,
    pos_head_dim=4, pos_dim=48, feature_dim=80, decoder_dim=512, joiner_dim=512,
    context_size=2, vocab_size=500)
ZIPFORMER_SMALL = dict(
    ZIPFORMER_LARGE, num_encoder_layers=(1, 1, 1, 1, 1, 1),
    feedforward_dim=(32, 48, 48, 64, 48, 48), encoder_dim=(16, 24, 24, 32, 24, 24),
    encoder_unmasked_dim=(16, 16, 16, 24, 16, 16),
    num_heads=(2, 2, 2, 2, 2, 2), cnn_module_kernel=(15, 15, 7, 7, 7, 15), query_head_dim=8,
    value_head_dim=4, pos_dim=16, decoder_dim=16, joiner_dim=24)


def _params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied tensor counts once


def _record(source: Path, model: torch.nn.Module, shape: dict[str, Any], weights: str,
            peer: str | None, transcribe_args: list[str] | None = None, **extra: Any) -> Record:
    return {"source": str(source), "convert_args": [], "transcribe_args": transcribe_args or [],
            "shape": shape, "params": _params(model), "weights": weights, "peer": peer, **extra}


# -- Whisper large-v3-turbo ---------------------------------------------------------------------
def build_whisper_large_v3_turbo(folder: Path, small: bool = False, max_new_tokens: int = 32,
                                 logit_scale: float = 50.0, special_margin: float = 100.0,
                                 position_scale: float = 1000.0, dtype: str = "float16",
                                 seed: int = 0) -> Record:
    """transformers' ``WhisperForConditionalGeneration`` at turbo's shape, saved as openai's
    Hub folder is (fp16 safetensors, generation config, preprocessor and tokenizer files).

    The vocabulary is tiny.en's real tokenizer (the packaged model's), through the Whisper HF
    fixture's own helpers. A random decoder would stop at random: so that every window runs
    to ``max_new_tokens``, the tied embedding's text rows are scaled by ``logit_scale``
    (decisive text logits) and made orthogonal to a direction u, every special and timestamp
    row (id >= <|endoftext|>) is set to -u, and the decoder's final layer-norm bias to
    ``special_margin`` * u: each of those ids then scores about -``special_margin``. A tied
    embedding alone makes the fed-back token its own best successor (one token repeated, every
    row flagged ``repetition``); the decoder's positions, scaled by ``position_scale``, vary
    the next token with the step instead.
    """
    import transformers as tf

    from tests.fixtures.whisper_hf.make import generation_config, tokenizer

    dims = TURBO_SMALL if small else TURBO
    tok = tokenizer("en")
    gen = generation_config("en", tok, dims["decoder_layers"], dims["decoder_attention_heads"])
    if not small:
        gen.alignment_heads = TURBO_HEADS
    config = tf.WhisperConfig(
        vocab_size=TINY_EN_VOCAB, **dims, decoder_start_token_id=gen.decoder_start_token_id,
        bos_token_id=gen.bos_token_id, eos_token_id=gen.eos_token_id,
        pad_token_id=gen.pad_token_id, suppress_tokens=gen.suppress_tokens,
        begin_suppress_tokens=gen.begin_suppress_tokens, scale_embedding=False,
        tie_word_embeddings=True, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    torch.manual_seed(seed)
    model = tf.WhisperForConditionalGeneration(config).eval()
    eot = int(gen.eos_token_id)  # the first special id; all ids from it on are special
    with torch.no_grad():
        emb = model.model.decoder.embed_tokens.weight
        assert model.proj_out.weight.data_ptr() == emb.data_ptr(), "the head must stay tied"
        u = torch.randn(emb.shape[1])
        u /= u.norm()
        emb[:eot] -= (emb[:eot] @ u)[:, None] * u
        emb[:eot] *= logit_scale
        emb[eot:] = -u
        model.model.decoder.layer_norm.bias.copy_(special_margin * u)
        model.model.decoder.embed_positions.weight.mul_(position_scale)
    model.generation_config = gen
    folder.mkdir(parents=True, exist_ok=True)
    model.to(getattr(torch, dtype)).save_pretrained(folder)
    tok.save_pretrained(folder)
    tf.WhisperFeatureExtractor(feature_size=dims["num_mel_bins"]).save_pretrained(folder)
    shape = dict(dims, vocab_size=TINY_EN_VOCAB, alignment_heads=gen.alignment_heads,
                 vocabulary="tiny.en's tokenizer, 51864 ids (the real turbo: 51866, "
                            "multilingual; 2 embedding rows apart)")
    return _record(folder, model, shape, "random, transformers init", "transformers",
                   ["--max-new-tokens", str(max_new_tokens)], dtype=dtype,
                   max_new_tokens=max_new_tokens, logit_scale=logit_scale,
                   special_margin=special_margin, position_scale=position_scale, seed=seed)


# -- Parakeet (transformers) --------------------------------------------------------------------
def _parakeet_extras(folder: Path, bins: int) -> bool:
    """transformers' feature extractor config (needs librosa) and the tokenizer; True when the
    extractor's preprocessor_config.json was written (without it oasr uses the same values)."""
    import transformers as tf

    write_tokenizer(folder)
    try:
        tf.ParakeetFeatureExtractor(feature_size=bins).save_pretrained(folder)
    except ImportError:
        return False
    return (folder / "preprocessor_config.json").is_file()


def build_parakeet_tdt(folder: Path, small: bool = False, blank_bias: float = 0.0) -> Record:
    """transformers' ``ParakeetForTDT`` at parakeet-tdt-0.6b-v2's shape, built by
    ``gpu_parakeet.build_checkpoint`` (seed 0); ``blank_bias`` is added to the joint's blank
    logit and sets how often the random model emits."""
    enc = dict(PARAKEET_SMALL if small else PARAKEET)
    folder.mkdir(parents=True, exist_ok=True)
    model, skipped = build_checkpoint(folder, enc, blank_bias)
    if model is None:
        raise RuntimeError(skipped)
    pre = (folder / "preprocessor_config.json").is_file()
    shape = dict(enc, head="tdt", vocab_size=PARAKEET_VOCAB, blank_id=PARAKEET_VOCAB - 1,
                 decoder_hidden_size=640, num_decoder_layers=2, durations=[0, 1, 2, 3, 4])
    return _record(folder, model, shape, "random, transformers init", "transformers",
                   blank_bias=blank_bias, preprocessor_config=pre)


def build_parakeet_ctc(folder: Path, small: bool = False, blank_bias: float = 0.0,
                       seed: int = 0) -> Record:
    """transformers' ``ParakeetForCTC`` at parakeet-ctc-0.6b's shape (80 mel bins), saved as
    ``build_parakeet_tdt`` saves its model; ``blank_bias`` is added to the CTC head's blank."""
    import transformers as tf

    enc = dict(PARAKEET_SMALL if small else PARAKEET, num_mel_bins=CTC_MELS)
    blank = PARAKEET_VOCAB - 1
    torch.manual_seed(seed)
    cfg = tf.ParakeetCTCConfig(vocab_size=PARAKEET_VOCAB, pad_token_id=blank,
                               encoder_config=dict(enc, dropout=0.0, attention_dropout=0.0,
                                                   activation_dropout=0.0, layerdrop=0.0))
    model = tf.ParakeetForCTC(cfg).eval()
    with torch.no_grad():
        model.ctc_head.bias[blank] += blank_bias
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    pre = _parakeet_extras(folder, enc["num_mel_bins"])
    shape = dict(enc, head="ctc", vocab_size=PARAKEET_VOCAB, blank_id=blank)
    return _record(folder, model, shape, "random, transformers init", "transformers",
                   blank_bias=blank_bias, seed=seed, preprocessor_config=pre)


# -- icefall Zipformer --------------------------------------------------------------------------
@contextlib.contextmanager
def _audio_from(mk: Any, data: Path) -> Iterator[None]:
    """Point the fixture maker's transcripts / clips at ``data`` for the duration."""
    before = mk.AUDIO
    mk.AUDIO = data / "librispeech-test-other-70"
    try:
        yield
    finally:
        mk.AUDIO = before


def build_zipformer_large(folder: Path, small: bool = False, data: Path | None = None,
                          blank_bias: float | None = None, seed: int = 0) -> Record:
    """icefall's transducer ``AsrModel`` at the published "large" LibriSpeech shape, built and
    exported exactly as ``tests/fixtures/icefall_zipformer/make.py`` builds its fixtures
    (its noise on every weight, sharpened heads, ``exp/pretrained.pt`` + ``data/lang_bpe_500``
    with sentencepiece trained on ``data``'s LibriSpeech transcripts).

    ``blank_bias`` None picks it as the fixtures do (``pick_blank_bias``: the largest with
    which every one of its five clips emits, differently, on fewer than half the frames).
    """
    from tests.helpers.zipformer_oracle import ORACLE_MISSING, oracle

    up = oracle()
    if up is None:
        raise RuntimeError(ORACLE_MISSING)
    import tests.fixtures.icefall_zipformer.make as mk
    from tests.helpers.data import SHARED_DATA

    g = dict(ZIPFORMER_SMALL if small else ZIPFORMER_LARGE)
    geometry = mk._geometry(
        g["downsampling_factor"], g["encoder_dim"], g["num_encoder_layers"], g["num_heads"],
        g["query_head_dim"], g["pos_head_dim"], g["value_head_dim"], g["feedforward_dim"],
        g["cnn_module_kernel"], g["pos_dim"], feature_dim=g["feature_dim"], causal=False,
        use_transducer=True, use_ctc=False, decoder_dim=g["decoder_dim"],
        joiner_dim=g["joiner_dim"], context_size=g["context_size"])
    geometry["encoder_unmasked_dim"] = ",".join(map(str, g["encoder_unmasked_dim"]))
    v = mk.Variant("zipformer_large", seed, geometry, vocab=g["vocab_size"], lang="bpe",
                   checkpoint="export", convert=["."])
    model = mk.build_model(up, v)
    folder.mkdir(parents=True, exist_ok=True)
    with _audio_from(mk, Path(data or SHARED_DATA)), torch.no_grad():
        if blank_bias is None:
            feats = [mk.knf_features(w, g["feature_dim"]) for w in mk.read_audio().values()]
            blank_bias = mk.pick_blank_bias(up, model, feats, causal=False)
        else:
            model.joiner.output_linear.bias[0] += blank_bias
        mk.write_layout(up, v, model, folder)
    return _record(folder, model, g, "random, icefall init (+ make.py's perturbation)", None,
                   blank_bias=blank_bias, seed=seed)


FAMILIES: dict[str, Callable[..., Record]] = {
    "whisper_large_v3_turbo": build_whisper_large_v3_turbo,
    "parakeet_tdt": build_parakeet_tdt,
    "parakeet_ctc": build_parakeet_ctc,
    "zipformer_large": build_zipformer_large,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("family", choices=sorted(FAMILIES))
    ap.add_argument("out", type=Path)
    ap.add_argument("--small", action="store_true", help="a tiny model of the family")
    ap.add_argument("--convert", type=Path, default=None,
                    help="then `oasr convert` the checkpoint into this bundle folder")
    args = ap.parse_args()
    t0 = time.perf_counter()
    record = FAMILIES[args.family](args.out, small=args.small)
    record["build_s"] = round(time.perf_counter() - t0, 1)
    if args.convert is not None:
        import subprocess

        cmd = [sys.executable, "-m", "oasr.cli.app", "convert", str(record["source"]),
               str(args.convert), *record.get("convert_args", [])]
        subprocess.run(cmd, check=True)
        record["bundle"] = str(args.convert)
    print(json.dumps(record, indent=1, default=str))


if __name__ == "__main__":
    main()
