"""Transcribe the 70 bundled LibriSpeech utterances with transformers, as a parity oracle.

The weights are the ones our converter produces (``oasr.models.loader.load_pretrained``, the
packaged Whisper tiny.en), loaded into transformers' ``WhisperForConditionalGeneration``: the
reference then differs from our engine only in the implementation, never in the checkpoint.
Decoding is greedy, fp32, on CPU, with our config's prompt and suppression lists (applied by a
precomputed-mask ``LogitsProcessor``, same tokens as transformers' own) and
``max_new_tokens=224``; features come from transformers' ``WhisperFeatureExtractor``. The peer
itself (``TransformersWhisper``) lives in ``oasr.bench.peers``, shared with ``oasr bench``.

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

from oasr.bench.peers import (  # noqa: F401  (re-exported for the benchmarks)
    MAX_NEW_TOKENS,
    SuppressMask,
    TransformersWhisper,
    build_transformers_whisper,
    suppress_processors,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MANIFEST = REPO / "manifests" / "librispeech-test-other-70.parquet"
DEFAULT_OUT = REPO / "tests" / "fixtures" / "whisper_tiny_en_transformers_70.json"


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
