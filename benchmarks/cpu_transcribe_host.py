"""The host work around the engine in ``oasr transcribe``, stage by stage, without a model.

Over the rows of a manifest (default: the bundled 70 LibriSpeech test-other utterances, the
FLAC bytes embedded), times what the transcriber's thread did per row before the host
pipeline (docs/engine.md, "The host pipeline around the engine"):

- reading the manifest (``iter_manifest``, record batches);
- decoding + resampling every row's audio inline (``iter_audio_chunks`` to the end), and the
  same through ``AudioPrefetch`` with each worker count of ``--workers`` (the wall the
  transcriber's thread waits for all rows, every row opened ahead);
- scoring each row's WER (``RunningWer.add``, hypothesis = the reference with one word
  changed);
- writing the rows (``OutputWriter``: part files every 64 rows, the final merge).

Usage: ``python benchmarks/cpu_transcribe_host.py OUT.json [--manifest M] [--repeat N]
[--workers 1,2,4]``. Each stage is run ``--repeat`` times (default 3) and the median kept.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--manifest", default=str(REPO / "manifests/librispeech-test-other-70.parquet"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", default="1,2,4")
    args = ap.parse_args()

    from oasr.audio import iter_audio_chunks
    from oasr.io import OutputRow, OutputWriter, iter_manifest
    from oasr.io.pandas_probe import answer_no_pandas
    from oasr.transcribe.prefetch import AudioPrefetch
    from oasr.transcribe.running_wer import RunningWer

    answer_no_pandas()
    sr, window = 16000, 30.0
    rows = list(iter_manifest([args.manifest]))
    audio_s = 0.0

    def decode_all_inline() -> None:
        nonlocal audio_s
        audio_s = sum(sum(len(c) for c in iter_audio_chunks(r.audio, sr, chunk_seconds=window))
                      for r in rows) / sr

    def decode_all_pool(workers: int) -> None:
        prefetch = AudioPrefetch(workers, depth=len(rows))
        opened = prefetch.rows(iter(rows),
                               lambda r: iter_audio_chunks(r.audio, sr, chunk_seconds=window))
        for row in opened:
            reader = prefetch.take(row)
            assert reader is not None
            for _ in reader:
                pass
        prefetch.close()

    def score_all() -> None:
        wer = RunningWer()
        for r in rows:
            words = (r.text or "").split()
            wer.add(r.text or "", " ".join(["x"] + words[1:]))

    def write_all() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            writer = OutputWriter(Path(tmp) / "o.parquet")
            for r in rows:
                writer.write(OutputRow(id=r.id, text=r.text, words=[], segments=[],
                                       confidence=0.9, duration=1.0, language="en",
                                       finish_reason="stop", error=None))
            writer.close()

    score_all()  # imports (jiwer, the normalizer) outside the timing
    write_all()
    stages = {
        "manifest_read_s": _median_s(lambda: list(iter_manifest([args.manifest])), args.repeat),
        "decode_inline_s": _median_s(decode_all_inline, args.repeat),
    }
    for w in (int(x) for x in args.workers.split(",")):
        stages[f"decode_pool_{w}_workers_s"] = _median_s(lambda w=w: decode_all_pool(w),
                                                         args.repeat)
    stages["wer_s"] = _median_s(score_all, args.repeat)
    stages["write_s"] = _median_s(write_all, args.repeat)
    result = {
        "benchmark": "cpu_transcribe_host",
        "command": " ".join(sys.argv),
        "manifest": args.manifest,
        "rows": len(rows),
        "audio_s": round(audio_s, 3),
        "cpu_count": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
        "platform": platform.platform(),
        "stages_median_s": {k: round(v, 4) for k, v in stages.items()},
        "per_row_ms": {k: round(1000 * v / len(rows), 3) for k, v in stages.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
