"""Silero VAD from oasr.layers against the silero-vad package's own TorchScript and ONNX models."""

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from oasr.audio.resample import resample
from oasr.vad import MissingWeightsError, build_detector
from oasr.vad.silero import GEOMETRY, SileroVad
from tests.helpers.data import SHARED_DATA

_threads = torch.get_num_threads()
silero_vad = pytest.importorskip("silero_vad")
torch.set_num_threads(_threads)  # importing silero_vad sets one thread for the process
CLIPS = SHARED_DATA / "librispeech-test-other-70" / "audio"


def _speech(utterance: str, rate: int) -> torch.Tensor:
    path = CLIPS / f"{utterance}.flac"
    if not path.is_file():
        pytest.skip(f"needs {path}")
    wav, sr = sf.read(path, dtype="float32")
    return torch.from_numpy(resample(wav, sr, rate).astype(np.float32))


def _reference(model, wav: torch.Tensor, rate: int) -> torch.Tensor:
    """The package's own loop (as get_speech_timestamps runs it): one call per frame, state kept
    by the model, the last frame zero-padded."""
    frame = GEOMETRY[rate][1]
    model.reset_states()
    out = []
    for i in range(0, len(wav), frame):
        chunk = torch.nn.functional.pad(wav[i:i + frame], (0, max(0, i + frame - len(wav))))
        with torch.no_grad():
            out.append(float(model(chunk[None], rate)))
    return torch.tensor(out)


@pytest.fixture(scope="module")
def detector() -> SileroVad:
    return build_detector("silero")


@pytest.mark.parametrize("rate", [16000, 8000])
def test_matches_the_package_jit_on_real_speech(detector, rate):
    wav = _speech("1688-142285-0003", rate)
    ours = detector.detect(wav[None], torch.tensor([len(wav)]), rate).row(0)
    ref = _reference(silero_vad.load_silero_vad(), wav, rate)
    assert ours.shape == ref.shape
    assert (ours - ref).abs().max() < 1e-4
    assert ref.max() > 0.9 and ref.min() < 0.1  # real speech with pauses, not a flat trace


@pytest.mark.parametrize("rate", [16000, 8000])
def test_matches_the_package_onnx_through_onnxruntime(detector, rate):
    pytest.importorskip("onnxruntime")
    wav = _speech("1688-142285-0005", rate)
    ours = detector.detect(wav[None], torch.tensor([len(wav)]), rate).row(0)
    ref = _reference(silero_vad.load_silero_vad(onnx=True), wav, rate)
    assert (ours - ref).abs().max() < 1e-4


def test_batched_rows_of_different_lengths_equal_single_rows(detector):
    a, b = _speech("1688-142285-0001", 16000), _speech("1688-142285-0002", 16000)
    b = b[: len(b) // 2 + 77]  # not a whole number of frames
    batch = torch.zeros(2, max(len(a), len(b)))
    batch[0, : len(a)], batch[1, : len(b)] = a, b
    out = detector.detect(batch, torch.tensor([len(a), len(b)]), 16000)
    for row, wav in enumerate((a, b)):
        single = detector.detect(wav[None], torch.tensor([len(wav)]), 16000).row(0)
        assert torch.allclose(out.row(row), single, atol=1e-5)
    assert out.probs[1, out.lengths[1]:].abs().max() == 0
    assert out.frame_s == pytest.approx(0.032)


def test_streaming_with_stacked_states_equals_offline(detector):
    rate, frame = 16000, GEOMETRY[16000][1]
    rows = [_speech("1688-142285-0004", rate)[: 40 * frame],
            _speech("1688-142285-0006", rate)[: 40 * frame]]
    offline = [detector.detect(w[None], torch.tensor([len(w)]), rate).row(0) for w in rows]
    states = [detector.init_state(1, rate) for _ in rows]
    got: list[list[torch.Tensor]] = [[], []]
    for start, size in ((0, 3), (3, 1), (4, 16), (20, 20)):  # uneven chunks of frames
        state = detector.stack_states(states)
        chunk = torch.stack([w[start * frame:(start + size) * frame] for w in rows])
        probs, state = detector.detect_streaming(chunk, state, rate)
        states = detector.unstack_states(state)
        for i in range(2):
            got[i].append(probs[i])
    for i in range(2):
        assert torch.allclose(torch.cat(got[i]), offline[i], atol=1e-5)


def test_chunk_must_be_whole_frames(detector):
    with pytest.raises(ValueError, match="whole number of 512-sample frames"):
        detector.detect_streaming(torch.zeros(1, 700), detector.init_state(1, 16000), 16000)


def test_unsupported_rate_names_the_fix(detector):
    with pytest.raises(ValueError, match="resample"):
        detector.net(22050)


def test_safetensors_source_loads_the_tinygrad_ports_weights(detector):
    """The package's safetensors file is another release's weights: it loads into the same
    network and gives a real trace, but not the jit's numbers (why the jit is the default)."""
    wav = _speech("1688-142285-0003", 16000)
    alt = SileroVad(detector.weights, source="safetensors")
    a = alt.detect(wav[None], torch.tensor([len(wav)]), 16000).row(0)
    b = detector.detect(wav[None], torch.tensor([len(wav)]), 16000).row(0)
    assert a.max() > 0.9 and a.min() < 0.1
    assert (a - b).abs().max() > 1e-2


def test_missing_weights_fail_at_construction(tmp_path: Path):
    with pytest.raises(MissingWeightsError, match="oasr\\[vad\\]"):
        build_detector("silero", model_dir=tmp_path)


def test_convolutions_on_cuda_run_in_full_fp32_and_the_flags_come_back():
    from oasr.vad.silero import _ieee_convolutions

    flags = torch.backends.cudnn
    before = flags.allow_tf32
    with _ieee_convolutions(torch.device("cuda")):
        assert flags.allow_tf32 is False
        assert flags.conv.fp32_precision == flags.rnn.fp32_precision
    with _ieee_convolutions(torch.device("cpu")):
        assert flags.allow_tf32 == before
    assert flags.allow_tf32 == before


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu(detector):
    # A batch of rows of different lengths, as the coverage check runs it on the engine's GPU:
    # the convolutions in full fp32 there (not TF32), so every row's probabilities are the CPU's.
    wavs = [_speech(u, 16000) for u in ("1688-142285-0003", "1998-15444-0007",
                                        "2414-128291-0004")]
    lengths = torch.tensor([len(w) for w in wavs])
    batch = torch.zeros(len(wavs), int(lengths.max()))
    for i, w in enumerate(wavs):
        batch[i, : len(w)] = w
    gpu = build_detector("silero", device="cuda")
    out = gpu.detect(batch.cuda(), lengths, 16000)
    assert out.probs.device.type == "cuda"
    for i, w in enumerate(wavs):
        cpu = detector.detect(w[None], torch.tensor([len(w)]), 16000).row(0)
        assert (out.row(i).cpu() - cpu).abs().max() < 1e-4
