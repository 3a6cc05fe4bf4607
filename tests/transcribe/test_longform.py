"""Long-form accuracy: a recording decoded window after window loses and repeats nothing, and
its word timings land on the speech: each utterance's first and last word against where its
speech starts and ends (``speech-edges.json``), spans in order, disjoint, none zero-length and
none covering a pause between utterances.

The oracle is the per-utterance decode: the same utterances, transcribed one by one, score the
WER recorded in tests/fixtures (transformers' greedy output, identical to ours on all 70, see
tests/ci/test_wer_gate.py). The joined recording (the utterances with 0.6 s silences,
../shared/data/longform) must score within 1.5 absolute of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from oasr.cli.app import app
from oasr.metrics.wer import score
from oasr.metrics.word_timing import boundary_errors
from tests.helpers.data import SHARED_DATA

ROOT = Path(__file__).resolve().parents[2]
LONGFORM = SHARED_DATA / "longform"
PER_UTTERANCE = ROOT / "tests" / "fixtures" / "whisper_tiny_en_transformers_70.json"
# The first ~4.5 minutes keep the test short while still crossing many window seams.
SECONDS = 270.0


@pytest.mark.slow
@pytest.mark.skipif(not LONGFORM.is_dir(), reason="needs ../shared/data/longform")
def test_longform_wer_within_1_5_of_per_utterance(tmp_path):
    segments = json.loads((LONGFORM / "librispeech-test-other-70.segments.json").read_text())
    inside = [s for s in segments if s["end"] <= SECONDS]
    end = inside[-1]["end"] + 0.3
    manifest = tmp_path / "long.jsonl"
    manifest.write_text(json.dumps({
        "id": "long", "audio_filepath": str(LONGFORM / "librispeech-test-other-70.flac"),
        "offset": 0.0, "duration": end,
    }) + "\n")
    out = tmp_path / "out.parquet"
    result = CliRunner().invoke(app, ["transcribe", str(manifest), "-o", str(out),
                                      "--device", "cpu", "--dtype", "fp32", "--no-progress"])
    assert result.exit_code == 0, result.output
    row = pq.read_table(out).to_pylist()[0]
    assert row["error"] is None

    reference = " ".join(s["text"] for s in inside)
    long_wer = score({"long": reference}, {"long": row["text"]}).wer
    per_utt = json.loads(PER_UTTERANCE.read_text())["transcripts"]
    utt_wer = score({s["id"]: s["text"] for s in inside},
                    {s["id"]: per_utt[s["id"]] for s in inside}).wer
    print(f"long-form WER {long_wer:.4f} vs per-utterance {utt_wer:.4f} "
          f"over {len(inside)} utterances, {end:.0f} s")
    assert long_wer <= utt_wer + 0.015

    # Segments: phrases, strictly increasing and never overlapping, on the recording's clock,
    # covering the text.
    segs = row["segments"]
    assert len(segs) >= len(inside) // 2
    assert all(s["start"] < s["end"] for s in segs)
    assert all(a["end"] <= b["start"] for a, b in zip(segs, segs[1:]))
    assert segs[-1]["end"] <= end + 1e-6
    assert " ".join(s["text"] for s in segs if s["text"]) == row["text"]
    # Every stretch of detected speech has words (what the coverage check repairs).
    assert row["coverage"] is not None and row["coverage"] >= 0.99

    # Word timings (on by default): each utterance's first and last word against where its
    # speech starts and ends. Measured on this stretch: 91.7% of utterances within 0.2 s at
    # both ends, median errors 0.00 / 0.00 s (before the pauses followed the noise floor: 36%).
    edges = json.loads((LONGFORM / "librispeech-test-other-70.speech-edges.json").read_text())
    speech = [{**s, "start": s["speech_start"], "end": s["speech_end"]}
              for s in edges if s["end"] <= SECONDS]
    words = row["words"]
    assert words
    pos = 0
    for w in words:  # literal substrings of the text, in order
        pos = row["text"].index(w["word"], pos) + len(w["word"])
    assert all(w["end"] > w["start"] for w in words), "a zero-length word"
    assert all(a["end"] <= b["start"] + 1e-9 for a, b in zip(words, words[1:])), "overlap"
    # No word spans the silence between two utterances (the reference's speech edges).
    for a, b in zip(speech, speech[1:]):
        gap = (a["end"], b["start"])
        for w in words:
            inside = min(w["end"], gap[1]) - max(w["start"], gap[0])
            assert inside < 0.3, (w, gap)
    report = boundary_errors(words, speech)
    print(report.summary(0.2))
    assert report.missed == 0
    assert report.within(0.2) >= 0.85
    assert report.median("start") <= 0.05 and report.median("end") <= 0.05
