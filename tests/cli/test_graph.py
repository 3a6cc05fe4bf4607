"""``oasr graph build`` end to end: a TLG for a WeNet CTC model (the tiny fixture, its character
units spelling the words) from the shared transcripts, then ``oasr transcribe --decode-method
ctc_wfst --graph NAME`` on shared audio, each row's text equal to kaldi-decoder's
FasterDecoder (Kaldi's own CPU decoder) over the same model's log-probs on the same graph.

The fixture's weights are random (its argmax is one unit throughout), so its paths are short;
the search's parity on many-word paths is tests/graphs/test_search.py's."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from oasr.audio.decode import load_audio
from oasr.cli.app import app
from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.engine.request import Request
from oasr.graphs.store import load_graph
from oasr.models.registry import detect_converter
from tests.graphs.helpers import kaldi_best, sentences
from tests.models.conformer.wenet_fixtures import fixture_dir
from tests.transcribe.conftest import clip

pytest.importorskip("kaldifst")
pytest.importorskip("kaldi_decoder")

CLIPS = ("1688-142285-0002", "1688-142285-0003")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    src = fixture_dir("u2pp_conv2d4")
    dst = tmp_path_factory.mktemp("bundle") / "wenet"
    detect_converter(src).convert(src, dst, source_label="wenet_tiny")
    return dst


def test_build_then_transcribe_equals_kaldi_decoder(bundle, tmp_path):
    text = tmp_path / "lm.txt"
    text.write_text("\n".join(" ".join(s) for s in sentences(40)) + "\n", encoding="utf-8")
    arpa = tmp_path / "lm.arpa"
    built = CliRunner().invoke(app, ["graph", "build", "-m", str(bundle), "--text", str(text),
                                     "--order", "2", "--arpa-out", str(arpa), "--json"])
    assert built.exit_code == 0, built.output
    report = json.loads(built.output)
    assert report["graph"] == str(bundle / "graphs" / "tg.fst")
    assert report["TLG_states"] > 0 and report["unspellable_words"] == 0
    assert "ngram 2=" in arpa.read_text(encoding="utf-8")

    out = tmp_path / "out.jsonl"
    audio = [str(clip(c)) for c in CLIPS]
    run = CliRunner().invoke(app, ["transcribe", *audio, "-o", str(out), "--model", str(bundle),
                                   "--device", "cpu", "--threads", "1", "-b", "1",
                                   "--no-progress", "--decode-method", "ctc_wfst",
                                   "--graph", "tg", "-d", "beam=12", "-d", "max_active=500"])
    assert run.exit_code == 0, run.output
    rows = {r["audio"] if "audio" in r else r["id"]: r
            for r in map(json.loads, out.read_text().splitlines())}
    assert len(rows) == len(CLIPS)

    graph = load_graph(bundle / "graphs" / "tg.fst")
    engine = ASREngine(EngineConfig(model=str(bundle), device="cpu", decode_method="ctc_wfst",
                                    decode_options={"graph": "tg"}))
    for path, row in zip(audio, sorted(rows.values(), key=lambda r: r.get("audio", r["id"]))):
        feats, lens = engine.inputs([Request("x", load_audio(path))])
        with torch.no_grad():
            lp, n = engine.model.forward_offline(feats, lens)
        ref = kaldi_best(graph.path, lp[0, :int(n[0])].numpy(), beam=12.0, max_active=500,
                         min_active=200)
        assert ref.words, path  # the comparison is over words, not two empty rows
        assert row["text"] == " ".join(graph.word_text(ref.words)), path


def test_build_refusals(bundle, tmp_path):
    both = CliRunner().invoke(app, ["graph", "build", "-m", str(bundle)])
    assert both.exit_code == 2 and "--arpa FILE or --text FILE" in both.output
    wrong = CliRunner().invoke(app, ["graph", "bild", "-m", str(bundle), "--text", "x"])
    assert wrong.exit_code == 2 and "unknown action 'bild'" in wrong.output
    missing = CliRunner().invoke(app, ["transcribe", str(clip(CLIPS[0])), "-o",
                                       str(tmp_path / "o.jsonl"), "--model", str(bundle),
                                       "--device", "cpu", "--no-progress", "--decode-method",
                                       "ctc_wfst", "--graph", "nope"])
    assert missing.exit_code != 0 and "no graph 'nope'" in missing.output


def test_stream_gives_the_offline_words_on_a_causal_model(tmp_path):
    """``oasr stream --decode-method ctc_wfst --graph tg`` on the causal fixture: the stream's
    finals are the words ``oasr transcribe`` gives for the file."""
    src = fixture_dir("causal_conv2d8")
    causal = tmp_path / "causal"
    detect_converter(src).convert(src, causal, source_label="wenet_causal")
    text = tmp_path / "lm.txt"
    text.write_text("\n".join(" ".join(s) for s in sentences(40)) + "\n", encoding="utf-8")
    built = CliRunner().invoke(app, ["graph", "build", "-m", str(causal), "--text", str(text),
                                     "--order", "2"])
    assert built.exit_code == 0, built.output
    audio = str(clip(CLIPS[1]))
    flags = ["-m", str(causal), "--device", "cpu", "--decode-method", "ctc_wfst",
             "--graph", "tg"]
    streamed = CliRunner().invoke(app, ["stream", audio, *flags, "-o",
                                        str(tmp_path / "s.jsonl")])
    assert streamed.exit_code == 0, streamed.output
    offline = CliRunner().invoke(app, ["transcribe", audio, *flags, "--no-progress", "-o",
                                       str(tmp_path / "o.jsonl")])
    assert offline.exit_code == 0, offline.output
    finals = [json.loads(r) for r in (tmp_path / "s.jsonl").read_text().splitlines()]
    (row,) = [json.loads(r) for r in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert row["text"]
    assert " ".join(f["text"] for f in finals) == row["text"]
