"""``oasr transcribe``: offline batch transcription of manifests, files and folders.

The command's parameters split in two: the run options (:class:`RunOptions`, shared with the
API and the Ray actors, set up by :class:`~oasr.transcribe.session.TranscriptionSession`) and
what only a command line has (:class:`CliRun`: inputs, output file, reporting, spreading).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from oasr.cli.quantization_flags import COMPUTE_TYPE, QUANTIZATION
from oasr.transcribe.options import OptionsError, RunOptions


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
    ctx: typer.Context,
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
        42, "--max-line-width", "--max-cue-chars",
        help="srt/vtt: characters per subtitle line (whisper's --max_line_width)."),
    max_line_count: int = typer.Option(
        2, "--max-line-count", help="srt/vtt: lines per cue (whisper's --max_line_count)."),
    max_cue_seconds: float = typer.Option(7.0, help="srt/vtt: longest cue, in seconds."),
    min_cue_seconds: float = typer.Option(
        0.8, help="srt/vtt: a shorter cue is lengthened into the pauses beside it (never over "
                  "a neighbour)."),
    cue_gap: float = typer.Option(
        0.6, help="srt/vtt: a pause at least this long (seconds) starts a new cue."),
    highlight_words: bool = typer.Option(
        False, "--highlight-words",
        help="srt/vtt: show each cue once per word, the word spoken underlined (whisper's "
             "--highlight_words)."),
    device: str = typer.Option("auto", help="auto, cpu, cuda or cuda:N."),
    dtype: str = typer.Option("auto", help="auto (fp16 on CUDA, fp32 on CPU), fp32, fp16, bf16."),
    quantization: str = QUANTIZATION,
    compute_type: str | None = COMPUTE_TYPE,
    batch_size: int | None = typer.Option(
        None, "--batch-size", "-b",
        help="Rows per encoder batch (default: 16 on CPU; on CUDA 64 with 16 GiB free, halved "
             "per halving of the free memory, at least 16)."),
    decode_method: str | None = typer.Option(
        None, help="Decode family (default: the model's own, e.g. aed for Whisper)."),
    decode_options: list[str] = typer.Option(
        [], "--decode-option", "-d",
        help="k=v option of the decode family, typed from its options (e.g. beam_size=4); "
             "`-d help` lists every family's options with their defaults.",
        is_eager=True, callback=_decode_option_help),
    beam_size: int | None = typer.Option(
        None, "--beam-size", help="Beam width: the family's beam_size option (Whisper: 1, "
                                  "greedy, by default)."),
    graph: str | None = typer.Option(
        None, "--graph",
        help="ctc_wfst's decoding graph: a .fst (TLG, Kaldi HCLG) or the name of a graph in "
             "the model's bundle ('oasr graph build' makes one); needs --decode-method "
             "ctc_wfst."),
    max_new_tokens: int | None = typer.Option(
        None, "--max-new-tokens",
        help="Tokens a window may generate (autoregressive families; the model's own limit "
             "still applies). Default: scaled with the window's audio, 12 a second."),
    best_of: int = typer.Option(
        1, "--best-of",
        help="Sampling (temperature > 0): decode this many candidates per window and keep the "
             "best by length-normalised log-probability (faster-whisper's default is 5)."),
    patience: float | None = typer.Option(
        None, "--patience",
        help="Beam search: a window ends once beam_size x patience hypotheses finished "
             "(default 1.0)."),
    length_penalty: float | None = typer.Option(
        None, "--length-penalty",
        help="Beam and --best-of ranking: sum log p / length ** this (default: the decode "
             "family's, 1.0)."),
    repetition_penalty: float = typer.Option(
        1.0, "--repetition-penalty",
        help="Divide a positive logit (multiply a negative one) of a token already in the "
             "window's transcript by this; 1 is off."),
    no_repeat_ngram_size: int = typer.Option(
        0, "--no-repeat-ngram-size",
        help="Never repeat an n-gram of this many tokens within a window's transcript; 0 is "
             "off."),
    suppress_tokens: str = typer.Option(
        "-1", "--suppress-tokens",
        help="Token ids never generated, comma-separated; -1 is the model's own list, '' "
             "suppresses nothing."),
    suppress_blank: bool = typer.Option(
        True, "--suppress-blank/--no-suppress-blank",
        help="Whisper: no blank or end of text as a window's first token."),
    prefix: str | None = typer.Option(
        None, "--prefix",
        help="Whisper: text forced as the start of each recording's transcript (first window "
             "only; the output includes it)."),
    hotwords: str | None = typer.Option(
        None, "--hotwords",
        help="Words to favour. Whisper: text put in each window's prompt (not the window a "
             "--prefix opens); CTC and transducer families: comma-separated phrases boosted "
             "in the beam search."),
    hotwords_score: float | None = typer.Option(
        None, "--hotwords-score",
        help="CTC and transducer: bonus per matched hotword token (default: the family's "
             "hotwords_score, 1.5)."),
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
    prompt_reset_on_temperature: float = typer.Option(
        0.5, help="With --condition-on-previous-text: a window kept above this temperature "
                  "does not prompt the next."),
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
             "family can time words in this configuration)."),
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
    progress: str = typer.Option(
        "auto", "--progress",
        help="auto (a bar on a terminal, else log lines), bar, log (a line every 30 s on "
             "stderr: rows, audio, RTFx, ETA) or none."),
    no_progress: bool = typer.Option(False, "--no-progress", help="The same as --progress none."),
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
    vad_threshold: float | None = typer.Option(
        None, help="--vad: speech probability that opens a segment (default: the detector's, "
                   "0.5 for silero)."),
    vad_neg_threshold: float | None = typer.Option(
        None, help="--vad: probability below which speech ends (default: threshold - 0.15)."),
    vad_min_speech_ms: float | None = typer.Option(
        None, help="--vad: shorter speech is dropped (default 250)."),
    vad_min_silence_ms: float | None = typer.Option(
        None, help="--vad: a shorter pause does not split speech (default 160)."),
    vad_speech_pad_ms: float | None = typer.Option(
        None, help="--vad: audio kept on each side of a speech segment (default 400)."),
    vad_max_segment_s: float | None = typer.Option(
        None, help="--vad: longer speech is split (default and most: the model's window)."),
    coverage_vad: str = typer.Option(
        "auto", help="What measures each row's coverage (detected speech seconds with "
                     "transcribed words / detected speech seconds; uncovered stretches are "
                     "decoded again): auto (the --vad detector, else silero where installed, "
                     "else energy), silero, energy or none (no check)."),
    emit: list[str] = typer.Option(
        [], "--emit",
        help="Add an output column, repeated or comma-separated: token_ids (the decoded token "
             "ids, list<int32>; null on error rows, [] on rows without speech). Parquet, jsonl "
             "and json carry it; txt, tsv, srt and vtt refuse it. A resume must pass the same "
             "--emit."),
) -> None:
    """Transcribe recordings into Parquet (or JSONL/TXT), resumably, one row per input row.

    Exit status: 0 done (error rows included, unless --fail-on-error); 1 --fail-on-error with
    error rows, or inputs holding no rows at all; 2 a bad flag, input or output (nothing
    decoded); 130 interrupted (Ctrl-C) and 143 terminated (SIGTERM), finished rows kept.
    """
    run_cli(ctx.params)


@dataclass
class CliRun:
    """What the command line adds to :class:`RunOptions`: where rows come from and go, how
    the run reports, and how it is spread (``--gpus``, ``--ray``). Field names are the
    command's parameter names."""

    inputs: list[str]
    output: str
    fmt: str | None = None
    max_cue_chars: int = 42
    max_line_count: int = 2
    max_cue_seconds: float = 7.0
    min_cue_seconds: float = 0.8
    cue_gap: float = 0.6
    highlight_words: bool = False
    id_column: str | None = None
    audio_column: str | None = None
    text_column: str | None = None
    shard: str | None = None
    limit: int | None = None
    retry_errors: bool = False
    overwrite: bool = False
    fail_on_error: bool = False
    progress: str = "auto"
    no_progress: bool = False
    quiet: bool = False
    gpus: str | None = None
    ray: str | None = None
    ray_actors: int | None = None
    ray_gpus: float | None = None
    ray_cpus: float | None = None

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> CliRun:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in params.items() if k in names})

    @property
    def columns(self) -> Any:
        from oasr.io import ColumnMap

        return ColumnMap(id=self.id_column, audio=self.audio_column, text=self.text_column)


def run_options(params: dict[str, Any]) -> RunOptions:
    """The command's parameters that are run options, as :class:`RunOptions`."""
    names = RunOptions.flat_names()
    return RunOptions.from_flat(**{k: v for k, v in params.items() if k in names})


def run_cli(params: dict[str, Any]) -> None:
    """``oasr transcribe`` from its parsed parameters (``ctx.params``)."""
    from rich.console import Console
    from rich.markup import escape

    from oasr.cli.transcribe_checks import FlagError, check_flags
    from oasr.cli.transcribe_view import progress_mode
    from oasr.io import ManifestError, OutputError
    from oasr.io.format_choice import STDOUT, infer_format
    from oasr.io.output_format import check_emit

    console = Console(stderr=True)
    cli = CliRun.from_params(params)
    if cli.quiet or cli.no_progress:
        cli.progress = "none"

    def fail(exc: Exception, code: int = 2) -> typer.Exit:
        # A KeyError's str() is its repr; the message is its argument.
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        if isinstance(exc, OptionsError):
            text = exc.for_cli()
        # escaped: "pip install 'oasr[multilingual]'" is not rich markup
        console.print(f"[red]error:[/] {escape(str(text))}", soft_wrap=True, highlight=False)
        return typer.Exit(code)

    try:
        run = run_options(params).validate()
        cli.progress = progress_mode(cli.progress, console)
    except (OptionsError, ValueError) as exc:
        raise fail(exc) from None
    if cli.gpus is not None:
        _launch_workers(console, cli)
        return
    if cli.ray is not None:
        from oasr.cli.transcribe_ray import run_ray

        run_ray(console, cli, run)
        return
    # This process's own transcribe hands pyarrow no pandas objects (Ray's driver, above, may):
    # answered before the first conversion, it saves the 0.5 s pandas import at start-up.
    from oasr.io.pandas_probe import answer_no_pandas

    answer_no_pandas()
    try:
        check_flags(limit=cli.limit, max_cue_chars=cli.max_cue_chars,
                    max_cue_seconds=cli.max_cue_seconds, cue_gap=cli.cue_gap)
        run.model.check_device()
        shard = _parse_shard(cli.shard)
        cli.fmt = infer_format(cli.output, cli.fmt)
        check_emit(cli.fmt, run.output.emit)
        plan = _plan_output(cli, shard, stdout=cli.output == STDOUT, emit=run.output.emit)
        if cli.output != STDOUT:
            from oasr.io.output_target import check_output_target

            check_output_target(plan.out_path, cli.fmt, inputs=cli.inputs)
    except (FlagError, ManifestError, OutputError, ValueError) as exc:
        raise fail(exc) from None
    if plan.total == 0:
        if shard is not None:
            if not cli.quiet:
                console.print(f"note: shard {cli.shard} holds none of the rows; nothing to do")
            return
        raise fail(ManifestError(f"the inputs hold no rows ({', '.join(cli.inputs)}); nothing "
                                 "to transcribe"), 1)

    from oasr.transcribe.heap import pin_mmap_threshold

    pin_mmap_threshold()  # before the model loads: a long run's heap must not creep
    if plan.stdout:  # nothing on disk to lock or resume
        _run(console, fail, plan, cli, run)
        return

    from oasr.io.lock import OutputLock, lock_path
    from oasr.io.output_format import RECORDING_FORMATS
    from oasr.io.subtitle_writer import is_single_file

    folder = cli.fmt in RECORDING_FORMATS and not is_single_file(plan.out_path, cli.fmt)
    try:  # one writer per output, and an unwritable output found before the model loads
        lock = OutputLock(lock_path(plan.out_path, folder=folder), plan.out_path).acquire()
    except OutputError as exc:
        raise fail(exc) from None
    try:
        if cli.overwrite:  # under the lock: no other process writes it now
            from oasr.io.output_target import remove_previous_output

            try:
                remove_previous_output(plan.out_path, cli.fmt)
            except OutputError as exc:
                raise fail(exc) from None
        _run(console, fail, plan, cli, run)
    finally:
        lock.release()


def _launch_workers(console: Any, cli: CliRun) -> None:
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
    view = ProgressView(console, None, mode=cli.progress)
    start = time.perf_counter()

    def on_event(shard: int, event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind == "start":
            totals[shard] = event["total"]
            view.set_total_rows(sum(totals.values()))
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
            results = launch(argv, cli.output, cli.gpus, echo=console.print, on_event=on_event)
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}", soft_wrap=True, highlight=False)
        raise typer.Exit(2) from None
    total.wall_s = time.perf_counter() - start
    if not cli.quiet:
        from oasr.transcribe.multi_gpu import manifest_path

        print_summary(console, total, manifest_path(cli.output))
    if any(r.returncode != 0 for r in results):
        raise typer.Exit(1)


@dataclass
class _OutputPlan:
    """What the flags resolve to before the model is loaded."""

    out_path: Path
    total: int
    stdout: bool
    shard: tuple[int, int] | None
    cue_options: Any
    schema: Any


def _plan_output(cli: CliRun, shard: tuple[int, int] | None, stdout: bool = False,
                 emit: tuple[str, ...] = ()) -> _OutputPlan:
    from oasr.io import (
        CueOptions,
        check_output_rows,
        count_rows,
        passthrough_schema,
        resolve_output_path,
    )
    from oasr.io.format_choice import STDOUT

    out_path = (Path(STDOUT) if stdout
                else resolve_output_path(cli.output, cli.inputs, cli.fmt, shard))
    total = count_rows(cli.inputs, cli.columns, shard=shard, limit=cli.limit)
    if not stdout:
        check_output_rows(out_path, cli.fmt, total)
    return _OutputPlan(
        out_path=out_path, total=total, stdout=stdout, shard=shard,
        cue_options=CueOptions(max_chars=cli.max_cue_chars, max_lines=cli.max_line_count,
                               max_duration_s=cli.max_cue_seconds, min_gap_s=cli.cue_gap,
                               min_duration_s=cli.min_cue_seconds,
                               highlight_words=cli.highlight_words),
        schema=passthrough_schema(cli.inputs, dataclasses.replace(cli.columns, emit=emit)))


def _run(console: Any, fail: Any, plan: _OutputPlan, cli: CliRun, run: RunOptions) -> None:
    from rich.markup import escape

    from oasr.cli.transcribe_view import ProgressView, print_summary
    from oasr.io import ManifestError, OutputError, open_writer
    from oasr.io.stdout_writer import StdoutWriter
    from oasr.transcribe.runner import transcribe
    from oasr.transcribe.session import TranscriptionSession, changed_settings
    from oasr.transcribe.signals import Terminated, terminate_as_interrupt

    try:
        session = TranscriptionSession(run)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise fail(exc) from None
    engine = session.engine
    if run.decode.word_timestamps is None and not session.word_timestamps and not cli.quiet:
        console.print(f"note: decode family {engine.decode_method!r} cannot time words in "
                      "this configuration; the words column stays empty")
    options = session.transcribe_options(cli.inputs, columns=cli.columns, shard=plan.shard,
                                         limit=cli.limit)
    transcriber = session.transcriber(options)
    metadata = session.metadata(transcriber)
    try:
        if plan.stdout:
            writer = StdoutWriter(metadata=metadata, emit=run.output.emit)
        else:
            writer = open_writer(plan.out_path, cli.fmt, metadata=metadata,
                                 retry_errors=cli.retry_errors,
                                 passthrough_schema=plan.schema, cue_options=plan.cue_options,
                                 rows=plan.total, emit=run.output.emit)
        previous = writer.previous_metadata()
    except OutputError as exc:
        raise fail(exc) from None
    changed = changed_settings(previous, metadata)
    if changed:
        console.print(f"[yellow]warning:[/] {plan.out_path} was started with other settings "
                      f"({'; '.join(changed)}); resuming adds rows decoded with these",
                      soft_wrap=True, highlight=False)
    view = ProgressView(console, plan.total, mode=cli.progress)
    if view.enabled:
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
                      f"into {plan.out_path}", soft_wrap=True)
        raise typer.Exit(code) from None
    if events:
        multi_gpu.emit_done(stats, str(plan.out_path))
    if not cli.quiet:
        print_summary(console, stats, Path(plan.out_path),
                      empty_subtitles=getattr(writer, "empty_files", None))
    if cli.fail_on_error and stats.errors:
        raise typer.Exit(1)
