"""What a timestamp-mode window settles, as whisper's long-form loop counts it: the segments
and (for previous-text conditioning) their tokens with the timestamps."""

from __future__ import annotations

from oasr.engine.decode.timestamp_rules import TimestampVocab, settled_tokens, window_result

EOS, NO_TS, TS = 2, 99, 100  # text ids below 99; timestamps: TS + k is k * 0.02 s
VOCAB = TimestampVocab(EOS, NO_TS, TS)


def test_a_window_cut_inside_a_segment_settles_through_the_last_closed_timestamp():
    # <|0.00|> a b <|1.00|><|1.00|> c d (cut): the second segment is decoded again next time.
    tokens = [TS, 20, 21, TS + 50, TS + 50, 22, 23]
    segments, resume = window_result(tokens, VOCAB)
    assert resume == 1.0 and [s.tokens for s in segments] == [[20, 21]]
    assert settled_tokens(tokens, VOCAB) == [TS, 20, 21, TS + 50]


def test_a_window_ending_on_a_closed_segment_settles_every_token_but_the_end():
    tokens = [TS, 20, 21, TS + 50, TS + 50, 22, TS + 90, EOS]
    assert window_result(tokens, VOCAB)[1] is None
    assert settled_tokens(tokens, VOCAB) == tokens[:-1]
    open_ended = [TS, 20, 21, 22]  # never closes: the whole window
    assert settled_tokens(open_ended, VOCAB) == open_ended
