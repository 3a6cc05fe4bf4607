"""transformers' ``generate`` as the oracle of a real Whisper checkpoint our loader produced:
the same weights in ``WhisperForConditionalGeneration``, greedy, the checkpoint's suppression
unless a keyword says otherwise."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from oasr.features.whisper_logmel import whisper_logmel


def features(loaded: Any, samples: np.ndarray) -> torch.Tensor:
    """(1, frames, mels): our frontend's log-mel of ``samples``."""
    wav = torch.from_numpy(samples)[None]
    return whisper_logmel(wav, torch.tensor([wav.shape[1]]), loaded.feature_config)[0]


_TWINS: dict[int, Any] = {}


def _twin(loaded: Any) -> Any:
    """transformers' model holding ``loaded``'s weights, built once per model."""
    from tests.models.whisper.test_real_weights import _transformers_twin

    key = id(loaded.model)
    if key not in _TWINS:
        cfg = loaded.model.config
        hf = _transformers_twin(loaded.model)
        hf.generation_config.no_timestamps_token_id = cfg.no_timestamps_token_id
        hf.generation_config.is_multilingual = False
        _TWINS[key] = (loaded.model, hf)  # the model kept alive: its id stays its own
    return _TWINS[key][1]


def hf_generate(loaded: Any, samples: np.ndarray, max_new_tokens: int, num_beams: int = 1,
                **kwargs: Any) -> list[int]:
    """The tokens transformers generates after the decoder prompt (``decoder_input_ids`` when
    given), up to the end of text (excluded)."""
    import transformers

    transformers.logging.set_verbosity_error()
    cfg = loaded.model.config
    hf = _twin(loaded)
    kwargs.setdefault("suppress_tokens", cfg.suppress_tokens)
    kwargs.setdefault("begin_suppress_tokens", cfg.begin_suppress_tokens)
    with torch.no_grad():
        seq = hf.generate(features(loaded, samples).transpose(1, 2), do_sample=False,
                          num_beams=num_beams, max_new_tokens=max_new_tokens, **kwargs)[0].tolist()
    prompt = kwargs.get("decoder_input_ids")
    if prompt is not None and seq[:prompt.shape[1]] == prompt[0].tolist():
        seq = seq[prompt.shape[1]:]
    return seq[:seq.index(cfg.eos_token_id)] if cfg.eos_token_id in seq else seq
