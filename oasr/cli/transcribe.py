"""``oasr transcribe``: offline batch transcription of manifests, files and folders."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
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
    batch_size: int | None = typer.Option(
        None, "--batch-size", "-b",
        help="Rows per encoder batch (default: 16 on CPU; on CUDA 64 with 16 GiB free, halved "
             "per halving of the free memory, at least 16)."),
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
    no_speech_threshold: float = typer.Option(
        0.6, help="Whisper's no-speech guard: a window whose <|nospeech|> probability is above "
                  "this and whose mean log-probability is below --log-prob-threshold is "
                  "silence (no text kept, not decoded again); 1 turns it off."),
    initial_prompt: str | None = typer.Option(
        None, "--initial-prompt",
        help="Text before the first window of every row (names, spelling, style), Whisper's "
             "<|startofprev|> prompt; a manifest's `prompt` column wins per row."),
    condition_on_previous_text: bool | None = typer.Option(
        None, "--condition-on-previous-text/--no-condition-on-previous-text",
        help="Long recordings: prompt each window with the tokens settled before it (reset "
             "after a window kept above temperature 0.5 or one that repeats itself). Default: "
             "on for Whisper (0.5-0.6 WER points better on the shared 9.5-min recording, "
             "docs/decoding.md), off for models that take no prompt."),
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
    gpus: str | None = typer.Option(
        None, help="all, a count N or ids 0,1: one worker process per GPU over --shard i/n, "
                   "one output file per shard plus <out>.shards.json (docs/scale.md)."),
    ray: str | None = typer.Option(
        None, "--ray",
        help="local (start a local Ray cluster), auto (join the running one) or a cluster "
             "address: read the Parquet manifests with Ray Data, transcribe on model actors, "
             "write a folder of Parquet parts to -o; reruns skip the ids there (oasr[ray], "
             "docs/scale.md)."),
    ray_actors: int | None = typer.Option(
        None, help="--ray: model actors (default: one per GPU of the cluster, else 1)."),
    ray_gpus: float | None = typer.Option(
        None, help="--ray: GPUs per actor (default: 1 when the cluster has GPUs, else 0)."),
    ray_cpus: float | None = typer.Option(
        None, help="--ray: CPUs per actor (default 1; fractional on a machine with few cores)."),
    limit: int | None = typer.Option(None, help="Transcribe at most this many rows."),
    retry_errors: bool = typer.Option(
        False, help="On resume, run the rows that ended with an error again."),
    overwrite: bool = typer.Option(
        False, "--overwrite",
        help="Start -o over: remove an earlier oasr output there (with its parts and sidecar) "
             "instead of resuming into it. A file oasr did not write is never replaced."),
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
    """Transcribe recordings into Parquet (or JSONL/TXT), resumably, one row per input row.

    Exit status: 0 done (error rows included, unless --fail-on-error); 1 --fail-on-error with
    error rows, or inputs holding no rows at all; 2 a bad flag, input or output (nothing
    decoded); 130 interrupted (Ctrl-C) and 143 terminated (SIGTERM), finished rows kept.
    """
    flags = SimpleNamespace(**locals())
    from rich.console import Console
    from rich.markup import escape

    from oasr.cli.decoding_flags import apply_beam_size, parse_temperatures, set_threads
    from oasr.cli.transcribe_checks import FlagError, check_flags
    from oasr.io import ManifestError, OutputError
    from oasr.io.format_choice import STDOUT, infer_format
    from oasr.transcribe.fallback import TemperatureFallback

    console = Console(stderr=True)
    if quiet:
        flags.progress = False
    if gpus is not None:
        _launch_workers(console, output, gpus, flags)
        return
    if ray is not None:
        from oasr.cli.transcribe_ray import run_ray

        run_ray(console, flags)
        return
    # This process's own transcribe hands pyarrow no pandas objects (Ray's driver, above, may):
    # answered before the first conversion, it saves the 0.5 s pandas import at start-up.
    from oasr.io.pandas_probe import answer_no_pandas

    answer_no_pandas()

    def fail(exc: Exception, code: int = 2) -> typer.Exit:
        # A KeyError's str() is its repr; the message is its argument.
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        # escaped: "pip install 'oasr[multilingual]'" is not rich markup
        console.print(f"[red]error:[/] {escape(str(text))}", soft_wrap=True, highlight=False)
        return typer.Exit(code)

    try:
        check_flags(device=device, dtype=dtype, batch_size=batch_size, limit=limit,
                    max_cue_chars=max_cue_chars, max_cue_seconds=max_cue_seconds,
                    cue_gap=cue_gap)
        shard_t = _parse_shard(shard)
        flags.fmt = fmt = infer_format(output, fmt)
        plan = _plan_output(inputs, output, fmt, shard_t, limit, id_column, audio_column,
                            text_column, max_cue_chars, max_cue_seconds, cue_gap,
                            decode_option, stdout=output == STDOUT)
        if output != STDOUT:
            from oasr.io.output_target import check_output_target

            check_output_target(plan.out_path, fmt, inputs=inputs)
        apply_beam_size(plan.overrides, beam_size)
        if not 0.0 <= no_speech_threshold <= 1.0:
            raise ValueError(f"--no-speech-threshold must be in [0, 1] (1: off), got "
                             f"{no_speech_threshold}")
        flags.fallback = TemperatureFallback(
            parse_temperatures(temperature), compression_ratio_threshold, log_prob_threshold,
            seed, no_speech_threshold=None if no_speech_threshold >= 1.0 else no_speech_threshold)
        set_threads(threads)
    except (FlagError, ManifestError, OutputError, ValueError) as exc:
        raise fail(exc) from None
    if plan.total == 0:
        if shard_t is not None:
            if not quiet:
                console.print(f"note: shard {shard} holds none of the rows; nothing to do")
            return
        raise fail(ManifestError(f"the inputs hold no rows ({', '.join(inputs)}); nothing to "
                                 "transcribe"), 1)

    from oasr.transcribe.heap import pin_mmap_threshold

    pin_mmap_threshold()  # before the model loads: a long run's heap must not creep
    if output == STDOUT:  # nothing on disk to lock or resume
        _run(console, fail, plan, flags, shard_t)
        return

    from oasr.io.lock import OutputLock, lock_path
    from oasr.io.output_format import RECORDING_FORMATS
    from oasr.io.subtitle_writer import is_single_file

    folder = fmt in RECORDING_FORMATS and not is_single_file(plan.out_path, fmt)
    try:  # one writer per output, and an unwritable output found before the model loads
        lock = OutputLock(lock_path(plan.out_path, folder=folder), plan.out_path).acquire()
    except OutputError as exc:
        raise fail(exc) from None
    try:
        if overwrite:  # under the lock: no other process writes it now
            from oasr.io.output_target import remove_previous_output

            try:
                remove_previous_output(plan.out_path, fmt)
            except OutputError as exc:
                raise fail(exc) from None
        _run(console, fail, plan, flags, shard_t)
    finally:
        lock.release()


def _launch_workers(console: Any, output: str, gpus: str, flags: Any) -> None:
    """--gpus: rerun this command line once per device (the workers are plain transcribes),
    with one progress bar and one summary over them."""
    import sys
    import time
    from types import SimpleNamespace

    from oasr.cli.transcribe_view import ProgressView, print_summary
    from oasr.transcribe.multi_gpu import launch, merge_done
    from oasr.transcribe.runner import RunStats

    argv = sys.argv[sys.argv.index("transcribe") + 1:] if "transcribe" in sys.argv else []
    if not argv:  # called in-process, not from a command line: nothing to hand the workers
        console.print("[red]error:[/] --gpus needs the `oasr transcribe` command line "
                      "(run it as a process)")
        raise typer.Exit(2)
    live, total = RunStats(), RunStats()  # live: from row events; total: the workers' own
    totals: dict[int, int] = {}
    view = ProgressView(console, None, enabled=flags.progress)
    start = time.perf_counter()

    def on_event(shard: int, event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind == "start":
            totals[shard] = event["total"]
            view.progress.update(view.task, total=sum(totals.values()))
        elif kind == "row":
            live.rows += 1
            live.errors += bool(event["error"])
            live.audio_s += event["audio_s"]
            live.wall_s = time.perf_counter() - start
            view.update(SimpleNamespace(id=f"{shard}:{event['id']}"), live)
        elif kind == "done":
            merge_done(total, event)

    try:
        with view:
            results = launch(argv, output, gpus, echo=console.print, on_event=on_event)
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}", soft_wrap=True, highlight=False)
        raise typer.Exit(2) from None
    total.wall_s = time.perf_counter() - start
    if not flags.quiet:
        from oasr.transcribe.multi_gpu import manifest_path

        print_summary(console, total, manifest_path(output))
    if any(r.returncode != 0 for r in results):
        raise typer.Exit(1)


class _OutputPlan:
    """What the flags resolve to before the model is loaded."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def _plan_output(inputs: list[str], output: str, fmt: str, shard_t: tuple[int, int] | None,
                 limit: int | None, id_column: str | None, audio_column: str | None,
                 text_column: str | None, max_cue_chars: int, max_cue_seconds: float,
                 cue_gap: float, decode_option: list[str], stdout: bool = False) -> Any:
    from oasr.engine.decode.options import parse_decode_option
    from oasr.io import (
        ColumnMap,
        CueOptions,
        check_output_rows,
        count_rows,
        passthrough_schema,
        resolve_output_path,
    )
    from oasr.io.format_choice import STDOUT

    columns = ColumnMap(id=id_column, audio=audio_column, text=text_column)
    out_path = Path(STDOUT) if stdout else resolve_output_path(output, inputs, fmt, shard_t)
    total = count_rows(inputs, columns, shard=shard_t, limit=limit)
    if not stdout:
        check_output_rows(out_path, fmt, total)
    return _OutputPlan(
        columns=columns, out_path=out_path, total=total, stdout=stdout,
        cue_options=CueOptions(max_chars=max_cue_chars, max_duration_s=max_cue_seconds,
                               min_gap_s=cue_gap),
        schema=passthrough_schema(inputs, columns),
        overrides=dict(parse_decode_option(o) for o in decode_option))


def _run(console: Any, fail: Any, plan: Any, flags: Any,
         shard_t: tuple[int, int] | None) -> None:
    from rich.markup import escape

    from oasr.cli.transcribe_view import ProgressView, print_summary
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import DecodingOptions
    from oasr.io import ManifestError, OutputError, open_writer
    from oasr.io.stdout_writer import StdoutWriter
    from oasr.transcribe.language_check import build_language_check
    from oasr.transcribe.runner import (
        TranscribeOptions,
        Transcriber,
        resolve_conditioning,
        transcribe,
    )
    from oasr.transcribe.signals import Terminated, terminate_as_interrupt

    out_path, language, task, fallback = plan.out_path, flags.language, flags.task, flags.fallback
    try:
        batch_size = flags.batch_size
        if batch_size is None:
            from oasr.transcribe.batch_size import default_batch_size

            batch_size = default_batch_size(EngineConfig(device=flags.device).resolve_device())
        config = EngineConfig(model=flags.model, device=flags.device, dtype=flags.dtype,
                              decode_method=flags.decode_method, decode_options=plan.overrides,
                              max_batch_size=batch_size)
        engine = ASREngine(config)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise fail(exc) from None

    segmenter = None
    if flags.vad != "none":
        from oasr.transcribe.vad_segments import VadTranscriber, build_recording_segmenter

        try:
            segmenter = build_recording_segmenter(flags.vad, device=str(engine.runner.device),
                                                  model_dir=flags.vad_model_dir)
        except (ValueError, KeyError) as exc:
            raise fail(ValueError(f"--vad {flags.vad}: {exc}")) from None

    word_timestamps = flags.word_timestamps
    if word_timestamps is None:
        word_timestamps = "offline" in engine.strategy.word_timing_modes
        if not word_timestamps and not flags.quiet:
            console.print(f"note: decode family {engine.decode_method!r} cannot time words in "
                          "this configuration; the words column stays empty")
    try:  # a run-wide option the model cannot honour fails here, not on every row
        engine.strategy.validate_options(DecodingOptions(language=language, task=task,
                                                         word_timestamps=word_timestamps))
        if flags.initial_prompt is not None:
            engine.strategy.validate_options(DecodingOptions(prompt=flags.initial_prompt))
        condition = resolve_conditioning(engine, flags.condition_on_previous_text)
        if max(fallback.temperatures) > 0:
            engine.strategy.validate_options(DecodingOptions(
                temperature=max(fallback.temperatures), seed=flags.seed))
    except ValueError as exc:
        raise fail(exc) from None
    check = (build_language_check(engine) if flags.language_check and not language else None)
    options = TranscribeOptions(inputs=list(flags.inputs), columns=plan.columns, shard=shard_t,
                                limit=flags.limit, language=language, task=task,
                                word_timestamps=word_timestamps, row_check=check,
                                fallback=fallback, initial_prompt=flags.initial_prompt,
                                condition_on_previous_text=condition)
    transcriber = (VadTranscriber(engine, options, segmenter) if segmenter is not None
                   else Transcriber(engine, options))
    metadata = run_metadata(engine, options, transcriber.window_s)
    metadata["vad"] = flags.vad
    try:
        if plan.stdout:
            writer = StdoutWriter(metadata=metadata)
        else:
            writer = open_writer(out_path, flags.fmt, metadata=metadata,
                                 retry_errors=flags.retry_errors,
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
    view = ProgressView(console, plan.total, enabled=flags.progress)
    if flags.progress:
        options.on_window = view.window
    from oasr.transcribe import multi_gpu

    events = multi_gpu.events_on()  # a --gpus worker: rows and figures go to the parent
    if events:
        multi_gpu.emit("start", total=plan.total)

    def on_row(out: Any, stats: Any) -> None:
        for warning in out.warnings:
            console.print(f"[yellow]warning:[/] {escape(warning)}")
        view.update(out, stats)
        if events:
            multi_gpu.emit("row", id=out.id, error=bool(out.error), audio_s=out.duration or 0.0)

    try:
        with terminate_as_interrupt(), view:
            stats = transcribe(engine, options, writer, on_row=on_row, transcriber=transcriber)
    except (ManifestError, OutputError) as exc:
        raise fail(exc) from None
    except KeyboardInterrupt as exc:
        how, code = (("terminated", 143) if isinstance(exc, Terminated)
                     else ("interrupted", 130))
        console.print(f"{how}: finished rows are kept; rerun the same command to resume "
                      f"into {out_path}", soft_wrap=True)
        raise typer.Exit(code) from None
    if events:
        multi_gpu.emit_done(stats, str(out_path))
    if not flags.quiet:
        print_summary(console, stats, Path(out_path))
    if flags.fail_on_error and stats.errors:
        raise typer.Exit(1)


# The metadata keys a resumed run compares with the run that started the output.
COMPARED_SETTINGS = ("model_sha256", "decode_method", "decode_options", "language", "task",
                     "word_timestamps", "vad", "initial_prompt", "condition_on_previous_text")


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
        "initial_prompt": options.initial_prompt or "",
        # resolved by the caller (runner.resolve_conditioning), not None
        "condition_on_previous_text": str(bool(options.condition_on_previous_text)).lower(),
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
