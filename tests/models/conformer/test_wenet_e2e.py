"""WeNet Conformer, end to end: the WeNet experiment folders under ``tests/fixtures/wenet_tiny/``
(train.yaml, final.pt, units.txt, global_cmvn; written by upstream WeNet, see
``test_model_parity.py``) through ``oasr convert`` and ``oasr transcribe``, against upstream
WeNet's recognition recipe on the same clips (``make_e2e.py``: its dataset processor's Kaldi
fbank of the int16-scaled samples, CMVN, ``model.decode`` and its CharTokenizer): text and
token ids equal for ``ctc_greedy_search``, ``ctc_prefix_beam_search`` (our default flags),
``attention_rescoring`` and a chunked prefix beam (WeNet's ``decoding_chunk_size`` /
``num_decoding_left_chunks`` as ``-d chunk_size`` / ``-d left_context_frames``), each run with
the flags ``expected_e2e.json`` names for it."""

from __future__ import annotations

import json

import pytest

from tests.helpers.upstream_e2e import (
    CLIPS,
    DEVICES,
    FIXTURES,
    assert_matches,
    convert,
    full_fp32,
    require_audio,
    transcribe,
)

EXPECTED = json.loads((FIXTURES / "wenet_tiny" / "expected_e2e.json").read_text(encoding="utf-8"))


def test_recorded_on_these_clips():
    assert EXPECTED["clips"] == list(CLIPS)
    assert EXPECTED["variants"] and all(len(v) == 4 for v in EXPECTED["variants"].values())


@pytest.mark.parametrize("variant", sorted(EXPECTED["variants"]))
@pytest.mark.parametrize("device", DEVICES)
def test_convert_and_transcribe_equal_wenet(variant, device, tmp_path, monkeypatch):
    require_audio()
    full_fp32(device, monkeypatch)
    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path / "cache"))
    bundle = tmp_path / "bundle"
    assert "conformer/wenet" in convert(FIXTURES / "wenet_tiny" / variant, bundle)
    for mode, decode in EXPECTED["variants"][variant].items():
        out = tmp_path / mode
        out.mkdir()
        rows = transcribe(bundle, out, *decode["oasr_args"], device=device)
        try:
            assert_matches(decode["clips"], rows)
        except AssertionError as exc:
            raise AssertionError(f"{variant} {mode}: {exc}") from None
