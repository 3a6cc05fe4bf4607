"""``oasr transcribe``: offline batch transcription of manifests, files and folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer


def _parse_shard(text: str | None) -> tuple[int, int] | None:
    from oasr.cli.transcribe_checks import FlagError

    if text is None:
        return None
    try:
        i, n = (int(p) for p in text.split("/"))
    except ValueError:
        raise FlagError(f"--shard {text}: expected i/n, e.g. 0/4 (the first of four)") from None
    if not 0 <= i < n:
        raise FlagError(f"--shard {text}: need 0 <= i < n, e.g. 0/{max(n, 2)} to "
                        f"{max(n, 2) - 1}/{max(n, 2)}")
    return i, n


def transcribe_command(
    inputs: list[str] = typer.Argument(
        ..., help="Parquet/Arrow/JSONL manifests, audio files, folders or globs."),
    output: str = typer.Option(
        ..., "--output", "-o",
        help="Output file, or a folder (existing, or ending with '/') to write <input>.<ext> in."),
    model: str = typer.Option(
        "", "--model", "-m",
        help="A bundle, checkpoint folder, installed model package or Hub id "
             "(default: the packaged Whisper tiny.en)."),
    fmt: str = typer.Option(
        "parquet", "--format", "-f",
        help="parquet, jsonl, txt, or srt/vtt: subtitles from the word timings, one file per "
             "recording in the -o folder (-o NAME.srt/.vtt: one recording's file)."),
    max_cue_chars: int = typer.Option(
        42, help="srt/vtt: characters per subtitle line (two lines a cue)."),
    max_cue_seconds: float = typer.Option(7.0, help="srt/vtt: longest cue, in seconds."),
    cue_gap: float = typer.Option(
        0.6, help="srt/vtt: a pause at least this long (seconds) starts a new cue."),
    device: str = typer.Option("auto", help="auto, cpu, cuda or cuda:N."),
    dtype: str = typer.Option("auto", help="auto (fp16 on CUDA, fp32 on CPU), fp32, fp16, bf16."),
    batch_size: int = typer.Option(16, "--batch-size", "-b", help="Rows per encoder batch."),
    decode_method: str | None = typer.Option(
        None, help="Decode family (default: the model's own, e.g. aed for Whisper)."),
    decode_option: list[str] = typer.Option(
        [], "--decode-option", "-d",
        help="k=v option of the decode family, typed from its options (e.g. beam_size=4)."),
    language: str | None = typer.Option(
        None, help="Language code for every row without a language column (Whisper: detected "
                   "on multilingual models when unset)."),
    task: str | None = typer.Option(None, help="transcribe or translate (multilingual Whisper)."),
    word_timestamps: bool | None = typer.Option(
        None, "--word-timestamps/--no-word-timestamps",
        help="Per-word start/end/confidence in the `words` column (default: on when the decode "
             "family can time words in this configuration, e.g. not under beam search)."),
    id_column: str | None = typer.Option(None, help="Manifest column holding the row id."),
    audio_column: str | None = typer.Option(None, help="Manifest column holding the audio."),
    text_column: str | None = typer.Option(
        None, help="Manifest column holding a reference transcript (enables WER)."),
    shard: str | None = typer.Option(
        None, help="i/n: this process's deterministic share of the rows (one process per GPU)."),
    limit: int | None = typer.Option(None, help="Transcribe at most this many rows."),
    retry_errors: bool = typer.Option(
        False, help="On resume, run the rows that ended with an error again."),
    fail_on_error: bool = typer.Option(
        False, help="Exit 1 when any row ended with an error (the output is still written)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Transcribe recordings into Parquet (or JSONL/TXT), resumably, one row per input row.

    Exit status: 0 done (error rows included, unless --fail-on-error); 1 --fail-on-error with
    error rows, or inputs holding no rows at all; 2 a bad flag, input or output (nothing
    decoded); 130 interrupted (Ctrl-C) and 143 terminated (SIGTERM), finished rows kept.
    """
    from rich.console import Console

    from oasr.cli.transcribe_checks import FlagError, check_flags
    from oasr.io import ManifestError, OutputError

    console = Console(stderr=True)

    def fail(exc: Exception, code: int = 2) -> typer.Exit:
        # A KeyError's str() is its repr; the message is its argument.
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        console.print(f"[red]error:[/] {text}", soft_wrap=True, highlight=False)
        return typer.Exit(code)

    try:
        check_flags(device=device, dtype=dtype, batch_size=batch_size, limit=limit,
                    max_cue_chars=max_cue_chars, max_cue_seconds=max_cue_seconds,
                    cue_gap=cue_gap)
        shard_t = _parse_shard(shard)
        plan = _plan_output(inputs, output, fmt, shard_t, limit, id_column, audio_column,
                            text_column, max_cue_chars, max_cue_seconds, cue_gap,
                            decode_option)
    except (FlagError, ManifestError, OutputError, ValueError) as exc:
        raise fail(exc) from None
    if plan.total == 0:
        if shard_t is not None:
            console.print(f"note: shard {shard} holds none of the rows; nothing to do")
            return
        raise fail(ManifestError(f"the inputs hold no rows ({', '.join(inputs)}); nothing to "
                                 "transcribe"), 1)

    from oasr.io.lock import OutputLock, lock_path
    from oasr.transcribe.heap import pin_mmap_threshold

    pin_mmap_threshold()  # before the model loads: a long run's heap must not creep
    from oasr.io.output_format import SUBTITLE_FORMATS
    from oasr.io.subtitle_writer import is_single_file

    folder = fmt in SUBTITLE_FORMATS and not is_single_file(plan.out_path, fmt)
    try:  # one writer per output, and an unwritable output found before the model loads
        lock = OutputLock(lock_path(plan.out_path, folder=folder), plan.out_path).acquire()
    except OutputError as exc:
        raise fail(exc) from None
    try:
        _run(console, fail, plan, inputs=inputs, model=model, device=device, dtype=dtype,
             batch_size=batch_size, decode_method=decode_method, language=language, task=task,
             word_timestamps=word_timestamps, shard_t=shard_t, limit=limit,
             retry_errors=retry_errors, fail_on_error=fail_on_error, progress=progress, fmt=fmt)
    finally:
        lock.release()


class _OutputPlan:
    """What the flags resolve to before the model is loaded."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def _plan_output(inputs: list[str], output: str, fmt: str, shard_t: tuple[int, int] | None,
                 limit: int | None, id_column: str | None, audio_column: str | None,
                 text_column: str | None, max_cue_chars: int, max_cue_seconds: float,
                 cue_gap: float, decode_option: list[str]) -> Any:
    from oasr.engine.decode.options import parse_decode_option
    from oasr.io import (
        ColumnMap,
        CueOptions,
        check_output_rows,
        count_rows,
        passthrough_schema,
        resolve_output_path,
    )

    columns = ColumnMap(id=id_column, audio=audio_column, text=text_column)
    out_path = resolve_output_path(output, inputs, fmt, shard_t)
    total = count_rows(inputs, columns, shard=shard_t, limit=limit)
    check_output_rows(out_path, fmt, total)
    return _OutputPlan(
        columns=columns, out_path=out_path, total=total,
        cue_options=CueOptions(max_chars=max_cue_chars, max_duration_s=max_cue_seconds,
                               min_gap_s=cue_gap),
        schema=passthrough_schema(inputs, columns),
        overrides=dict(parse_decode_option(o) for o in decode_option))


def _run(console: Any, fail: Any, plan: Any, *, inputs: list[str], model: str, device: str,
         dtype: str, batch_size: int, decode_method: str | None, language: str | None,
         task: str | None, word_timestamps: bool | None, shard_t: tuple[int, int] | None,
         limit: int | None, retry_errors: bool, fail_on_error: bool, progress: bool,
         fmt: str) -> None:
    from oasr.cli.transcribe_view import ProgressView, print_summary
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import DecodingOptions
    from oasr.io import ManifestError, OutputError, open_writer
    from oasr.transcribe.runner import TranscribeOptions, Transcriber, transcribe
    from oasr.transcribe.signals import Terminated, terminate_as_interrupt

    out_path = plan.out_path
    config = EngineConfig(model=model, device=device, dtype=dtype, decode_method=decode_method,
                          decode_options=plan.overrides, max_batch_size=batch_size)
    try:
        engine = ASREngine(config)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise fail(exc) from None

    if word_timestamps is None:
        word_timestamps = "offline" in engine.strategy.word_timing_modes
        if not word_timestamps:
            console.print(f"note: decode family {engine.decode_method!r} cannot time words in "
                          "this configuration; the words column stays empty")
    try:  # a run-wide option the model cannot honour fails here, not on every row
        engine.strategy.validate_options(DecodingOptions(language=language, task=task,
                                                         word_timestamps=word_timestamps))
    except ValueError as exc:
        raise fail(exc) from None
    options = TranscribeOptions(inputs=list(inputs), columns=plan.columns, shard=shard_t,
                                limit=limit, language=language, task=task,
                                word_timestamps=word_timestamps)
    metadata = run_metadata(engine, options, Transcriber(engine, options).window_s)
    try:
        writer = open_writer(out_path, fmt, metadata=metadata, retry_errors=retry_errors,
                             passthrough_schema=plan.schema, cue_options=plan.cue_options,
                             rows=plan.total)
        previous = writer.previous_metadata()
    except OutputError as exc:
        raise fail(exc) from None
    changed = changed_settings(previous, metadata)
    if changed:
        console.print(f"[yellow]warning:[/] {out_path} was started with other settings "
                      f"({'; '.join(changed)}); resuming adds rows decoded with these",
                      soft_wrap=True, highlight=False)
    view = ProgressView(console, plan.total, enabled=progress)
    try:
        with terminate_as_interrupt(), view:
            stats = transcribe(engine, options, writer, on_row=view.update)
    except (ManifestError, OutputError) as exc:
        raise fail(exc) from None
    except KeyboardInterrupt as exc:
        how, code = (("terminated", 143) if isinstance(exc, Terminated)
                     else ("interrupted", 130))
        console.print(f"{how}: finished rows are kept; rerun the same command to resume "
                      f"into {out_path}", soft_wrap=True)
        raise typer.Exit(code) from None
    print_summary(console, stats, Path(out_path))
    if fail_on_error and stats.errors:
        raise typer.Exit(1)


# The metadata keys a resumed run compares with the run that started the output.
COMPARED_SETTINGS = ("model_sha256", "decode_method", "decode_options", "language", "task",
                     "word_timestamps")


def run_metadata(engine: Any, options: Any, window_s: float) -> dict[str, str]:
    """What the output records of the run that wrote it: the resolved settings (the decode
    family's full options with defaults filled in, not the raw ``-d`` strings)."""
    import dataclasses

    loaded = engine.loaded
    family = engine.strategy.options
    resolved = (dataclasses.asdict(family) if dataclasses.is_dataclass(family)
                else dict(engine.config.decode_options))
    return {
        "oasr_version": _version(),
        "model": loaded.name or "default",
        "model_sha256": loaded.weights_sha256,
        "decode_method": engine.decode_method,
        "decode_options": json.dumps(resolved, sort_keys=True, default=str),
        "language": options.language or "",
        "task": options.task or "",
        "word_timestamps": str(bool(options.word_timestamps)).lower(),
        "window_s": f"{window_s:g}",
    }


def changed_settings(previous: dict[str, str] | None, current: dict[str, str]) -> list[str]:
    """``key: before -> now`` for each compared setting an earlier run recorded otherwise."""
    if not previous:
        return []
    changed = []
    for key in COMPARED_SETTINGS:
        before = previous.get(key)
        if before is not None and before != current.get(key):
            if key == "model_sha256":
                changed.append(f"model {previous.get('model')} -> {current.get('model')}")
            else:
                changed.append(f"{key} {before or '(unset)'} -> {current.get(key) or '(unset)'}")
    return changed


def _version() -> str:
    from oasr import __version__

    return __version__
