"""``oasr transcribe``: offline batch transcription of manifests, files and folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer


def _parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        i, n = (int(p) for p in text.split("/"))
    except ValueError:
        raise typer.BadParameter(f"--shard {text!r}: expected i/n, e.g. 0/4") from None
    if not 0 <= i < n:
        raise typer.BadParameter(f"--shard {text!r}: need 0 <= i < n")
    return i, n


def _decode_option_help(values: list[str] | None) -> list[str] | None:
    """``-d help``: print every family's options and stop (before -o is required)."""
    if values and "help" in values:
        from oasr.cli.decoding_flags import print_family_options

        print_family_options()
        raise typer.Exit(0)
    return values


def transcribe_command(
    inputs: list[str] = typer.Argument(
        ..., help="Parquet/Arrow/JSONL manifests, audio files, folders or globs."),
    output: str = typer.Option(
        ..., "--output", "-o",
        help="Output file (its extension picks the format), a folder (existing, or ending with "
             "'/') to write <input>.<ext> in, or '-' to stream JSONL rows to stdout."),
    model: str = typer.Option(
        "", "--model", "-m",
        help="A bundle, checkpoint folder, installed model package or Hub id "
             "(default: the packaged Whisper tiny.en)."),
    fmt: str | None = typer.Option(
        None, "--format", "-f",
        help="parquet, jsonl, txt (id<TAB>text, `oasr wer` reads it), or one file per recording "
             "in the -o folder (-o NAME.<ext>: one recording's file): srt/vtt subtitles from the "
             "word timings, json (whisper's: text, segments with words), tsv (start, end in ms, "
             "text). Default: from -o's extension, else parquet; a contradiction is an error."),
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
        help="k=v option of the decode family, typed from its options (e.g. beam_size=4); "
             "`-d help` lists every family's options with their defaults.",
        is_eager=True, callback=_decode_option_help),
    beam_size: int | None = typer.Option(
        None, "--beam-size", help="Beam width: the family's beam_size option (Whisper: 1, "
                                  "greedy, by default; beam search cannot time words)."),
    temperature: str = typer.Option(
        "0", "--temperature",
        help="Sampling temperature, or Whisper's fallback schedule as a comma list (faster-"
             "whisper's: 0,0.2,0.4,0.6,0.8,1.0): a window is decoded again at the next "
             "temperature when its compression ratio or average log-probability fails the "
             "thresholds. Sampling is seeded (--seed)."),
    compression_ratio_threshold: float = typer.Option(
        2.4, help="Fallback: re-decode a window whose text's zlib compression ratio is above."),
    log_prob_threshold: float = typer.Option(
        -1.0, help="Fallback: re-decode a window whose mean token log-probability is below."),
    seed: int = typer.Option(0, help="Seed of sampled decodes (temperature > 0): reruns match."),
    threads: int | None = typer.Option(
        None, "--threads", help="CPU threads for torch (torch.set_num_threads)."),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="Print only errors and warnings: no progress, notes or "
                                     "summary."),
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
    language_check: bool = typer.Option(
        True, "--language-check/--no-language-check",
        help="English-only models: warn per row when the audio looks like another language "
             "(low decoder confidence; language ID by whisper-base when oasr[multilingual] is "
             "installed)."),
    vad: str = typer.Option(
        "none", help="Speech detector: silero, fsmn or none. Long recordings are cut at pauses "
                     "and their chunks batched; rows without speech give empty text "
                     "(finish_reason no_speech)."),
    vad_model_dir: str | None = typer.Option(
        None, help="Folder with the detector's weights (default: its installed package)."),
) -> None:
    """Transcribe recordings into Parquet (or JSONL/TXT), resumably, one row per input row."""
    from rich.console import Console
    from rich.markup import escape

    from oasr.cli.decoding_flags import apply_beam_size, parse_temperatures, set_threads
    from oasr.cli.transcribe_view import ProgressView, print_summary
    from oasr.engine.config import EngineConfig
    from oasr.engine.decode.options import parse_decode_option
    from oasr.engine.engine import ASREngine
    from oasr.io import (
        ColumnMap,
        CueOptions,
        ManifestError,
        OutputError,
        check_output_rows,
        count_rows,
        open_writer,
        passthrough_schema,
        resolve_output_path,
    )
    from oasr.io.format_choice import STDOUT, infer_format
    from oasr.io.stdout_writer import StdoutWriter
    from oasr.transcribe.fallback import TemperatureFallback
    from oasr.transcribe.language_check import build_language_check
    from oasr.transcribe.runner import TranscribeOptions, transcribe

    console = Console(stderr=True)
    if quiet:
        progress = False
    shard_t = _parse_shard(shard)
    columns = ColumnMap(id=id_column, audio=audio_column, text=text_column)
    try:
        fmt = infer_format(output, fmt)
        out_path = (Path(STDOUT) if output == STDOUT
                    else resolve_output_path(output, inputs, fmt, shard_t))
        total = count_rows(inputs, columns, shard=shard_t, limit=limit)
        if output != STDOUT:
            check_output_rows(out_path, fmt, total)
        cue_options = CueOptions(max_chars=max_cue_chars, max_duration_s=max_cue_seconds,
                                 min_gap_s=cue_gap)
        schema = passthrough_schema(inputs, columns)
        overrides = dict(parse_decode_option(o) for o in decode_option)
        apply_beam_size(overrides, beam_size)
        fallback = TemperatureFallback(parse_temperatures(temperature),
                                       compression_ratio_threshold, log_prob_threshold, seed)
        set_threads(threads)
    except (ManifestError, OutputError, ValueError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None

    config = EngineConfig(model=model, device=device, dtype=dtype, decode_method=decode_method,
                          decode_options=overrides, max_batch_size=batch_size)
    try:
        engine = ASREngine(config)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None

    from oasr.engine.request import DecodingOptions

    transcriber = None
    if vad != "none":
        from oasr.transcribe.vad_segments import VadTranscriber, build_recording_segmenter

        try:
            segmenter = build_recording_segmenter(vad, device=str(engine.runner.device),
                                                  model_dir=vad_model_dir)
        except (ValueError, KeyError) as exc:
            console.print(f"[red]error:[/] --vad {vad}: {exc}")
            raise typer.Exit(2) from None

    if word_timestamps is None:
        word_timestamps = "offline" in engine.strategy.word_timing_modes
        if not word_timestamps and not quiet:
            console.print(f"note: decode family {engine.decode_method!r} cannot time words in "
                          "this configuration; the words column stays empty")
    try:  # a run-wide option the model cannot honour fails here, not on every row
        engine.strategy.validate_options(DecodingOptions(language=language, task=task,
                                                         word_timestamps=word_timestamps))
        if max(fallback.temperatures) > 0:
            engine.strategy.validate_options(DecodingOptions(
                temperature=max(fallback.temperatures), seed=seed))
    except ValueError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    loaded = engine.loaded
    metadata = {
        "oasr_version": _version(),
        "model": loaded.name or "default",
        "model_sha256": loaded.weights_sha256,
        "decode_method": engine.decode_method,
        "decode_options": json.dumps(overrides, sort_keys=True),
        "language": language or "",
        "task": task or "",
        "vad": vad,
    }
    if output == STDOUT:
        writer = StdoutWriter(metadata=metadata)
    else:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        writer = open_writer(out_path, fmt, metadata=metadata, retry_errors=retry_errors,
                             passthrough_schema=schema, cue_options=cue_options, rows=total)
    previous = writer.previous_metadata()
    if previous and previous.get("model_sha256") not in (None, metadata["model_sha256"]):
        console.print(f"[yellow]warning:[/] {out_path} was started with another model "
                      f"({previous.get('model')}); resuming adds rows decoded by this one")
    check = build_language_check(engine) if language_check and not language else None
    options = TranscribeOptions(inputs=list(inputs), columns=columns, shard=shard_t, limit=limit,
                                language=language, task=task,
                                word_timestamps=word_timestamps, row_check=check,
                                fallback=fallback)
    if vad != "none":
        transcriber = VadTranscriber(engine, options, segmenter)
    view = ProgressView(console, total, enabled=progress)
    if progress:
        options.on_window = view.window

    def on_row(out: Any, stats: Any) -> None:
        for warning in out.warnings:
            console.print(f"[yellow]warning:[/] {escape(warning)}")
        view.update(out, stats)

    try:
        with view:
            stats = transcribe(engine, options, writer, on_row=on_row,
                               transcriber=transcriber)
    except (ManifestError, OutputError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        console.print(f"interrupted: finished rows are kept; rerun the same command to resume "
                      f"into {out_path}")
        raise typer.Exit(130) from None
    if not quiet:
        print_summary(console, stats, Path(out_path))
    if fail_on_error and stats.errors:
        raise typer.Exit(1)


def _version() -> str:
    from oasr import __version__

    return __version__
