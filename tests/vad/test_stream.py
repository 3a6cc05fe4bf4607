"""Streams sharing one detector through ``StreamingVadPool``: one batched call per step, each
stream's probabilities (and so its endpoints) equal to that stream decoded alone."""

import numpy as np
import pytest
import soundfile as sf
import torch

from oasr.vad import VADS, build_detector
from oasr.vad.endpointer import Endpointer
from oasr.vad.stream import StreamingVadPool, stream_detector_names
from tests.helpers.data import SHARED_DATA

CLIPS = SHARED_DATA / "librispeech-test-other-70" / "audio"


def _clip(name):
    path = CLIPS / f"{name}.flac"
    if not path.is_file():
        pytest.skip(f"needs {path}")
    return sf.read(path, dtype="float32")[0]


def _pool(name, device="cpu"):
    if name == "silero":
        pytest.importorskip("silero_vad")
    return StreamingVadPool(build_detector(name, mode="stream", device=device), VADS.get(name),
                            16000)


def count_detector_calls(pool):
    """Record the batch width of every detector call the pool makes from now on."""
    calls = []
    orig = pool.detector.detect_streaming

    def counting(chunk, *a, **kw):
        calls.append(chunk.shape[0])
        return orig(chunk, *a, **kw)

    pool.detector.detect_streaming = counting
    return calls


def test_pool_batches_streams_and_endpoints_match_offline():
    pool = _pool("silero")
    frame = pool.frame_samples
    # Two utterances with 2 s of silence after each: every stream should endpoint.
    rows = {k: np.concatenate([_clip(c)[: 150 * frame], np.zeros(64 * frame, np.float32)])
            for k, c in (("a", "1688-142285-0000"), ("b", "1688-142285-0001"))}
    for k in rows:
        pool.open(k)
    calls = count_detector_calls(pool)
    probs = {k: [] for k in rows}
    n = len(rows["a"]) // frame
    for start in range(0, n, 10):
        step = {k: w[start * frame:min(start + 10, n) * frame] for k, w in rows.items()}
        for k, p in pool.probabilities(step).items():
            probs[k].append(p)
    assert calls == [2] * -(-n // 10)  # one detector call per step for both streams
    det = pool.detector
    for k, w in rows.items():
        x = torch.from_numpy(w)[None]
        offline = det.detect(x, torch.tensor([len(w)]), 16000).row(0).numpy()
        got = np.concatenate(probs[k])
        assert np.allclose(got, offline, atol=1e-5)
        _, streamed = Endpointer(pool.frame_s).push(got)
        _, alone = Endpointer(pool.frame_s).push(offline)
        assert streamed == alone and streamed and streamed[-1].has_speech


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("name, device", [
    ("silero", "cpu"), ("energy", "cpu"),
    pytest.param("silero", "cuda", marks=[pytest.mark.gpu, CUDA])])
def test_uneven_chunks_in_one_call_equal_each_stream_alone(name, device):
    """Streams with different numbers of new frames (0 included) share one call per step;
    each stream's probabilities equal a pool holding that stream alone, fed the same chunks
    (on CUDA the recurrence with per-row lengths is the fused kernel's)."""
    batched = _pool(name, device)
    frame = batched.frame_samples
    audio = {k: _clip(c)[: 80 * frame] for k, c in
             (("a", "1688-142285-0000"), ("b", "1688-142285-0001"), ("c", "1688-142285-0002"))}
    alone = {k: _pool(name, device) for k in audio}
    for k in audio:
        batched.open(k)
        alone[k].open(k)
    calls = count_detector_calls(batched)
    rng = np.random.default_rng(0)
    pos = dict.fromkeys(audio, 0)
    got = {k: [] for k in audio}
    want = {k: [] for k in audio}
    steps = 0
    while any(pos[k] < len(a) for k, a in audio.items()):
        chunks = {}
        for k, a in audio.items():
            n = int(rng.choice([0, 1, 3, 7])) * frame
            chunks[k], pos[k] = a[pos[k]:pos[k] + n], pos[k] + n
        for k, p in batched.probabilities(chunks).items():
            assert len(p) == len(chunks[k]) // frame
            got[k].append(p)
        for k, c in chunks.items():
            want[k].append(alone[k].probabilities({k: c})[k])
        steps += 1
    assert len(calls) <= steps and max(calls) == 3  # one call a step, the cohort in it
    for k in audio:
        g, w = np.concatenate(got[k]), np.concatenate(want[k])
        assert len(g) == 80
        if name == "energy":
            assert np.array_equal(g, w)
        else:
            assert np.allclose(g, w, atol=1e-5 if device == "cpu" else 1e-4)
            assert np.ptp(g) > 0.5  # speech and pauses: the check can fail


def test_energy_is_a_registered_stream_detector():
    spec = VADS.get("energy")
    assert spec.modes == ("stream",) and not spec.needs_weights and not spec.stateful
    assert spec.framing.frame_samples[16000] == 480
    assert "energy" in stream_detector_names() and "fsmn" not in stream_detector_names()
    pool = _pool("energy")
    pool.open(0)
    loud = np.full(480, 0.1, np.float32)  # -20 dBFS
    quiet = np.full(480, 1e-4, np.float32)  # -80 dBFS
    p = pool.probabilities({0: np.concatenate([loud, quiet])})[0]
    assert p[0] > 0.99 and p[1] < 0.01


def test_pool_refuses_a_detector_that_cannot_stream_audio():
    with pytest.raises(ValueError, match="cannot endpoint a stream from its audio"):
        StreamingVadPool(build_detector("ctc_blank"), VADS.get("ctc_blank"), 16000)
    with pytest.raises(ValueError, match="no framing at 11025 Hz"):
        StreamingVadPool(build_detector("energy"), VADS.get("energy"), 11025)
