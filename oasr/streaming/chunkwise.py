"""The chunk-wise policy: streaming for encoders with a runtime on the streaming-runtime axis
(``paged``, ``slot``, ``stateful``) under a decode family that declares a streaming session
(``DecodeStrategy.streaming_session``: ``ctc``, ``transducer``; ``oasr.engine.decode.streaming``).

Per stream: new audio becomes feature frames through the frontend's streaming function (equal
to the offline features of the same audio; the frontend's flush adds the last frames when the
input ends); every ``window`` frames (the encoder's streaming geometry for its chunk: the first
chunk may read ``first_window``; each advances by ``stride``) the chunk goes to the backend;
all streams with a chunk ready go in one ``forward_step`` and the session advances each stream's
search across chunks (CTC greedy or prefix beam; transducer greedy with the predictor state
kept). The partial is the search's best hypothesis; its stable prefix (greedy: every emitted
token; beam: what every live prefix shares) is committed. An endpoint of the stream's speech
detector closes the utterance once the encoder has read past it: the best hypothesis becomes
the final (words timed on the stream's clock) and the search restarts, the encoder state goes
on. The input's end flushes a last, possibly short, window and the last final.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from oasr.engine.decode.alignment import FrameClock, emission_spans, fill_word_timings
from oasr.engine.decode.streaming import StreamingSession
from oasr.engine.request import DecodingOptions, RequestOutput
from oasr.engine.streaming_backend import build_streaming_backend, streaming_encoder
from oasr.models.base import StreamingGeometry
from oasr.streaming.agreement import Word
from oasr.streaming.stream import Stream, StreamOptions, StreamResult


@dataclass
class ChunkState:
    """A stream's place in the chunk-wise policy: its search, its pending feature frames and
    the encoder frames it has produced."""

    search: Any
    feat_state: Any = None
    feats: list[torch.Tensor] = field(default_factory=list)  # pending feature frames
    pending: int = 0  # frames in ``feats``
    fed: int = 0  # clock samples handed to the frontend
    frames_out: int = 0  # encoder frames produced
    utt_frame0: int = 0  # encoder frame where the current utterance's search began
    committed: int = 0  # tokens of the current utterance already committed
    chunks: int = 0  # chunks forwarded
    dim: int = 0  # feature width (0: no frame seen yet)
    feats_flushed: bool = False  # the frontend's last frames (input finished) are in ``feats``


def _geometry(encoder: Any, chunk: int) -> StreamingGeometry:
    geo = encoder.streaming_geometry(chunk)
    if geo is not None:
        return geo
    rate = encoder.subsampling_rate
    return StreamingGeometry(chunk, (chunk - 1) * rate + encoder.right_context + 1,
                             chunk * rate)


def _check_streaming_frontend(inputs: Any) -> None:
    spec = inputs.spec
    if spec.streaming_fn is None or inputs.config.lfr:
        raise ValueError(f"the {inputs.config.feature_type} frontend of this model cannot "
                         "compute features chunk by chunk (no streaming framing, or LFR "
                         "stacking)")
    # a frontend that streams only in some configurations refuses the others here
    spec.streaming_fn(torch.zeros(0), None, inputs.config)


def build_session(engine: Any) -> StreamingSession:
    """The engine's decode family's streaming session (its ``streaming_session``
    declaration); a family without one is refused by name."""
    strategy = engine.strategy
    session_cls = strategy.streaming_session
    if session_cls is None:
        from oasr.engine.decode.registry import DECODE_STRATEGIES

        served = [n for n in DECODE_STRATEGIES.names()
                  if DECODE_STRATEGIES.get(n).streaming_session is not None]
        raise ValueError(f"{type(engine.model).__name__} streams chunk-wise but decode family "
                         f"{strategy.name!r} has no streaming head (served: "
                         f"{', '.join(served)}); pick one with --decode-method")
    return session_cls(strategy)


class ChunkwisePolicy:
    """Owns the streaming backend and the family's streaming session; each stream's search and
    frames are its ``ChunkState``. Built by the recognizer."""

    def __init__(self, engine: Any, options: StreamOptions) -> None:
        model = engine.model
        encoder = streaming_encoder(model)
        self.session = build_session(engine)
        _check_streaming_frontend(engine.inputs)
        chunk_frames, left_chunks = options.chunk_frames, options.left_chunks
        if hasattr(encoder, "configure_streaming") and (chunk_frames or left_chunks is not None):
            encoder.configure_streaming(chunk_frames, left_chunks)
        self.chunk = encoder.streaming_chunk_frames
        if not self.chunk:
            raise ValueError(f"{type(encoder).__name__} declares no streaming_chunk_frames")
        self.geometry = _geometry(encoder, self.chunk)
        self.window, self.stride = self.geometry.window, self.geometry.stride
        self.right_context = encoder.right_context
        self.pad_value = float(getattr(encoder, "streaming_pad_value", 0.0))
        self.engine = engine
        self.model = model
        self.encoder = encoder
        self.tokenizer = engine.tokenizer
        self.clock: FrameClock | None = engine.strategy.clock
        if self.clock is None:
            raise ValueError("streaming needs the frame clock (the frontend's frame_shift_ms "
                             "and the encoder's subsampling_rate) to time words")
        self.feature_config = engine.inputs.config
        self.hop = int(round(self.feature_config.sample_rate
                             * self.feature_config.frame_shift_ms / 1000.0))
        runner = engine.runner
        self.device, self.dtype = runner.device, runner.dtype
        self.backend = build_streaming_backend(model, max_streams=options.max_streams,
                                               device=self.device, dtype=self.dtype)
        self.check_options(options)

    @property
    def kind(self) -> str:
        return self.encoder.streaming_kind

    # -- streams ------------------------------------------------------------------------------
    def check_options(self, options: Any) -> None:
        """Refuse stream options this model cannot act on (``language`` / ``task`` on a model
        without that conditioning), as the engine's admission refuses a request's."""
        self.engine.strategy.validate_options(
            DecodingOptions(language=options.language, task=options.task))
        chosen = [n for n in ("language", "task") if getattr(options, n) is not None
                  and n not in self.session.conditions]
        if chosen:
            raise ValueError(f"{', '.join(chosen)}: the {self.session.name} head does not "
                             "condition on it while streaming; stream without it")

    def open(self, stream: Stream) -> None:
        self.check_options(stream.options)
        self.backend.allocate(stream.id)
        stream.state = ChunkState(self.session.new_search())

    def close(self, stream: Stream) -> None:
        if stream.state is not None:
            self.backend.free(stream.id)
            stream.state = None

    def _featurize(self, s: Stream, st: ChunkState) -> None:
        new = s.audio[max(st.fed - s.base, 0):]
        if len(new):
            feats, st.feat_state = self.engine.inputs.spec.streaming_fn(
                torch.from_numpy(np.ascontiguousarray(new)), st.feat_state, self.feature_config)
            st.fed += len(new)
            s.drop_until(st.fed)
            self._push(st, feats)
        flush = self.engine.inputs.spec.flush_fn
        if s.finished and not st.feats_flushed:
            st.feats_flushed = True
            if flush is not None:
                self._push(st, flush(st.feat_state, self.feature_config))
            if self.geometry.tail and st.dim:
                self._push(st, torch.full((self.geometry.tail, st.dim), self.pad_value))

    @staticmethod
    def _push(st: ChunkState, feats: torch.Tensor) -> None:
        if feats.shape[0]:
            st.feats.append(feats)
            st.pending += feats.shape[0]
            st.dim = feats.shape[1]

    def _need(self, st: ChunkState) -> int:
        """Frames the stream's next chunk reads."""
        first = self.geometry.first_window
        return first if st.chunks == 0 and first is not None else self.window

    def _window(self, s: Stream, st: ChunkState) -> int:
        """Frames of the next chunk window that can go now (0: none)."""
        need = self._need(st)
        if st.pending >= need:
            return need
        if not s.finished:
            return 0
        if self.geometry.tail:  # the tail is in ``feats``: a chunk starts at any frame left
            return st.pending
        if self.geometry.pad_last:  # frames not yet read by any chunk
            unread = st.pending - (0 if st.chunks == 0 else self.window - self.stride)
            return st.pending if unread > 0 else 0
        return st.pending if st.pending > self.right_context else 0

    def _seconds_decoded(self, st: ChunkState) -> float:
        return self.clock.seconds(st.frames_out)

    def _endpoint_due(self, s: Stream, st: ChunkState) -> bool:
        if not s.endpoints:
            return False
        e = s.endpoints[0]
        at = s.endpoint_sample(e) / s.sample_rate
        exhausted = s.finished and self._window(s, st) == 0
        return self._seconds_decoded(st) >= at or exhausted

    def is_ready(self, s: Stream) -> bool:
        if s.final is not None or s.flushed:
            return False
        st = s.state
        self._featurize(s, st)
        return bool(self._window(s, st) or self._endpoint_due(s, st) or s.finished)

    # -- the step -----------------------------------------------------------------------------
    def decode(self, streams: list[Stream]) -> None:
        """One chunk of every ready stream in one runtime step; endpoints and the input's end
        close utterances."""
        ready = [s for s in streams if self.is_ready(s)]
        cohort = []
        for s in ready:
            st = s.state
            if not self._endpoint_due(s, st):
                n = self._window(s, st)
                if n:
                    cohort.append((s, st, n))
        if cohort:
            self._forward(cohort)
        for s in ready:
            st = s.state
            if self._endpoint_due(s, st):
                e = s.endpoints.pop(0)
                self._finalize(s, st, s.endpoint_sample(e), e.rule)
            elif s.finished and not self._window(s, st) and not s.endpoints:
                self._finalize(s, st, s.received, None)
                s.flushed = True

    def _forward(self, cohort: list[tuple[Stream, ChunkState, int]]) -> None:
        geo = self.geometry
        padded = geo.pad_last or geo.tail > 0
        sizes = [self._need(st) if padded else n for _, st, n in cohort]
        dim = cohort[0][1].feats[0].shape[1]
        x = torch.full((len(cohort), max(sizes), dim), self.pad_value if geo.tail else 0.0)
        for r, (_, st, n) in enumerate(cohort):
            buf = torch.cat(st.feats) if len(st.feats) > 1 else st.feats[0]
            x[r, :n] = buf[:n]
            # The next window re-reads the last ``window - stride`` frames this one read (the
            # first chunk may read a window of its own); a last, short one consumes everything
            # (with a tail, every chunk advances its stride: the tail decides when they stop).
            need = self._need(st)
            step = need - (self.window - self.stride)
            whole = n == need or geo.tail > 0
            keep = buf[min(step, buf.shape[0]) if whole else buf.shape[0]:]
            st.feats = [keep] if keep.shape[0] else []
            st.pending = keep.shape[0]
            st.chunks += 1
        lens = torch.tensor(sizes, dtype=torch.int64)
        x, lens = x.to(self.device, self.dtype), lens.to(self.device)
        with torch.inference_mode():
            out, out_lens = self.backend.forward_step([s.id for s, *_ in cohort], x, lens)
            self.session.feed([st.search for _, st, _ in cohort], out, out_lens,
                              [s.options.language for s, _, _ in cohort])
        for r, (s, st, _) in enumerate(cohort):
            st.frames_out += int(out_lens[r])
            s.stats.decodes += 1
            self._commit(s, st)

    # -- results ------------------------------------------------------------------------------
    def _text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids).strip() if ids else ""

    def _commit(self, s: Stream, st: ChunkState) -> None:
        stats = s.stats
        stats.note_first_speech(s)
        hyp = st.search.best()
        stable = st.search.stable_prefix()
        head = self._seconds_decoded(st)
        if stats.first_text_head is None and hyp.tokens:
            stats.first_text_head = head
        for f in hyp.frames[st.committed:stable]:
            stats.commit_lags.append(head - self.clock.seconds(st.utt_frame0 + f + 1))
        st.committed = max(st.committed, stable)

    def _words(self, s: Stream, st: ChunkState) -> list[Word]:
        hyp = st.search.best()
        if not hyp.tokens:
            return []
        out = RequestOutput(request_id="", text=self._text(hyp.tokens), token_ids=hyp.tokens)
        starts, ends = emission_spans(hyp.frames, st.frames_out - st.utt_frame0)
        fill_word_timings(out, self.tokenizer, hyp.tokens, starts, ends,
                          np.asarray(hyp.probs, dtype=np.float64), self.clock,
                          offset=self.clock.seconds(st.utt_frame0))
        # frames of a zero-padded last chunk lie past the audio: clamp to what was heard
        heard = s.received / s.sample_rate
        return [Word(w.word.strip(), min(w.start, heard), min(w.end, heard), w.confidence)
                for w in out.words or [] if w.word.strip()]

    def _finalize(self, s: Stream, st: ChunkState, end_sample: int, rule: int | None) -> None:
        tokens = list(st.search.best().tokens)
        s.finalize(self._words(s, st), self._text(tokens), end_sample, rule, token_ids=tokens)
        self._restart_search(st)

    @staticmethod
    def _restart_search(st: ChunkState) -> None:
        """The next utterance's search starts at the next encoder frame; the encoder state
        goes on."""
        st.search.reset()
        st.utt_frame0 = st.frames_out
        st.committed = 0

    def result(self, s: Stream) -> StreamResult:
        if s.final is not None:
            return s.final
        st = s.state
        hyp = st.search.best()
        committed = self._text(hyp.tokens[:st.committed])
        full = self._text(hyp.tokens)
        partial = full[len(committed):].strip() if full.startswith(committed) else full
        return StreamResult(committed=committed, partial=partial, words=[], is_final=False,
                            start=s.utterance_start / s.sample_rate,
                            end=min(self._seconds_decoded(st), s.received / s.sample_rate),
                            segment=s.segment)

    def reset(self, s: Stream) -> None:
        """The next utterance: after a final, where it ended (the search restarted then);
        otherwise the current hypothesis is dropped and it starts at the decoded head."""
        if s.final is not None:
            s.start_utterance(s.final_end)
            return
        st = s.state
        self._restart_search(st)
        s.start_utterance(int(round(self._seconds_decoded(st) * s.sample_rate)))

