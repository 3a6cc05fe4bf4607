"""The row-by-row WER equals the corpus score over the same rows."""

from __future__ import annotations

import pytest

from oasr.metrics.wer import score
from oasr.transcribe.running_wer import RunningWer


def test_running_wer_equals_the_corpus_score() -> None:
    refs = {"a": "the cat sat on the mat", "b": "Hello, world!", "c": "", "d": "one two three",
            "e": "...", "f": "Mr. Smith paid $20 at 3 o'clock", "g": "a b c d e f"}
    hyps = {"a": "the cat sat on mat", "b": "hello word", "c": "stray words", "d": "",
            "e": "uh", "f": "mister smith paid twenty dollars at three", "g": "f e d c b a"}
    running = RunningWer()
    for k in refs:
        running.add(refs[k], hyps[k])
    corpus = score(refs, hyps)
    assert running.rows == len(refs)
    assert running.errors == corpus.errors and running.ref_words == corpus.ref_words
    assert running.wer == pytest.approx(corpus.wer)
    assert RunningWer().wer is None
