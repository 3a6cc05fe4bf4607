"""The GPU fast path on the real Whisper tiny.en: transcripts equal our CPU path's.

Runs where CUDA is available and the packaged tiny.en (or ``OASR_TEST_BUNDLE``, a converted
bundle, for a GPU image without the model package) and the 70 LibriSpeech utterances (the shared
data, or ``OASR_TEST_AUDIO_NPZ``: ``ids``/``lengths``/``samples`` int16) are present. The CPU
reference is tests/fixtures/whisper_tiny_en_transformers_70.json, which our CPU fp32 path
reproduces on all 70 (tests/ci/test_wer_gate.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from oasr import envs
from tests.helpers.data import SHARED_DATA

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "tests" / "fixtures" / "whisper_tiny_en_transformers_70.json"

pytestmark = pytest.mark.gpu


def _clips() -> list[tuple[str, np.ndarray]]:
    npz = envs.audio_npz_under_test()
    if npz:
        data = np.load(npz)
        out, pos = [], 0
        for uid, n in zip(data["ids"].tolist(), data["lengths"].tolist()):
            out.append((str(uid), data["samples"][pos:pos + n].astype(np.float32) / 32768.0))
            pos += n
        return out
    folder = SHARED_DATA / "librispeech-test-other-70" / "audio"
    if not folder.is_dir():
        pytest.skip("needs the shared LibriSpeech audio or OASR_TEST_AUDIO_NPZ")
    from oasr.audio import load_audio

    return [(p.stem, load_audio(str(p), 16000)) for p in sorted(folder.glob("*.flac"))]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("eos_check_interval", [1, 8])
def test_fp16_graphs_transcripts_equal_the_cpu_path(eos_check_interval):
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import Request
    from oasr.models.loader import load_pretrained

    try:
        bundle = envs.bundle_under_test()
        lm = load_pretrained(None if bundle is None else str(bundle))
    except (ImportError, ValueError, FileNotFoundError) as exc:
        pytest.skip(f"no tiny.en here: {exc}")
    clips = _clips()
    reference = json.loads(REFERENCE.read_text())["transcripts"]
    engine = ASREngine(EngineConfig(device="cuda", dtype="fp16", max_batch_size=32,
                                    decode_options={"eos_check_interval": eos_check_interval}),
                       loaded=lm)
    assert engine.strategy.kv_storage == "paged" and engine.strategy.step_graphs is not None
    outs = {o.request_id: o for o in engine.run(Request(u, a) for u, a in clips)}
    assert all(o.error is None for o in outs.values())
    same = sum(outs[u].text == reference[u] for u, _ in clips)
    print(f"{same}/{len(clips)} transcripts identical to the CPU fp32 path")
    assert same >= 0.98 * len(clips)
