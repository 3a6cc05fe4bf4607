"""``Model.transcribe``'s keywords in faster-whisper's names, mapped onto the run options.

Every keyword of faster-whisper's ``WhisperModel.transcribe`` is either taken (most under the
same name, see :data:`TAKEN`) or refused with the reason in :data:`REFUSED`; the test
``tests/api/test_faster_whisper_shape.py`` walks faster-whisper's signature (recorded in
``tests/fixtures/faster_whisper_transcribe.json``) against both, so a name is never silently
ignored.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from oasr.transcribe.options import CALL_OPTIONS, RunOptions, VadOptions

__all__ = ["REFUSED", "TAKEN", "VAD_PARAMETERS", "call_options"]

# faster-whisper's VadOptions field -> ours.
VAD_PARAMETERS = {"threshold": "vad_threshold", "neg_threshold": "vad_neg_threshold",
                  "min_speech_duration_ms": "vad_min_speech_ms",
                  "min_silence_duration_ms": "vad_min_silence_ms",
                  "speech_pad_ms": "vad_speech_pad_ms",
                  "max_speech_duration_s": "vad_max_segment_s"}

# Keywords taken per call: the request options (faster-whisper's search options among them),
# plus beam_size (an engine over the same weights per beam width) and faster-whisper's VAD
# switch and parameters.
TAKEN = (*CALL_OPTIONS, "beam_size", "vad_filter", "vad_parameters")

REFUSED = {
    "log_progress": "progress is the command line's (oasr transcribe --progress log)",
    "without_timestamps": "timestamp mode is chosen per window (long recordings need it)",
    "max_initial_timestamp": "fixed at Whisper's 1.0 s",
    "prepend_punctuations": "punctuation attaches to words by the word-timing pass's own rule",
    "append_punctuations": "punctuation attaches to words by the word-timing pass's own rule",
    "multilingual": "one language per recording (per-segment language not served)",
    "chunk_length": "the model's window is fixed by its checkpoint",
    "clip_timestamps": "not served: cut the audio, or give rows with offset/duration",
    "hallucination_silence_threshold": "not served (the no-speech guard and --vad serve)",
    "language_detection_threshold": "language is detected once per recording",
    "language_detection_segments": "language is detected on the first window",
}


def call_options(base: RunOptions, prompt: str | None, options: dict[str, Any]
                 ) -> tuple[Any, Any, VadOptions]:
    """(decode, fallback, vad) groups of ``base`` with one call's keywords applied."""
    refused = sorted(set(options) & set(REFUSED))
    if refused:
        name = refused[0]
        raise ValueError(f"transcribe({name}=...): {REFUSED[name]}")
    unknown = sorted(set(options) - set(TAKEN))
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)} for transcribe(); valid: "
                        f"{', '.join(TAKEN)}")
    options = dict(options)
    if prompt is not None:
        if options.get("initial_prompt") is not None:
            raise TypeError("give prompt or initial_prompt, not both (they are the same)")
        options["initial_prompt"] = prompt
    vad = _vad_options(base.vad, options.pop("vad_filter", None),
                       options.pop("vad_parameters", None))
    flat = {**dataclasses.asdict(base.decode), **dataclasses.asdict(base.fallback), **options}
    call = RunOptions.from_flat(**flat)
    return call.decode, call.fallback, vad


def _vad_options(base: VadOptions, vad_filter: bool | None, parameters: Any) -> VadOptions:
    if vad_filter is None and parameters is None:
        return base
    if vad_filter is None:
        backend = base.vad
    elif vad_filter:
        backend = base.vad if base.vad != "none" else "silero"  # faster-whisper's detector
    else:
        backend = "none"
    if parameters is not None and backend == "none":
        raise ValueError("vad_parameters without a speech detector do nothing: pass "
                         "vad_filter=True (or load the model with vad='silero')")
    vad = dataclasses.replace(base, vad=backend)
    if parameters is None:
        return vad
    if not isinstance(parameters, dict):  # faster-whisper's VadOptions dataclass
        parameters = {k: getattr(parameters, k) for k in VAD_PARAMETERS if hasattr(parameters, k)}
    unknown = sorted(set(parameters) - set(VAD_PARAMETERS))
    if unknown:
        raise TypeError(f"vad_parameters: unknown {', '.join(unknown)}; valid: "
                        f"{', '.join(VAD_PARAMETERS)}")
    values = {VAD_PARAMETERS[k]: v for k, v in parameters.items()}
    if values.get("vad_max_segment_s") == float("inf"):
        values.pop("vad_max_segment_s")  # faster-whisper's default: no limit beyond the window
    return dataclasses.replace(vad, **values)
