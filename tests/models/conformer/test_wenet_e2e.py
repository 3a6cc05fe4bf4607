"""WeNet Conformer, end to end: the WeNet experiment folders under ``tests/fixtures/wenet_tiny/``
(train.yaml, final.pt, units.txt, global_cmvn; written by upstream WeNet, see
``test_model_parity.py``) through ``oasr convert`` and ``oasr transcribe``, against upstream
WeNet's recognition recipe on the same clips (``make_e2e.py``: its dataset processor's Kaldi
fbank of the int16-scaled samples, CMVN, ``model.decode`` and its CharTokenizer): text and
token ids equal for ``ctc_greedy_search``, ``ctc_prefix_beam_search`` (our default flags),
``attention_rescoring`` and a chunked prefix beam (WeNet's ``decoding_chunk_size`` /
``num_decoding_left_chunks`` as ``-d chunk_size`` / ``-d left_context_frames``), each run with
the flags ``expected_e2e.json`` names for it.

Streaming: on each variant that streams chunk-wise (causal convolution and chunk training:
``streams_chunk_wise``; ``causal_conv2d8`` only), ``oasr stream --no-endpoint`` with the
``--chunk-frames`` / ``--left-chunks`` (and search) flags recorded beside upstream's simulated
streaming (``model.decode(..., simulate_streaming=True)``: ``forward_chunk_by_chunk``): each
clip's one final has upstream's text and token ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oasr.models.conformer.converters import WenetConformerConverter
from oasr.models.conformer.encoder import streams_chunk_wise
from tests.helpers.upstream_e2e import (
    CLIPS,
    DEVICES,
    FIXTURES,
    assert_matches,
    clip_paths,
    convert_fixture,
    transcribe,
)

EXPECTED = json.loads((FIXTURES / "wenet_tiny" / "expected_e2e.json").read_text(encoding="utf-8"))


def test_recorded_on_these_clips():
    assert EXPECTED["clips"] == list(CLIPS)
    assert EXPECTED["variants"] and all(len(v) == 4 for v in EXPECTED["variants"].values())
    # upstream's simulated streaming is recorded for exactly the variants that stream
    # chunk-wise here, four decodes each
    streaming = {v for v in EXPECTED["variants"] if streams_chunk_wise(
        WenetConformerConverter().build_config(FIXTURES / "wenet_tiny" / v))}
    assert streaming == set(EXPECTED["streaming"]) == {"causal_conv2d8"}
    assert all(len(v) == 4 for v in EXPECTED["streaming"].values())


@pytest.mark.parametrize("variant", sorted(EXPECTED["variants"]))
@pytest.mark.parametrize("device", DEVICES)
def test_convert_and_transcribe_equal_wenet(variant, device, tmp_path, monkeypatch):
    bundle, converted = convert_fixture(FIXTURES / "wenet_tiny" / variant, tmp_path,
                                        monkeypatch, device)
    assert "conformer/wenet" in converted
    for mode, decode in EXPECTED["variants"][variant].items():
        out = tmp_path / mode
        out.mkdir()
        rows = transcribe(bundle, out, *decode["oasr_args"], device=device)
        try:
            assert_matches(decode["clips"], rows)
        except AssertionError as exc:
            raise AssertionError(f"{variant} {mode}: {exc}") from None


# CPU only for now: its CUDA run (DEVICES, fp32) awaits a device round.
@pytest.mark.parametrize("variant", sorted(EXPECTED["streaming"]))
def test_stream_equals_wenet_simulate_streaming(variant, tmp_path, monkeypatch):
    """``oasr stream CLIPS --model BUNDLE --no-endpoint`` with each recorded decode's flags:
    one final per clip, its text and token ids (the ``token_ids`` the chunk-wise policy hands
    to ``Stream.finalize``) equal to upstream's ``forward_chunk_by_chunk`` decode."""
    from typer.testing import CliRunner

    from oasr.cli.app import app
    from oasr.streaming.stream import Stream

    bundle, converted = convert_fixture(FIXTURES / "wenet_tiny" / variant, tmp_path,
                                        monkeypatch)
    assert "conformer/wenet" in converted
    finals: list[tuple[int, list[int] | None]] = []
    finalize = Stream.finalize

    def spy(self, *args, token_ids=None, **kwargs):  # noqa: ANN001, ANN202
        finals.append((self.id, token_ids))
        return finalize(self, *args, token_ids=token_ids, **kwargs)

    monkeypatch.setattr(Stream, "finalize", spy)
    for mode, decode in EXPECTED["streaming"][variant].items():
        finals.clear()
        out = tmp_path / f"{mode}.jsonl"
        res = CliRunner().invoke(app, ["stream", *map(str, clip_paths()), "--model", str(bundle),
                                       "--device", "cpu", "--dtype", "fp32", "--no-endpoint",
                                       "--vad", "energy", "-o", str(out),
                                       *decode["oasr_args"]])
        assert res.exit_code == 0, res.output
        lines = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
        # one final per clip (written as each stream ends)
        texts = {Path(r["source"]).stem: r["text"] for r in lines}
        assert len(lines) == len(texts) and set(texts) == set(CLIPS), (mode, lines)
        # one final per stream; streams are opened in the order of the files given
        ids = sorted(finals)
        assert len(ids) == len(CLIPS) == len({i for i, _ in ids}), (mode, ids)
        rows = {c: {"text": texts[c], "token_ids": t} for c, (_, t) in zip(CLIPS, ids)}
        try:
            assert_matches(decode["clips"], rows)
        except AssertionError as exc:
            raise AssertionError(f"{variant} {mode}: {exc}") from None
