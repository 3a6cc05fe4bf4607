"""Transcribe the 70 bundled LibriSpeech utterances with transformers, as a parity oracle.

The weights are the ones our converter produces (``oasr.models.loader.load_pretrained``, the
packaged Whisper tiny.en), loaded into transformers' ``WhisperForConditionalGeneration``: the
reference then differs from our engine only in the implementation, never in the checkpoint.
Decoding is greedy, fp32, on CPU, with our config's prompt and suppression lists (applied by a
precomputed-mask ``LogitsProcessor``, same tokens as transformers' own) and
``max_new_tokens=224``; features come from transformers' ``WhisperFeatureExtractor``.

Writes ``tests/fixtures/whisper_tiny_en_transformers_70.json``:
``{"model", "transformers_version", "command", "transcripts": {id: text}}``, text decoded
with our tokenizer (``lm.tokenizer.decode(ids).strip()``).

Usage:
    python scripts/make_transformers_reference.py [--manifest PATH] [--out PATH]
        [--batch-size N] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import torch

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MANIFEST = REPO / "manifests" / "librispeech-test-other-70.parquet"
DEFAULT_OUT = REPO / "tests" / "fixtures" / "whisper_tiny_en_transformers_70.json"
MAX_NEW_TOKENS = 224


def dumps(obj: Any) -> str:
    """Indented JSON with lists of numbers kept on one line (token-id lists stay readable).

    Only brackets followed by a line break are touched: JSON strings hold no raw line breaks.
    """
    text = json.dumps(obj, indent=2, ensure_ascii=False)
    return re.sub(r"\[(\s*\n[-\d.,\s]*?)\]", lambda m: "[" + " ".join(m.group(1).split()) + "]",
                  text)


def read_manifest(path: Path) -> list[tuple[str, np.ndarray, float, str]]:
    """(id, (N,) float32 16 kHz audio, duration s, reference text) per manifest row."""
    from oasr.audio import load_audio

    table = pq.read_table(path, columns=["id", "audio", "duration", "text"])
    out = []
    for row in table.to_pylist():
        out.append((row["id"], load_audio(row["audio"]["bytes"]), row["duration"], row["text"]))
    return out


class SuppressMask:
    """A ``LogitsProcessor`` setting ``ids`` to -inf (at every step, or only at ``begin_index``).

    transformers' own ``SuppressTokens*LogitsProcessor`` rebuild their mask with ``torch.isin``
    on every step, which on a busy two-core CPU costs more than the decoder step itself; the
    mask is the same, so this one is built once.
    """

    def __init__(self, ids: list[int], vocab_size: int, begin_index: int | None = None) -> None:
        self.mask = torch.zeros(vocab_size, dtype=torch.bool)
        self.mask[torch.tensor(sorted(set(ids)), dtype=torch.long)] = True
        self.begin_index = begin_index

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        # input_ids: (B, L) tokens so far; scores: (B, V) next-token logits.
        if self.begin_index is not None and input_ids.shape[1] != self.begin_index:
            return scores
        return scores.masked_fill(self.mask.to(scores.device), float("-inf"))


def build_transformers_whisper(lm: Any) -> tuple[Any, Any]:
    """(WhisperForConditionalGeneration, GenerationConfig) holding ``lm``'s weights, fp32, eval.

    Suppression is not in the generation config: ``suppress_processors`` supplies it.
    """
    import transformers

    c = lm.model.config
    hf_config = transformers.WhisperConfig(
        vocab_size=c.vocab_size,
        num_mel_bins=c.n_mels,
        d_model=c.d_model,
        encoder_layers=c.encoder_layers,
        encoder_attention_heads=c.encoder_attention_heads,
        decoder_layers=c.decoder_layers,
        decoder_attention_heads=c.decoder_attention_heads,
        encoder_ffn_dim=c.encoder_ffn_dim,
        decoder_ffn_dim=c.decoder_ffn_dim,
        max_source_positions=c.max_source_positions,
        max_target_positions=c.max_target_positions,
        decoder_start_token_id=c.decoder_start_token_id,
        bos_token_id=c.decoder_start_token_id,
        eos_token_id=c.eos_token_id,
        pad_token_id=c.pad_token_id,
        # Suppression comes from ``suppress_processors``; None keeps transformers' defaults out.
        suppress_tokens=None,
        begin_suppress_tokens=None,
        tie_word_embeddings=True,
    )
    model = transformers.WhisperForConditionalGeneration(hf_config)
    state = {"model." + k: v for k, v in lm.model.state_dict().items()}
    state["proj_out.weight"] = state["model.decoder.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"weight names do not match: missing={missing} "
                           f"unexpected={unexpected}")
    model = model.float().eval()

    gen = transformers.GenerationConfig(
        decoder_start_token_id=c.decoder_start_token_id,
        bos_token_id=c.decoder_start_token_id,
        eos_token_id=c.eos_token_id,
        pad_token_id=c.pad_token_id,
        no_timestamps_token_id=c.no_timestamps_token_id,
        is_multilingual=c.is_multilingual,
        max_new_tokens=MAX_NEW_TOKENS,
        num_beams=1,
        do_sample=False,
        return_timestamps=False,
    )
    model.generation_config = gen
    return model, gen


def suppress_processors(lm: Any) -> Any:
    """Our config's ``suppress_tokens`` (every step) and ``begin_suppress_tokens`` (first step)."""
    import transformers

    c = lm.model.config
    procs = []
    if c.suppress_tokens:
        procs.append(SuppressMask(list(c.suppress_tokens), c.vocab_size))
    if c.begin_suppress_tokens:
        procs.append(SuppressMask(list(c.begin_suppress_tokens), c.vocab_size,
                                  begin_index=len(c.sot_sequence)))
    return transformers.LogitsProcessorList(procs)


class TransformersWhisper:
    """Greedy batch transcription with transformers (features included)."""

    def __init__(self, lm: Any) -> None:
        import transformers

        self.lm = lm
        self.model, self.gen = build_transformers_whisper(lm)
        self.processors = suppress_processors(lm)
        c = lm.model.config
        self.fe = transformers.WhisperFeatureExtractor(
            feature_size=c.n_mels, sampling_rate=lm.feature_config.sample_rate
        )
        self.prompt = list(c.sot_sequence)

    @torch.inference_mode()
    def transcribe(self, audios: list[np.ndarray]) -> list[str]:
        feats = self.fe(audios, sampling_rate=self.fe.sampling_rate,
                        return_tensors="pt").input_features  # (B, n_mels, 3000)
        prompt = torch.tensor([self.prompt] * len(audios), dtype=torch.long)
        ids = self.model.generate(feats, decoder_input_ids=prompt, generation_config=self.gen,
                                  logits_processor=self.processors)  # (B, L)
        eos = self.gen.eos_token_id
        texts = []
        for row in ids.tolist():
            row = row[len(self.prompt):] if row[:len(self.prompt)] == self.prompt else row
            row = row[:row.index(eos)] if eos in row else row
            texts.append(self.lm.tokenizer.decode(row).strip())
        return texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import transformers

    from oasr.models.loader import DEFAULT_MODEL, load_pretrained

    lm = load_pretrained()
    tw = TransformersWhisper(lm)
    rows = read_manifest(args.manifest)
    transcripts: dict[str, str] = {}
    t0 = time.perf_counter()
    for i in range(0, len(rows), args.batch_size):
        batch = rows[i:i + args.batch_size]
        for (uid, *_), text in zip(batch, tw.transcribe([r[1] for r in batch]), strict=True):
            transcripts[uid] = text
        print(f"{len(transcripts)}/{len(rows)} ({time.perf_counter() - t0:.0f} s)", flush=True)

    argv = [Path(sys.argv[0]).as_posix()] + sys.argv[1:]
    out = {
        "model": f"{DEFAULT_MODEL} (Whisper tiny.en) converted by oasr, "
                 f"weights_sha256={lm.weights_sha256}",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "decoding": {"method": "greedy", "num_beams": 1, "dtype": "float32", "device": "cpu",
                     "max_new_tokens": MAX_NEW_TOKENS, "prompt": tw.prompt,
                     "suppress_tokens": list(lm.model.config.suppress_tokens),
                     "begin_suppress_tokens": list(lm.model.config.begin_suppress_tokens),
                     "features": "transformers.WhisperFeatureExtractor"},
        "command": "python " + " ".join(shlex.quote(a) for a in argv),
        "transcripts": transcripts,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dumps(out) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(transcripts)} transcripts)")


if __name__ == "__main__":
    main()
