"""Whisper's timestamp mode: the logit rules that keep ``<|t|> text <|t|>`` well formed, and the
parse of a generated sequence into timed segments.

In timestamp mode the prompt has no ``<|notimestamps|>`` and Whisper writes each segment as a
start timestamp, its text and an end timestamp (0.02 s steps from the window start). The rules
are Whisper's own (openai-whisper ``ApplyTimestampRules``, transformers
``WhisperTimeStampLogitsProcessor``):

1. ``<|notimestamps|>`` is never sampled;
2. timestamps come in pairs: after a lone timestamp (a segment's end) the next token is a
   timestamp or EOS; after a pair, text;
3. timestamps never decrease;
4. the first generated token is a timestamp no later than ``max_initial_timestamp``;
5. when the timestamp tokens together are more probable than any single text token, a
   timestamp is forced.

Rules 2-3 read each row's history, so timestamp mode reads the generated tokens back every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

TIME_PRECISION = 0.02


@dataclass(frozen=True)
class TimestampVocab:
    eos: int
    no_timestamps: int
    timestamp_begin: int
    max_initial_timestamp_index: int = 50  # 1.0 s


def apply_timestamp_rules(logits: torch.Tensor, history: list[list[int]],
                          vocab: TimestampVocab) -> torch.Tensor:
    """logits (B, V) float, ``history[b]``: tokens row b generated so far -> filtered logits."""
    neg = float("-inf")
    logits = logits.clone()
    logits[:, vocab.no_timestamps] = neg
    ts = vocab.timestamp_begin
    for b, seq in enumerate(history):
        row = logits[b]
        if not seq:
            # The first token is a timestamp, and not too late.
            row[:ts] = neg
            row[ts + vocab.max_initial_timestamp_index + 1:] = neg
            continue
        last_ts = seq[-1] >= ts
        penultimate_ts = len(seq) < 2 or seq[-2] >= ts
        if last_ts:
            if penultimate_ts:
                row[ts:] = neg  # a pair just closed: text next
            else:
                row[:vocab.eos] = neg  # a segment just ended: timestamp or EOS next
        stamps = [t for t in seq if t >= ts]
        if stamps:
            # Non-decreasing; a segment's end may equal its start only when it is the end.
            floor = stamps[-1] if (last_ts and not penultimate_ts) else stamps[-1] + 1
            row[ts:floor] = neg
    logprobs = torch.log_softmax(logits, dim=-1)
    stamp_mass = torch.logsumexp(logprobs[:, ts:], dim=-1)
    best_text = logprobs[:, :ts].max(dim=-1).values
    force = stamp_mass > best_text
    if bool(force.any()):
        logits[force, :ts] = neg
    return logits


@dataclass
class TimedSegment:
    start: float  # seconds from the window start
    end: float | None  # None: the audio ended before the segment closed
    tokens: list[int]


def split_segments(tokens: list[int], vocab: TimestampVocab) -> list[TimedSegment]:
    """``<|t0|> text <|t1|> <|t1'|> text <|t2|> ...`` -> segments; text after an unclosed start
    timestamp becomes a segment with ``end=None``."""
    ts = vocab.timestamp_begin
    segments: list[TimedSegment] = []
    start: float | None = None
    text: list[int] = []
    for t in tokens:
        if t >= ts:
            when = (t - ts) * TIME_PRECISION
            if start is None:
                start = when
            else:
                if text:
                    segments.append(TimedSegment(start, when, text))
                start, text = None, []
        elif t != vocab.eos:
            if start is None:
                start = segments[-1].end if segments else 0.0
            text.append(t)
    if text and start is not None:
        segments.append(TimedSegment(start, None, text))
    return segments


def window_result(tokens: list[int],
                  vocab: TimestampVocab) -> tuple[list[TimedSegment], float | None]:
    """The segments a window settles and where the next window should start.

    Whisper's own long-form rule: when the window ends inside a segment (the tokens end with a
    timestamp pair, then perhaps unfinished text), only the segments closed before it count and
    the next window starts at the last closed timestamp, so the cut utterance is decoded whole
    next time. When it ends with a closed segment, or never closes one (an utterance longer
    than the window), the whole window is settled (``None``); a segment still open at the
    end then keeps ``end=None`` (it runs to the end of the audio).
    """
    segments = split_segments(tokens, vocab)
    ts = vocab.timestamp_begin
    stamps = [i for i, t in enumerate(tokens) if t >= ts]
    pairs = [i for i in stamps if i + 1 < len(tokens) and tokens[i + 1] >= ts]
    body = [t for t in tokens if t != vocab.eos]
    single_ending = len(body) >= 2 and body[-1] >= ts and body[-2] < ts
    if pairs and not single_ending:
        resume = (tokens[pairs[-1]] - ts) * TIME_PRECISION
        if resume > 0:
            closed = [s for s in segments if s.end is not None and s.end <= resume + 1e-6]
            return closed, resume
    return segments, None


def settled_tokens(tokens: list[int], vocab: TimestampVocab) -> list[int]:
    """The tokens of what ``window_result`` settles, timestamps included: through the end
    timestamp of the last closed segment when the window resumes there, else every token but
    the end of text (openai-whisper's ``all_tokens`` for the window)."""
    ts = vocab.timestamp_begin
    pairs = [i for i, t in enumerate(tokens[:-1]) if t >= ts and tokens[i + 1] >= ts]
    body = [t for t in tokens if t != vocab.eos]
    single_ending = len(body) >= 2 and body[-1] >= ts and body[-2] < ts
    if pairs and not single_ending and tokens[pairs[-1]] > ts:
        return tokens[:pairs[-1] + 1]
    return body
