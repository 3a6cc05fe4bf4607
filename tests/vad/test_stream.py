"""Streams sharing Silero through one batched call reproduce each stream decoded alone."""

import pytest
import soundfile as sf
import torch

from oasr.vad import VADS, build_detector
from oasr.vad.endpointer import Endpointer
from oasr.vad.stream import StreamingVadPool
from tests.helpers.data import SHARED_DATA

CLIPS = SHARED_DATA / "librispeech-test-other-70" / "audio"


def _clip(name):
    path = CLIPS / f"{name}.flac"
    if not path.is_file():
        pytest.skip(f"needs {path}")
    return torch.from_numpy(sf.read(path, dtype="float32")[0])


def test_pool_batches_streams_and_endpoints_match_offline():
    pytest.importorskip("silero_vad")
    det = build_detector("silero")
    spec = VADS.get("silero")
    frame = spec.framing.frame_samples[16000]
    # Two utterances with 2 s of silence after each: every stream should endpoint.
    rows = {k: torch.cat([_clip(c)[: 150 * frame], torch.zeros(64 * frame)])
            for k, c in (("a", "1688-142285-0000"), ("b", "1688-142285-0001"))}
    pool = StreamingVadPool(det, spec, 16000)
    for k in rows:
        pool.open(k)
    events = {k: [] for k in rows}
    calls = 0
    orig = det.detect_streaming

    def counting(*a, **kw):
        nonlocal calls
        calls += 1
        return orig(*a, **kw)

    det.detect_streaming = counting
    n = rows["a"].shape[0] // frame
    for start in range(0, n, 10):
        step = {k: w[start * frame:min(start + 10, n) * frame] for k, w in rows.items()}
        for k, ev in pool.step(step).items():
            events[k] += ev
    assert calls == -(-n // 10)  # one detector call per step for both streams
    for k, w in rows.items():
        offline = det.detect(w[None], torch.tensor([len(w)]), 16000).row(0)
        assert torch.allclose(torch.cat(pool.streams[k].probs), offline, atol=1e-5)
        alone = Endpointer(frame / 16000, pool.config).feed(offline.numpy())
        assert events[k] == alone
        assert [e.kind for e in events[k]][-1] == "endpoint"
        assert events[k][0].kind == "speech_start"


def test_pool_refuses_a_detector_without_streaming_state():
    det = build_detector("ctc_blank")
    with pytest.raises(ValueError, match="not a stateful stream detector"):
        StreamingVadPool(det, VADS.get("ctc_blank"), 16000)
