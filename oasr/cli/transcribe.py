"""``oasr transcribe``: offline batch transcription of manifests, files and folders."""

from __future__ import annotations

import json
from pathlib import Path

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
    vad: str = typer.Option(
        "none", help="Speech detector: silero, fsmn or none. Long recordings are cut at pauses "
                     "and their chunks batched; rows without speech give empty text "
                     "(finish_reason no_speech)."),
    vad_model_dir: str | None = typer.Option(
        None, help="Folder with the detector's weights (default: its installed package)."),
) -> None:
    """Transcribe recordings into Parquet (or JSONL/TXT), resumably, one row per input row."""
    from rich.console import Console

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
    from oasr.transcribe.runner import TranscribeOptions, transcribe

    console = Console(stderr=True)
    shard_t = _parse_shard(shard)
    columns = ColumnMap(id=id_column, audio=audio_column, text=text_column)
    try:
        out_path = resolve_output_path(output, inputs, fmt, shard_t)
        total = count_rows(inputs, columns, shard=shard_t, limit=limit)
        check_output_rows(out_path, fmt, total)
        cue_options = CueOptions(max_chars=max_cue_chars, max_duration_s=max_cue_seconds,
                                 min_gap_s=cue_gap)
        schema = passthrough_schema(inputs, columns)
        overrides = dict(parse_decode_option(o) for o in decode_option)
    except (ManifestError, OutputError, ValueError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None

    config = EngineConfig(model=model, device=device, dtype=dtype, decode_method=decode_method,
                          decode_options=overrides, max_batch_size=batch_size)
    try:
        engine = ASREngine(config)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        console.print(f"[red]error:[/] {exc}")
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
        if not word_timestamps:
            console.print(f"note: decode family {engine.decode_method!r} cannot time words in "
                          "this configuration; the words column stays empty")
    try:  # a run-wide option the model cannot honour fails here, not on every row
        engine.strategy.validate_options(DecodingOptions(language=language, task=task,
                                                         word_timestamps=word_timestamps))
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}")
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
    out_path.parent.mkdir(parents=True, exist_ok=True)
    writer = open_writer(out_path, fmt, metadata=metadata, retry_errors=retry_errors,
                         passthrough_schema=schema, cue_options=cue_options, rows=total)
    previous = writer.previous_metadata()
    if previous and previous.get("model_sha256") not in (None, metadata["model_sha256"]):
        console.print(f"[yellow]warning:[/] {out_path} was started with another model "
                      f"({previous.get('model')}); resuming adds rows decoded by this one")
    options = TranscribeOptions(inputs=list(inputs), columns=columns, shard=shard_t, limit=limit,
                                language=language, task=task,
                                word_timestamps=word_timestamps)
    if vad != "none":
        transcriber = VadTranscriber(engine, options, segmenter)
    view = ProgressView(console, total, enabled=progress)
    try:
        with view:
            stats = transcribe(engine, options, writer, on_row=view.update,
                               transcriber=transcriber)
    except (ManifestError, OutputError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        console.print(f"interrupted: finished rows are kept; rerun the same command to resume "
                      f"into {out_path}")
        raise typer.Exit(130) from None
    print_summary(console, stats, Path(out_path))
    if fail_on_error and stats.errors:
        raise typer.Exit(1)


def _version() -> str:
    from oasr import __version__

    return __version__
