"""VAD-batched chunks: merged to the limit, overlapping only at joins inside speech."""

from __future__ import annotations

import math

import pytest

from oasr.transcribe.segments import Piece, assemble, trim_piece
from oasr.transcribe.vad_chunks import JOIN_OVERLAP_S, plan_chunks


def test_joins_in_pauses_read_nothing_of_the_neighbour():
    segments = [(0.0, 8.0), (9.0, 17.0), (18.0, 26.0)]
    speech = [(0.4, 7.6), (9.4, 16.6), (18.4, 25.6)]
    chunks = plan_chunks(segments, speech, 18.0, 26.0, timed=True)
    assert [(c.start, c.end) for c in chunks] == [(0.0, 17.0), (18.0, 26.0)]
    assert chunks[0].keep_from == -math.inf and chunks[0].keep_to == 17.5
    assert chunks[1].keep_from == 17.5 and chunks[1].keep_to == math.inf


def test_a_join_inside_speech_overlaps_and_each_word_is_kept_once():
    segments = [(0.0, 10.0), (10.0, 20.0)]
    chunks = plan_chunks(segments, [(0.0, 20.0)], 10.0, 20.0, timed=True)
    assert [(c.start, c.end) for c in chunks] == [(0.0, 10.0 + JOIN_OVERLAP_S),
                                                    (10.0 - JOIN_OVERLAP_S, 20.0)]
    assert chunks[0].keep_to == chunks[1].keep_from == 10.0
    # Words every 0.4 s; each chunk decodes the words wholly inside its audio.
    words = [{"word": f"w{k}", "start": 0.4 * k + 0.05, "end": 0.4 * k + 0.35,
              "confidence": 1.0} for k in range(50)]
    pieces = []
    for c in chunks:
        inside = [w for w in words if c.start <= w["start"] and w["end"] <= c.end]
        text = " ".join(w["word"] for w in inside)
        pieces.append(trim_piece(Piece(c.start, c.end, text, inside), c.keep_from, c.keep_to))
    text, segments, kept = assemble(pieces)
    assert [w["word"] for w in kept] == [w["word"] for w in words]
    assert text == " ".join(w["word"] for w in words)
    assert all(a["end"] <= b["start"] for a, b in zip(segments, segments[1:]))


def test_untimed_chunks_do_not_overlap():
    chunks = plan_chunks([(0.0, 10.0), (10.0, 20.0)], [(0.0, 20.0)], 10.0, 20.0, timed=False)
    assert [(c.start, c.end) for c in chunks] == [(0.0, 10.0), (10.0, 20.0)]
    assert chunks[0].end == pytest.approx(chunks[1].start)
