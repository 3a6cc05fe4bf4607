"""``RunOptions``: everything a transcription run is set up from, one typed group per concern.

The command line (``oasr transcribe``, ``oasr stream``), the Python API (``oasr.load``), the
Ray actors and the ``--gpus`` workers all build one of these and hand it to
:class:`oasr.transcribe.session.TranscriptionSession`, so every entry point checks the same
values the same way and starts from the same defaults.

Each group's field names are the keyword names the API and Ray take and the CLI's parameter
names (``--beam-size`` is ``beam_size``); :func:`RunOptions.from_flat` maps a flat set of them
onto the groups, converting the CLI's spellings (``temperature="0,0.2"``, ``decode_options=
["beam_size=4"]``). ``tests/transcribe/test_options.py`` checks the CLI's defaults against the
fields here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

__all__ = ["CALL_OPTIONS", "SEARCH_OPTIONS", "CallKeywords", "DecodeOptions",
           "FallbackOptions", "ModelOptions", "OptionsError", "OutputOptions", "RunKeywords",
           "RunOptions", "VadOptions", "parse_temperatures"]

_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
_DTYPES = ("auto", "fp32", "float32", "fp16", "float16", "bf16", "bfloat16")
EMITTABLE = ("token_ids",)
COVERAGE_VADS = ("auto", "silero", "energy", "none")  # oasr.transcribe.coverage
CHECKPOINT_SUPPRESS = -1  # oasr.engine.request's stand-in for the checkpoint's suppress list
# DecodeOptions fields that are DecodingOptions fields of the same name on every window.
SEARCH_OPTIONS = ("best_of", "patience", "length_penalty", "repetition_penalty",
                  "no_repeat_ngram_size", "suppress_tokens", "suppress_blank", "prefix",
                  "hotwords", "hotwords_score")
CUDA_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cu126"


class OptionsError(ValueError):
    """An option value no run can use; the message names the option and the fix.

    ``str()`` names it as the API spells it (``batch_size 0: ...``), :meth:`for_cli` as the
    command line does (``--batch-size 0: ...``)."""

    def __init__(self, option: str, text: str) -> None:
        super().__init__(f"{option}{text}")
        self.option, self.text = option, text

    def for_cli(self) -> str:
        return f"--{self.option.replace('_', '-')}{self.text}"


@dataclass
class ModelOptions:
    """Which model, where, and how it batches."""

    model: str = ""  # a name from `oasr models`, a bundle/checkpoint, a package or Hub id
    device: str = "auto"  # auto, cpu, cuda, cuda:N
    dtype: str = "auto"  # auto: fp16 on CUDA, fp32 on CPU
    batch_size: int | None = None  # rows per encoder batch; None: from the device
    threads: int | None = None  # torch's CPU threads; None: the process's CPU budget
    quantization: str = "none"  # int8, int8-weight, fp8 or none (docs/quantization.md)
    compute_type: str | None = None  # faster-whisper's name (int8_float16...): an alias

    def validate(self) -> None:
        if not _DEVICE.match(self.device):
            hint = " (NVIDIA GPUs are 'cuda')" if self.device.lower() in ("gpu", "nvidia") else ""
            raise OptionsError("device", f" {self.device}: not a device this build runs on{hint}; "
                               "use auto, cpu, cuda or cuda:N")
        if self.dtype not in _DTYPES:
            raise OptionsError("dtype", f" {self.dtype}: use one of {', '.join(_DTYPES)}")
        if self.batch_size is not None and self.batch_size < 1:
            raise OptionsError("batch_size", f" {self.batch_size}: must be at least 1 (rows per "
                               "encoder batch); the default is 16 on CPU, from the free memory "
                               "on CUDA")
        if self.threads is not None and self.threads < 1:
            raise OptionsError("threads", f" must be >= 1, got {self.threads}")
        self.quantization_and_dtype()

    def quantization_and_dtype(self) -> tuple[str, str]:
        """The (method or ``none``, dtype) a run uses: ``compute_type`` spells both, and may
        not contradict an explicit ``quantization`` or ``dtype``."""
        from oasr.quantization.spec import parse_compute_type, parse_quantization, resolve_switches

        try:
            parse_quantization(self.quantization)
        except ValueError as e:
            raise OptionsError("quantization", f" {self.quantization}: {e}") from None
        if self.compute_type is not None:
            try:
                parse_compute_type(self.compute_type)
            except ValueError as e:
                raise OptionsError("compute_type", f" {self.compute_type}: {e}") from None
        explicit = None if self.quantization == "none" else self.quantization
        try:
            return resolve_switches(explicit, self.compute_type, self.dtype)
        except ValueError as e:
            raise OptionsError("compute_type", f" {self.compute_type}: {e}") from None

    def check_device(self) -> None:
        """CUDA asked for only where torch can reach a GPU (imports torch)."""
        if not self.device.startswith("cuda"):
            return
        import torch

        if not torch.cuda.is_available():
            build = ("this torch build has no CUDA" if torch.version.cuda is None
                     else "torch sees no CUDA GPU (check the driver: nvidia-smi)")
            raise OptionsError("device", f" {self.device}: {build}; use --device cpu, or on a "
                               "machine with an NVIDIA GPU install a CUDA build of torch "
                               f"({CUDA_TORCH})")
        index = int(self.device.split(":")[1]) if ":" in self.device else 0
        # Before CUDA is initialised torch counts devices through NVML, loaded and initialised
        # at every call (0.18 s of an H100 host's start-up); a first device needs no count.
        if index > 0 and index >= torch.cuda.device_count():
            count = torch.cuda.device_count()
            raise OptionsError("device", f" {self.device}: this machine has {count} CUDA "
                               f"device(s), cuda:0 to cuda:{count - 1}")


@dataclass
class DecodeOptions:
    """How the model's output becomes text: the decode family and its options, and the
    run-wide request options (language, task, prompts, word timings)."""

    decode_method: str | None = None  # None: the model's own family
    decode_options: dict[str, Any] = field(default_factory=dict)  # the family's, as -d k=v
    beam_size: int | None = None  # the family option beam_size (decode_options wins)
    # ctc_wfst's decoding graph: a .fst path or a graph's name in the bundle (-d graph wins).
    graph: str | None = None
    # Tokens a window may generate; None: scaled with the window's audio (generation_limits).
    max_new_tokens: int | None = None
    language: str | None = None
    task: str | None = None
    word_timestamps: bool | None = None  # None: on where the family can time words
    initial_prompt: str | None = None
    condition_on_previous_text: bool | None = None  # None: on where the model takes prompts
    # A window kept above this temperature does not prompt the next (faster-whisper's).
    prompt_reset_on_temperature: float = 0.5
    language_check: bool = True
    # The search options of every window, faster-whisper's names (``DecodingOptions`` holds
    # their semantics; docs/decoding.md): sampled candidates kept per window, beam patience
    # and length ranking (None: the family's), repetition rules, suppressed ids (-1: the
    # checkpoint's list; empty: none), the blank suppression on the first token.
    best_of: int = 1
    patience: float | None = None
    length_penalty: float | None = None
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    suppress_tokens: tuple[int, ...] = (CHECKPOINT_SUPPRESS,)
    suppress_blank: bool = True
    # Whisper: text forced as the first window's first tokens (the output includes it).
    prefix: str | None = None
    # Whisper: text in every window's prompt; CTC / transducer: comma-separated phrases boosted
    # in the beam, each matched token worth hotwords_score (None: the family's).
    hotwords: str | tuple[str, ...] | None = None
    hotwords_score: float | None = None

    def validate(self) -> None:
        if self.beam_size is not None and self.beam_size < 1:
            raise OptionsError("beam_size", f" must be >= 1, got {self.beam_size}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise OptionsError("max_new_tokens", f" must be >= 1, got {self.max_new_tokens}")
        if self.best_of < 1:
            raise OptionsError("best_of", f" {self.best_of}: must be >= 1 (sampled candidates "
                               "per window; 1 keeps the one drawn)")
        if self.patience is not None and not self.patience > 0:
            raise OptionsError("patience", f" {self.patience}: must be > 0 (1.0: stop at "
                               "beam_size finished hypotheses)")
        if self.repetition_penalty <= 0:
            raise OptionsError("repetition_penalty", f" {self.repetition_penalty}: must be > 0 "
                               "(1.0: off; above 1 discourages repeats)")
        if self.no_repeat_ngram_size < 0:
            raise OptionsError("no_repeat_ngram_size", f" {self.no_repeat_ngram_size}: must be "
                               ">= 0 (0: off)")
        bad = [t for t in self.suppress_tokens if t < CHECKPOINT_SUPPRESS]
        if bad:
            raise OptionsError("suppress_tokens", f" {bad[0]}: token ids are >= 0, and -1 "
                               "stands for the checkpoint's list (e.g. -1 or -1,50362)")
        if self.hotwords_score is not None:
            if self.hotwords_score < 0:
                raise OptionsError("hotwords_score", f" {self.hotwords_score}: must be >= 0")
            if not self.hotwords:
                raise OptionsError("hotwords_score", " boosts the hotwords, and none are "
                                   "given: add --hotwords (hotwords=...)")

        if self.graph is not None and self.decode_method != "ctc_wfst":
            raise OptionsError("graph", f" {self.graph}: a decoding graph is read by the "
                               "ctc_wfst decode family; add --decode-method ctc_wfst")

    def search_options(self) -> dict[str, Any]:
        """The ``DecodingOptions`` fields of the same name these options set (the runner puts
        ``prefix`` on a recording's first window only, as faster-whisper)."""
        return {name: getattr(self, name) for name in SEARCH_OPTIONS}

    def family_options(self) -> dict[str, Any]:
        """``decode_options`` with ``beam_size`` and ``graph`` filled in where it does not set
        them."""
        out = dict(self.decode_options)
        if self.beam_size is not None:
            out.setdefault("beam_size", str(self.beam_size))
        if self.graph is not None:
            out.setdefault("graph", self.graph)
        return out


@dataclass
class FallbackOptions:
    """Whisper's temperature fallback and no-speech guard (``oasr.transcribe.fallback``)."""

    temperature: tuple[float, ...] = (0.0,)
    compression_ratio_threshold: float = 2.4
    log_prob_threshold: float = -1.0
    no_speech_threshold: float = 0.6  # 1: off
    seed: int = 0

    def validate(self) -> None:
        if not self.temperature or any(t < 0 for t in self.temperature):
            given = ",".join(map(str, self.temperature)) or "(none)"
            raise OptionsError("temperature", f" {given}: temperatures must be >= 0, e.g. 0 "
                               "or 0,0.2,0.4,0.6,0.8,1.0")
        if not 0.0 <= self.no_speech_threshold <= 1.0:
            raise OptionsError("no_speech_threshold", f" must be in [0, 1] (1: off), got "
                               f"{self.no_speech_threshold}")

    def build(self) -> Any:
        from oasr.transcribe.fallback import TemperatureFallback

        off = self.no_speech_threshold >= 1.0
        return TemperatureFallback(tuple(self.temperature), self.compression_ratio_threshold,
                                   self.log_prob_threshold, self.seed,
                                   no_speech_threshold=None if off else self.no_speech_threshold)


@dataclass
class VadOptions:
    """The speech detector that pre-segments recordings (``--vad``) and how its probabilities
    become speech segments (None: the presegmenting defaults, ``vad_segments.PRESEGMENT``,
    and the detector's own threshold)."""

    vad: str = "none"  # silero, fsmn or none
    vad_model_dir: str | None = None  # default: the detector's installed package
    vad_threshold: float | None = None  # speech probability that opens a segment
    vad_neg_threshold: float | None = None  # ... and below which it closes
    vad_min_speech_ms: float | None = None  # shorter speech is dropped
    vad_min_silence_ms: float | None = None  # a shorter pause does not split a segment
    vad_speech_pad_ms: float | None = None  # kept on each side of a segment
    vad_max_segment_s: float | None = None  # longer speech is split (at most the model window)
    # What measures each row's coverage (speech seconds with words / speech seconds): auto
    # (the --vad detector, else silero where installed, else energy), silero, energy or none.
    coverage_vad: str = "auto"

    def validate(self) -> None:
        if self.coverage_vad not in COVERAGE_VADS:
            raise OptionsError("coverage_vad", f" {self.coverage_vad}: choose one of "
                               f"{', '.join(COVERAGE_VADS)}")
        if self.vad_threshold is not None and not 0.0 < self.vad_threshold < 1.0:
            raise OptionsError("vad_threshold", f" {self.vad_threshold}: must be in (0, 1)")
        if self.vad_neg_threshold is not None and not 0.0 <= self.vad_neg_threshold < 1.0:
            raise OptionsError("vad_neg_threshold",
                               f" {self.vad_neg_threshold}: must be in [0, 1)")
        for name in ("vad_min_speech_ms", "vad_min_silence_ms", "vad_speech_pad_ms"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise OptionsError(name, f" {value}: must be >= 0")
        if self.vad_max_segment_s is not None and not self.vad_max_segment_s > 0:
            raise OptionsError("vad_max_segment_s", f" {self.vad_max_segment_s}: must be > 0")

    def segmenter_overrides(self) -> dict[str, float]:
        """The ``SegmenterConfig`` fields these options set."""
        pairs = (("threshold", self.vad_threshold), ("neg_threshold", self.vad_neg_threshold),
                 ("min_speech_ms", self.vad_min_speech_ms),
                 ("min_silence_ms", self.vad_min_silence_ms),
                 ("speech_pad_ms", self.vad_speech_pad_ms),
                 ("max_segment_s", self.vad_max_segment_s))
        return {k: float(v) for k, v in pairs if v is not None}


@dataclass
class OutputOptions:
    """What each output row carries beyond the fixed columns."""

    emit: tuple[str, ...] = ()  # extra columns: token_ids

    def validate(self) -> None:
        unknown = [e for e in self.emit if e not in EMITTABLE]
        if unknown:
            raise OptionsError("emit", f" {', '.join(unknown)}: not a column this build can add; "
                               f"choose from {', '.join(EMITTABLE)}")


_GROUPS = {"model": ModelOptions, "decode": DecodeOptions, "fallback": FallbackOptions,
           "vad": VadOptions, "output": OutputOptions}


@dataclass
class RunOptions:
    """One run's options, by concern. ``validate()`` checks every value without loading
    anything; what only the loaded model can decide (a language an English-only model lacks)
    is checked by the session."""

    model: ModelOptions = field(default_factory=ModelOptions)
    decode: DecodeOptions = field(default_factory=DecodeOptions)
    fallback: FallbackOptions = field(default_factory=FallbackOptions)
    vad: VadOptions = field(default_factory=VadOptions)
    output: OutputOptions = field(default_factory=OutputOptions)

    def validate(self) -> RunOptions:
        for group in (self.model, self.decode, self.fallback, self.vad, self.output):
            group.validate()
        return self

    @staticmethod
    def flat_names() -> dict[str, str]:
        """Every flat option name -> its group."""
        return {f.name: group for group, cls in _GROUPS.items()
                for f in dataclasses.fields(cls)}

    @classmethod
    def from_flat(cls, **values: Any) -> RunOptions:
        """Options from flat keywords (``beam_size=5, vad="silero", temperature="0,0.2"``);
        an unknown name raises listing the valid ones."""
        names = cls.flat_names()
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise TypeError(f"unknown option(s) {', '.join(unknown)}; valid: "
                            f"{', '.join(sorted(names))}")
        by_group: dict[str, dict[str, Any]] = {g: {} for g in _GROUPS}
        for name, value in values.items():
            by_group[names[name]][name] = _normalise(name, value)
        return cls(**{g: _GROUPS[g](**kw) for g, kw in by_group.items()})

    def flat(self) -> dict[str, Any]:
        """The inverse of :meth:`from_flat`."""
        out: dict[str, Any] = {}
        for group in _GROUPS:
            out.update(dataclasses.asdict(getattr(self, group)))
        return out


def parse_temperatures(text: str) -> tuple[float, ...]:
    """``"0"`` -> (0.0,); ``"0,0.2,0.4"`` -> the fallback schedule."""
    try:
        temps = tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise OptionsError("temperature", f" {text!r}: expected a number or a comma list such as "
                           "0,0.2,0.4,0.6,0.8,1.0") from None
    if not temps or any(t < 0 for t in temps):
        raise OptionsError("temperature", f" {text!r}: temperatures must be >= 0")
    return temps


def _normalise(name: str, value: Any) -> Any:
    """The CLI's and the API's spellings of a value as the field holds it."""
    if name == "temperature":
        if isinstance(value, str):
            return parse_temperatures(value)
        if isinstance(value, (int, float)):
            return (float(value),)
        return tuple(float(t) for t in value)
    if name == "decode_options":
        if isinstance(value, Mapping):
            return dict(value)
        from oasr.engine.decode.options import parse_decode_option

        return dict(parse_decode_option(str(v)) for v in value or ())
    if name == "suppress_tokens":
        return _suppress_tokens(value)
    if name == "hotwords" and isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    if name == "emit":  # "a,b", ["a", "b"] or the CLI's repeated ["a,b", "c"]; once each
        items = [value] if isinstance(value, str) else list(value or ())
        names = (p.strip() for v in items for p in str(v).split(","))
        return tuple(dict.fromkeys(n for n in names if n))
    return value


def _suppress_tokens(value: Any) -> tuple[int, ...]:
    """``"-1,50362"`` (the CLI's), a list of ids, or None / empty (nothing suppressed)."""
    if value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    items = value.split(",") if isinstance(value, str) else list(value)
    try:
        return tuple(int(str(v).strip()) for v in items if str(v).strip())
    except ValueError:
        raise OptionsError("suppress_tokens", f" {value!r}: expected token ids, comma-separated "
                           "(-1: the checkpoint's list; empty: suppress nothing)") from None


class CallKeywords(TypedDict, total=False):
    """The request options the API takes per call (``Model.transcribe(audio, **these)``)."""

    language: str | None
    task: str | None
    word_timestamps: bool | None
    initial_prompt: str | None
    condition_on_previous_text: bool | None
    prompt_reset_on_temperature: float
    language_check: bool
    max_new_tokens: int | None
    best_of: int
    patience: float | None
    length_penalty: float | None
    repetition_penalty: float
    no_repeat_ngram_size: int
    suppress_tokens: int | str | list[int] | tuple[int, ...] | None
    suppress_blank: bool
    prefix: str | None
    hotwords: str | list[str] | tuple[str, ...] | None
    hotwords_score: float | None
    temperature: float | tuple[float, ...] | list[float]
    compression_ratio_threshold: float
    log_prob_threshold: float
    no_speech_threshold: float
    seed: int


class RunKeywords(CallKeywords, total=False):
    """Every run option as a keyword (``oasr.load(model, **these)``, the Ray actors)."""

    device: str
    dtype: str
    batch_size: int | None
    threads: int | None
    quantization: str
    compute_type: str | None
    decode_method: str | None
    decode_options: dict[str, Any] | None
    beam_size: int | None
    graph: str | None
    vad: str
    vad_model_dir: str | None
    vad_threshold: float | None
    vad_neg_threshold: float | None
    vad_min_speech_ms: float | None
    vad_min_silence_ms: float | None
    vad_speech_pad_ms: float | None
    vad_max_segment_s: float | None
    coverage_vad: str
    emit: tuple[str, ...] | list[str]


CALL_OPTIONS: tuple[str, ...] = tuple(CallKeywords.__annotations__)

