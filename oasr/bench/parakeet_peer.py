"""The transformers peer of ``oasr bench`` for Parakeet CTC and TDT: ``ParakeetForCTC`` /
``ParakeetForTDT`` loaded with ``from_pretrained`` from the transformers checkpoint folder the
user passed as ``--model`` (a converted oasr bundle holds our weights, not theirs, so it is
refused), timed with transformers' own greedy ``generate``.

Features come from transformers' ``ParakeetFeatureExtractor`` set from the folder's
``preprocessor_config.json`` / ``processor_config.json`` (its defaults otherwise), run where
transformers runs it: on the CPU (its ``pad`` leaves the audio on the host; its ``device``
argument moves only the STFT window). Where the extractor cannot be built (it needs librosa in
some transformers releases) the features are ours (``parakeet_logmel``, equal to the extractor's
within ~1e-6, tests/models/fastconformer) on the model's device. ``features`` says which; the
bench records it in every row of the peer.

Decoding is ``generate`` greedy. CTC: the argmax per frame, padded frames set to the blank by
transformers, then repeats merged and blanks dropped (what ``ParakeetTokenizer`` decodes). TDT:
transformers steps every row until all rows are done without padding finished ones, so each row
is cut where its frame pointer passes its encoder length. Text: the folder's ``tokenizer.json``
(``tokenizers``, as ``ParakeetTokenizer`` wraps it) with special tokens skipped; ``tokens``
counts the emitted non-blank labels. ``--max-new-tokens`` does not apply: neither our engine
nor transformers caps CTC / TDT output by it.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["PARAKEET_ARCHITECTURES", "TransformersParakeet", "build_transformers_parakeet",
           "ctc_rows", "parakeet_folder", "transducer_rows"]

# Our architecture name (and transformers' model_type) -> transformers' class.
PARAKEET_ARCHITECTURES = {"parakeet_ctc": "ParakeetForCTC", "parakeet_tdt": "ParakeetForTDT"}
FEATURES_TRANSFORMERS = "transformers ParakeetFeatureExtractor (cpu)"


def parakeet_folder(source: str) -> tuple[Path, str]:
    """(folder, architecture) of the transformers Parakeet CTC / TDT checkpoint ``source`` (a
    folder or Hub id) names; ValueError when it is a converted bundle or another checkpoint."""
    from oasr.models.bundle import is_bundle
    from oasr.models.catalog import resolve_model_name
    from oasr.models.converter import read_json
    from oasr.models.sources import resolve_source

    path = resolve_source(resolve_model_name(source))
    if is_bundle(path):
        raise ValueError(
            f"--compare transformers loads Parakeet with transformers' from_pretrained, and "
            f"{source} is a converted oasr bundle; pass the transformers checkpoint folder it "
            "was converted from (config.json + model.safetensors, as save_pretrained writes it)")
    cfg = (read_json(path / "config.json") if path.is_dir() else None) or {}
    arch = str(cfg.get("model_type", ""))
    if arch not in PARAKEET_ARCHITECTURES:  # model_type absent: the class it was saved from
        by_class = {v: k for k, v in PARAKEET_ARCHITECTURES.items()}
        arch = next((by_class[a] for a in cfg.get("architectures") or [] if a in by_class), arch)
    if arch not in PARAKEET_ARCHITECTURES:
        raise ValueError(
            f"--compare transformers needs a transformers Parakeet checkpoint folder "
            f"({', '.join(PARAKEET_ARCHITECTURES)}); {source} ({path}) is not one "
            f"(config.json model_type: {cfg.get('model_type')!r})")
    return path, arch


def transducer_rows(sequences: list[list[int]], durations: list[list[int]],
                    enc_lens: list[int], blank: int) -> list[list[int]]:
    """Per row, the non-blank labels of a transducer ``generate`` output up to the row's last
    encoder frame (column 0 is the start token; step ``s`` reads frame
    ``sum(durations[1:s+1])``)."""
    rows = []
    for seq, dur, n in zip(sequences, durations, enc_lens, strict=True):
        frame, toks = 0, []
        for tok, d in zip(seq[1:], dur[1:]):
            if frame >= n:
                break
            if tok != blank:
                toks.append(tok)
            frame += d
        rows.append(toks)
    return rows


def ctc_rows(sequences: list[list[int]], enc_lens: list[int], blank: int) -> list[list[int]]:
    """Per row, the frames' argmax labels up to the row's encoder length, repeats merged and
    blanks dropped."""
    rows = []
    for seq, n in zip(sequences, enc_lens, strict=True):
        frames = seq[:n]
        rows.append([t for i, t in enumerate(frames)
                     if t != blank and (i == 0 or t != frames[i - 1])])
    return rows


class TransformersParakeet:
    """Greedy batch transcription with transformers' Parakeet CTC / TDT (features included).

    ``features``: ``"auto"`` (transformers' extractor where it can be built, else ours),
    ``"transformers"`` or ``"oasr"``.
    """

    name = "transformers"

    def __init__(self, folder: str | Path, architecture: str, device: str = "cpu",
                 dtype: Any = None, features: str = "auto") -> None:
        import torch
        import transformers
        from tokenizers import Tokenizer

        if features not in ("auto", "transformers", "oasr"):
            raise ValueError(f"features={features!r} (valid: auto, transformers, oasr)")
        self.folder = Path(folder)
        self.architecture = architecture
        self.device = device
        self.dtype = dtype or torch.float32
        cls = getattr(transformers, PARAKEET_ARCHITECTURES[architecture])
        self.model = cls.from_pretrained(str(self.folder), dtype=self.dtype).to(device).eval()
        cfg = self.model.config
        # transformers' CTC blank is the pad token; a transducer's has its own id.
        self.blank = int(cfg.pad_token_id if architecture == "parakeet_ctc"
                         else cfg.blank_token_id)
        tok_file = self.folder / "tokenizer.json"
        if not tok_file.is_file():
            raise FileNotFoundError(f"{self.folder} has no tokenizer.json (transformers' "
                                    "Parakeet tokenizer); save the processor beside the model")
        self.tokenizer = Tokenizer.from_file(str(tok_file))
        self._build_features(features, int(cfg.encoder_config.num_mel_bins))

    def _build_features(self, mode: str, bins: int) -> None:
        from oasr.models.converter import read_feature_extractor_config

        pre = read_feature_extractor_config(self.folder)
        self.fe = None
        if mode != "oasr":
            import transformers

            try:
                self.fe = (transformers.ParakeetFeatureExtractor.from_dict(pre) if pre
                           else transformers.ParakeetFeatureExtractor(feature_size=bins))
                self.features = FEATURES_TRANSFORMERS
                return
            except ImportError as exc:  # librosa, in the releases whose extractor needs it
                if mode == "transformers":
                    raise
                reason = f"transformers' ParakeetFeatureExtractor unavailable: {exc}"
        else:
            reason = "asked for"
        from oasr.features import build_extractor
        from oasr.models.fastconformer.converters import parakeet_logmel_features

        self.fcfg = parakeet_logmel_features(bins, pre)
        self.spec = build_extractor(self.fcfg)
        self.features = f"oasr parakeet_logmel ({self.device}; {reason})"

    def _features(self, audios: list[np.ndarray]) -> tuple[Any, Any]:
        """(B, frames, mels) features in the model's dtype and the (B, frames) frame mask, on
        the device."""
        import torch

        if self.fe is not None:
            x = self.fe(audios, sampling_rate=self.fe.sampling_rate, return_tensors="pt",
                        return_attention_mask=True)
            return (x.input_features.to(self.device, self.dtype),
                    x.attention_mask.to(self.device).long())
        wav = torch.zeros(len(audios), max(len(a) for a in audios))
        for i, a in enumerate(audios):
            wav[i, :len(a)] = torch.from_numpy(np.asarray(a, dtype=np.float32))
        lens = torch.tensor([len(a) for a in audios], device=self.device)
        feats, flens = self.spec.fn(wav.to(self.device), lens, self.fcfg)
        mask = torch.arange(feats.shape[1], device=self.device)[None] < flens[:, None]
        return feats.to(self.dtype), mask.long()

    def transcribe_with_counts(self, audios: list[np.ndarray]) -> tuple[list[str], int]:
        """Texts of ``audios`` (each (N,) float32 at 16 kHz) and the non-blank labels emitted."""
        import torch

        with torch.inference_mode():
            feats, mask = self._features(audios)
            if self.architecture == "parakeet_ctc":
                seqs = self.model.generate(feats, attention_mask=mask)  # (B, frames')
            else:
                with warnings.catch_warnings():
                    # transformers bounds a transducer's steps itself (max_symbols_per_step x
                    # frames) and says so on every call.
                    warnings.filterwarnings("ignore", message="Using the model-agnostic default")
                    out = self.model.generate(feats, attention_mask=mask,
                                              decoder_start_token_id=self.blank)
            # Each row's encoder frames, as transformers' encoder derives them from the mask.
            enc_lens = self.model._get_subsampling_output_length(mask.sum(-1)).tolist()
        if self.architecture == "parakeet_ctc":
            rows = ctc_rows(seqs.tolist(), enc_lens, self.blank)
        else:
            rows = transducer_rows(out.sequences.tolist(), out.durations.tolist(), enc_lens,
                                   self.blank)
        texts = [t.strip() for t in self.tokenizer.decode_batch(rows, skip_special_tokens=True)]
        return texts, sum(map(len, rows))

    def transcribe(self, audios: list[np.ndarray]) -> list[str]:
        return self.transcribe_with_counts(audios)[0]


def build_transformers_parakeet(source: str, device: str, dtype: Any) -> TransformersParakeet:
    """The peer on the transformers Parakeet folder ``source`` names."""
    folder, arch = parakeet_folder(source)
    return TransformersParakeet(folder, arch, device=device, dtype=dtype)
