"""One-shot families pipeline the engine's ticks (``EngineConfig.overlap_output_building``):
a tick searches the micro-batch encoded the tick before, queues the next encoder, then builds
the searched batch's outputs; the outputs are the same, one tick later."""

from __future__ import annotations

from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.engine.request import Request
from tests.helpers.fake_ctc import build_fake_ctc, speechy_audio


def _engine(overlap: bool) -> ASREngine:
    return ASREngine(EngineConfig(device="cpu", max_batch_size=3, decode_method="ctc",
                                  decode_options={"beam_size": 1},
                                  overlap_output_building=overlap),
                     loaded=build_fake_ctc(seed=1))


def _requests() -> list[Request]:
    return [Request(f"r{i}", speechy_audio(i), metadata={"i": i}) for i in range(10)]


def _trace(engine: ASREngine) -> list[str]:
    """Record the order of encoder forwards and output building."""
    events: list[str] = []
    forward, search = engine.runner.forward, engine.strategy.search_offline

    def traced_forward(feats, lens, consumes):
        events.append(f"encode {feats.shape[0]}")
        return forward(feats, lens, consumes)

    def traced_search(enc, lens, micro):
        events.append(f"search {len(micro)}")
        build = search(enc, lens, micro)

        def traced_build():
            events.append(f"build {len(micro)}")
            return build()
        return traced_build

    engine.runner.forward = traced_forward
    engine.strategy.search_offline = traced_search
    return events


def test_outputs_are_the_same_with_and_without_the_overlap() -> None:
    def run(overlap: bool) -> dict[str, tuple]:
        outs = list(_engine(overlap).run(_requests()))
        return {o.request_id: (o.text, tuple(o.token_ids), o.metadata["i"]) for o in outs}

    plain, overlapped = run(False), run(True)
    assert len(plain) == 10 and plain == overlapped


def test_a_batch_is_searched_then_the_next_encoder_queued_then_its_outputs_built() -> None:
    engine = _engine(True)
    events = _trace(engine)
    outs = list(engine.run(_requests()))
    assert len(outs) == 10
    at = {kind: [i for i, e in enumerate(events) if e.startswith(kind)]
          for kind in ("encode", "search", "build")}
    assert [len(v) for v in at.values()] == [4, 4, 4]  # 3 + 3 + 3 + 1 rows
    for k in range(4):
        assert at["encode"][k] < at["search"][k] < at["build"][k]
    for k in range(3):  # the next encoder is queued between a batch's search and its build
        assert at["search"][k] < at["encode"][k + 1] < at["build"][k]
    assert not engine.has_unfinished()


def test_outputs_leave_one_tick_after_their_encoder() -> None:
    engine = _engine(True)
    for r in _requests()[:3]:
        engine.add_request(r)
    assert engine.step() == []  # the first tick only queues the encoder
    assert sorted(o.request_id for o in engine.step()) == ["r0", "r1", "r2"]
    assert not engine.has_unfinished()


def test_a_source_that_waits_on_an_output_still_gets_it() -> None:
    """A request made only once the one before it finished: the unbuilt batch must be built
    when nothing else waits, or the source would wait forever."""
    engine = _engine(True)
    done: list[str] = []

    def chain():
        for i in range(3):
            yield Request(f"r{i}", speechy_audio(i))
            while len(done) <= i:
                yield None
    for out in engine.run(chain()):
        done.append(out.request_id)
    assert done == ["r0", "r1", "r2"]


def test_a_family_redefining_decode_offline_alone_keeps_its_own_decode() -> None:
    """ctc_aed_rescoring subclasses CTC and redefines decode_offline only: the engine's split
    call must run the subclass's decode, not the parent's search."""
    from oasr.engine.decode.base import DecodeStrategy
    from oasr.engine.decode.ctc import CtcDecodeStrategy
    from oasr.engine.decode.ctc_aed_rescoring import CtcAedRescoringStrategy

    assert issubclass(CtcAedRescoringStrategy, CtcDecodeStrategy)
    assert CtcDecodeStrategy.search_offline is not DecodeStrategy.search_offline
    # the default split: the subclass's whole decode now, its outputs handed back later
    assert CtcAedRescoringStrategy.search_offline is DecodeStrategy.search_offline
