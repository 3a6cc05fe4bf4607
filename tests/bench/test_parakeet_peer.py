"""``oasr bench --compare transformers`` on Parakeet CTC and TDT: transformers' own
``ParakeetFor{CTC,TDT}.generate`` from the checkpoint folder, beside our engine on the same
weights and audio; and the refusals (a converted bundle, an architecture with no peer).

Tiny random checkpoints written by transformers' ``save_pretrained`` (tests/models/fastconformer
/hf_tiny.py) on real LibriSpeech clips, on the CPU in fp32, where both systems emit the same
labels.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

tf = pytest.importorskip("transformers", reason="pip install 'transformers>=5.23'")
if not hasattr(tf, "ParakeetForTDT"):
    pytest.skip("transformers has no ParakeetForTDT; pip install 'transformers>=5.23'",
                allow_module_level=True)

from oasr.bench.peers import build_peer, check_transformers_peer, peer_needs_weights  # noqa: E402
from oasr.cli.app import app  # noqa: E402
from tests.helpers.data import SHARED_DATA  # noqa: E402
from tests.helpers.tiny_whisper import torch_threads  # noqa: E402
from tests.models.fastconformer.hf_tiny import randomize, save_hf  # noqa: E402

AUDIO = SHARED_DATA / "librispeech-test-other-70" / "audio"
runner = CliRunner()


def _save(kind: str, folder: Path) -> Path:
    if kind == "ctc":
        # At hf_tiny's weight scale the tiny encoder's frames barely differ over time and the
        # CTC head emits one label per clip; at 0.5 they differ and it emits dozens.
        model = save_hf("ctc", folder)
        randomize(model, seed=0, scale=0.5)
        model.save_pretrained(folder)
    else:
        save_hf(kind, folder, blank_bias=0.0)
    return folder


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    files = sorted(AUDIO.glob("*.flac"))
    if not files:
        pytest.skip(f"needs {AUDIO}/*.flac")
    clips = [f for f in files if 2.0 < sf.info(str(f)).duration < 6.0][:3]
    tmp = tmp_path_factory.mktemp("parakeet_bench")
    with pytest.MonkeyPatch.context() as mp, torch_threads(1):
        mp.setenv("OASR_CACHE_DIR", str(tmp / "cache"))  # the converted bundles stay here
        manifest = tmp / "m.jsonl"
        manifest.write_text("".join(json.dumps({"id": c.stem, "audio": str(c), "text": "x"})
                                    + "\n" for c in clips), encoding="utf-8")
        yield {"manifest": manifest, "clips": clips,
               "ctc": _save("ctc", tmp / "ctc"), "tdt": _save("tdt", tmp / "tdt")}


def _bench(setup: dict, model: Path, *args: str):
    return runner.invoke(app, ["bench", str(setup["manifest"]), "--model", str(model),
                               "--device", "cpu", "--threads", "1", "--compare",
                               "transformers", *args])


def _ours(folder: Path, audios: list[np.ndarray]) -> tuple[list[str], int]:
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import Request
    from oasr.models.loader import load_pretrained

    engine = ASREngine(EngineConfig(model=str(folder), device="cpu", dtype="fp32",
                                    max_batch_size=len(audios)),
                       loaded=load_pretrained(str(folder)))
    outs = {o.request_id: o for o in engine.run(Request(str(i), a)
                                                 for i, a in enumerate(audios))}
    rows = [outs[str(i)] for i in range(len(audios))]
    return [o.text for o in rows], sum(len(o.token_ids) for o in rows)


@pytest.mark.parametrize("kind", ["ctc", "tdt"])
def test_compare_transformers_runs_parakeet_beside_ours(setup, kind: str,
                                                       tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    res = _bench(setup, setup[kind], "-b", "1", "-b", "2", "--json", str(out))
    assert res.exit_code == 0, res.output
    payload = json.loads(out.read_text())
    assert payload["systems"] == ["ours", "transformers"]
    rows = {(r["system"], r["batch_size"]): r for r in payload["results"]}
    assert sorted(rows) == [("ours", 1), ("ours", 2), ("transformers", 1), ("transformers", 2)]
    for b in (1, 2):
        ours, peer = rows[("ours", b)], rows[("transformers", b)]
        assert peer["requests"] == ours["requests"] == 3 and peer["errors"] == 0
        assert peer["audio_s"] == pytest.approx(ours["audio_s"])
        assert peer["rtfx"] > 0 and peer["latency_p50_ms"] > 0
        # The same labels: as many tokens, the same errors against the references.
        assert peer["tokens"] == ours["tokens"] > 10
        assert peer["wer"] == ours["wer"]
        # Where the peer's features came from is recorded, in the JSON and the table's notes.
        assert peer["features"] == "transformers ParakeetFeatureExtractor (cpu)"
        assert ours["features"] is None
    assert "transformers features: transformers ParakeetFeatureExtractor" in res.output


@pytest.mark.parametrize("kind", ["ctc", "tdt"])
def test_peer_transcripts_equal_ours(setup, kind: str) -> None:
    import torch

    from oasr.audio import load_audio

    audios = [load_audio(str(c), 16000) for c in setup["clips"]]
    ours, ours_tokens = _ours(setup[kind], audios)
    assert not peer_needs_weights("transformers", f"parakeet_{kind}")
    peer = build_peer("transformers", None, "cpu", torch.float32, source=str(setup[kind]))
    texts, tokens = peer.transcribe_with_counts(audios)
    assert texts == ours and tokens == ours_tokens > 10
    assert [peer.transcribe([a])[0] for a in audios] == ours  # padding changes nothing
    # Our frontend in place of transformers' extractor (where it cannot be built): the same.
    from oasr.bench.parakeet_peer import TransformersParakeet

    fallback = TransformersParakeet(setup[kind], f"parakeet_{kind}", features="oasr")
    assert fallback.transcribe(audios) == ours
    assert fallback.features.startswith("oasr parakeet_logmel (cpu")


@pytest.mark.parametrize("variant", ["ctc_seed0", "tdt_seed2"])
def test_peer_reproduces_transformers_documented_recipe(variant: str) -> None:
    """On the upstream-layout fixtures (a SentencePiece tokenizer, processor_config.json), the
    peer's texts are the ones transformers' processor + generate + batch_decode gave."""
    from tests.helpers.upstream_e2e import CLIPS, FIXTURES, clip_paths, load_expected, read_clip

    if not all(p.is_file() for p in clip_paths()):
        pytest.skip("needs the LibriSpeech test-other clips")
    expected = load_expected("parakeet")["variants"][variant]["greedy"]
    audios = [read_clip(p) for p in clip_paths()]
    folder = FIXTURES / "parakeet" / variant
    peer = build_peer("transformers", None, "cpu", None, source=str(folder))
    assert peer.transcribe(audios) == [expected[c]["text"] for c in CLIPS]


def test_features_fall_back_to_ours_and_say_so(setup, monkeypatch) -> None:
    from oasr.bench.parakeet_peer import TransformersParakeet

    def no_librosa(self, *args, **kwargs) -> None:  # a release whose extractor needs librosa
        raise ImportError("ParakeetFeatureExtractor requires the librosa library")

    # On the class itself: transformers' lazy module re-binds its names on later imports.
    monkeypatch.setattr(tf.ParakeetFeatureExtractor, "__init__", no_librosa)
    peer = TransformersParakeet(setup["tdt"], "parakeet_tdt")
    assert peer.features.startswith("oasr parakeet_logmel (cpu; transformers' "
                                    "ParakeetFeatureExtractor unavailable: ")
    assert "librosa" in peer.features
    with pytest.raises(ImportError):
        TransformersParakeet(setup["tdt"], "parakeet_tdt", features="transformers")


def test_a_converted_bundle_is_refused(setup, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    res = runner.invoke(app, ["convert", str(setup["ctc"]), str(bundle)])
    assert res.exit_code == 0, res.output
    res = _bench(setup, bundle, "-b", "1")
    assert res.exit_code == 2
    text = " ".join(res.output.split())
    assert "converted oasr bundle" in text and "transformers checkpoint folder" in text


def test_an_architecture_without_a_peer_is_refused(setup, tmp_path: Path) -> None:
    folder = tmp_path / "rnnt"
    save_hf("rnnt", folder)
    res = _bench(setup, folder, "-b", "1")
    assert res.exit_code == 2
    text = " ".join(res.output.split())
    assert "'parakeet_rnnt'" in text and "whisper, parakeet_ctc, parakeet_tdt" in text
    with pytest.raises(ValueError, match="runs whisper, parakeet_ctc, parakeet_tdt"):
        check_transformers_peer("zipformer", "some-model")
    check_transformers_peer("whisper", "")  # Whisper runs on our weights: nothing to check
