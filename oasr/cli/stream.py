"""``oasr stream``: live partials and finals from files or a microphone.

A file that cannot be read (missing, not audio, corrupt, cut short) is one ``error:`` line
naming it; the other files stream on, their finals are written, and the exit status is 1.
"""

from __future__ import annotations

import sys
import time

import typer

from oasr.cli.quantization_flags import COMPUTE_TYPE, QUANTIZATION


class LiveView:
    """A partial line rewritten in place on a TTY; finals as ``[start - end] text`` lines.

    Not a TTY: finals only, one plain line each."""

    def __init__(self, out=None, prefix_sources: bool = False) -> None:
        self.out = out or sys.stdout
        self.tty = self.out.isatty()
        self.prefix = prefix_sources
        self._shown = False

    def _clear(self) -> None:
        if self._shown:
            self.out.write("\r\x1b[2K")
            self._shown = False

    def partial(self, source: str, text: str) -> None:
        if not self.tty or not text:
            return
        self._clear()
        width = 100
        line = (f"{source}: " if self.prefix else "") + text
        self.out.write("… " + line[-width:])
        self.out.flush()
        self._shown = True

    def final(self, source: str, result) -> None:
        if not result.committed:
            return
        self._clear()
        head = f"{source}: " if self.prefix else ""
        self.out.write(f"{head}[{result.start:8.2f} - {result.end:8.2f}] {result.committed}\n")
        self.out.flush()


def stream_command(
    inputs: list[str] = typer.Argument(None, help="Audio files, streamed together."),
    mic: bool = typer.Option(False, "--mic", help="Stream the microphone (needs oasr[mic])."),
    list_devices: bool = typer.Option(False, "--list-devices", help="List input devices."),
    input_device: str | None = typer.Option(
        None, "--input-device", help="Input device index or name (default: the system's)."),
    mic_rate: int | None = typer.Option(
        None, help="Capture rate in Hz (default: the device's; resampled to the model's)."),
    realtime: bool = typer.Option(
        False, "--realtime", help="Pace files as a live source instead of as fast as possible."),
    output: str | None = typer.Option(
        None, "--output", "-o", metavar="FILE",
        help="Write finals with words to FILE.jsonl or FILE.parquet."),
    model: str = typer.Option("", "--model", "-m",
                              help="A bundle, checkpoint folder, package or Hub id "
                                   "(default: the packaged Whisper tiny.en)."),
    device: str = typer.Option("auto", help="auto, cpu, cuda or cuda:N."),
    dtype: str = typer.Option("auto", help="auto (fp16 on CUDA, fp32 on CPU), fp32, fp16, bf16."),
    quantization: str = QUANTIZATION,
    compute_type: str | None = COMPUTE_TYPE,
    batch_size: int = typer.Option(16, "--batch-size", "-b", help="Rows per encoder batch."),
    decode_method: str | None = typer.Option(None, help="Decode family (default: the model's)."),
    decode_option: list[str] = typer.Option(
        [], "--decode-option", "-d", metavar="K=V", help="k=v option of the decode family."),
    graph: str | None = typer.Option(
        None, "--graph", help="ctc_wfst's decoding graph (a .fst or a graph's name in the "
                              "bundle); needs --decode-method ctc_wfst."),
    language: str | None = typer.Option(None, help="Language code (multilingual Whisper)."),
    task: str | None = typer.Option(None, help="transcribe or translate (multilingual Whisper)."),
    step: float = typer.Option(1.0, help="Seconds of new audio between two partial decodes."),
    chunk: float = typer.Option(0.1, help="Seconds per chunk fed from a file."),
    no_endpoint: bool = typer.Option(False, "--no-endpoint",
                                     help="No endpointing: one final per source at its end."),
    chunk_frames: int | None = typer.Option(
        None, "--chunk-frames", help="Chunk-wise models: encoder frames per chunk (default: the "
                                     "model's; WeNet dynamic-chunk models 16)."),
    vad: str = typer.Option(
        "silero", "--vad", help="Speech detector for endpointing: silero (default, if its "
                                "weights are installed), energy (an energy gate, no weights) or "
                                "fsmn (refused: no streaming mode)."),
    vad_model_dir: str | None = typer.Option(
        None, "--vad-model-dir", metavar="DIR", help="Folder with the detector's weights."),
    left_chunks: int | None = typer.Option(
        None, "--left-chunks", help="Chunk-wise models: chunks of left context kept (-1: all; "
                                    "default: the model's)."),
) -> None:
    """Stream recordings or a microphone: live partials, finals with start/end times.

    Exit status: 0 done; 1 some files could not be read (the others were streamed); 2 a bad
    flag or output, or a failed write; 130 interrupted.
    """
    from oasr.io.output_format import OutputError
    from oasr.streaming.sources import MicError, list_input_devices

    err = typer.echo
    if list_devices:
        try:
            devices = list_input_devices()
            for i, name, ch, rate in devices:
                typer.echo(f"{i:3d}  {name}  ({ch} ch, {rate:.0f} Hz)")
            if not devices:
                err("no input device found (is a sound server or a capture card present?)",
                    err=True)
        except MicError as exc:
            err(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        return
    if mic == bool(inputs):
        err("error: pass audio files or --mic (one of them)", err=True)
        raise typer.Exit(2)
    mic_source = None
    if mic:
        from oasr.streaming.sources import MicSource

        try:
            mic_source = MicSource(input_device, mic_rate)
        except MicError as exc:
            err(f"error: {exc}", err=True)
            raise typer.Exit(2) from None

    from oasr.streaming import EndpointConfig, StreamingRecognizer, StreamOptions
    from oasr.streaming.finals import FinalsWriter
    from oasr.transcribe.options import OptionsError, RunOptions
    from oasr.transcribe.session import build_engine

    writer = None
    try:
        run = RunOptions.from_flat(model=model, device=device, dtype=dtype, batch_size=batch_size,
                                   quantization=quantization, compute_type=compute_type,
                                   decode_method=decode_method, decode_options=decode_option,
                                   graph=graph, language=language, task=task).validate()
    except OptionsError as exc:
        err(f"error: {exc.for_cli()}", err=True)
        raise typer.Exit(2) from None
    try:
        writer = FinalsWriter(output) if output else None
        engine = build_engine(run)
        options = StreamOptions(detector=vad, detector_model_dir=vad_model_dir, step_s=step,
                                max_step_s=max(step, 5.0) if mic or realtime else step,
                                language=language, task=task,
                                endpoint=EndpointConfig(enabled=not no_endpoint),
                                chunk_frames=chunk_frames, left_chunks=left_chunks,
                                max_streams=max(1, len(inputs or [])))
        rec = StreamingRecognizer(engine, options)
    except (ValueError, KeyError, FileNotFoundError, OutputError) as exc:
        if writer is not None:
            writer.abort()
        err(f"error: {exc}", err=True)
        raise typer.Exit(2) from None

    sources = ["mic"] if mic else list(inputs)
    view = LiveView(prefix_sources=len(sources) > 1)
    streams = [(src, rec.create_stream()) for src in sources]
    t0 = time.perf_counter()

    def drain() -> None:
        live = [s for _, s in streams]
        while any(rec.is_ready(s) for s in live):
            rec.decode_streams(live)
            for src, s in streams:
                r = rec.get_result(s)
                if rec.is_endpoint(s):
                    view.final(src, r)
                    if writer is not None and r.committed:
                        writer.write(src, r)
                    rec.reset(s)
                else:
                    view.partial(src, r.text)
        if writer is not None:
            writer.flush_if_due()

    def finish(failed: bool) -> None:
        for _, s in streams:
            s.input_finished()
        if failed:  # the writer's error was reported: finals can no longer be written
            if writer is not None:
                writer.abort()
            return
        drain()
        if writer is not None:
            writer.close()

    code = 0
    unreadable: list[str] = []
    try:
        if mic_source is not None:
            s = streams[0][1]
            err(f"listening on {mic_source.name} at {mic_source.rate} Hz; Ctrl-C to stop",
                err=True)
            with mic_source:
                for block in mic_source.blocks():
                    s.accept_waveform(mic_source.rate, block)
                    drain()
        else:
            unreadable = _feed_files(streams, rec.sample_rate, chunk, realtime, drain)
    except KeyboardInterrupt:
        code = 130
        if mic_source is not None:  # captured before the interrupt: still decoded
            streams[0][1].accept_waveform(mic_source.rate, mic_source.pending())
    except (ValueError, OSError, OutputError) as exc:
        err(f"error: {exc}", err=True)
        code = 2
    try:
        finish(failed=writer is not None and writer.failed)
    except OutputError as exc:
        err(f"error: {exc}", err=True)
        code = 2
    _summary(streams, time.perf_counter() - t0, rec.sample_rate, rec.policy.kind)
    if unreadable and not code:
        err(f"{len(unreadable)} of {len(streams)} files could not be read: "
            f"{', '.join(unreadable)}", err=True)
        code = 1
    if code:
        raise typer.Exit(code)


def _feed_files(streams, sample_rate: int, chunk: float, realtime: bool, drain) -> list[str]:
    """Feed every file to its stream; returns the files that could not be read (each reported
    in one line when met: its stream ends there, the others go on)."""
    from oasr.audio import AudioDecodeError
    from oasr.streaming.sources import file_chunks

    unreadable = []
    feeds = [(src, file_chunks(src, sample_rate, chunk, realtime), s) for src, s in streams]
    while feeds:
        for feed in list(feeds):
            src, pieces, stream = feed
            try:
                piece = next(pieces, None)
            except AudioDecodeError as exc:  # names the file: not prefixed again
                typer.echo(f"error: {exc}", err=True)
                unreadable.append(src)
                piece = None
            if piece is None:
                feeds.remove(feed)
                stream.input_finished()
            else:
                stream.accept_waveform(sample_rate, piece)
        drain()
    return unreadable


def _summary(streams, wall: float, sample_rate: int, runtime: str) -> None:
    import numpy as np

    from oasr.transcribe.coverage import coverage_ratio, describe_stretches

    pairs, streams = streams, [s for _, s in streams]
    audio = sum(s.received for s in streams) / sample_rate
    lags = [x for s in streams for x in s.stats.commit_lags]
    firsts = [s.stats.first_text_head - s.stats.first_speech for s in streams
              if s.stats.first_text_head is not None and s.stats.first_speech is not None]
    decodes = sum(s.stats.decodes for s in streams)
    line = f"streamed {audio:.1f} s of audio in {wall:.1f} s ({decodes} decodes, {runtime})"
    if lags:
        line += (f"; commit lag (audio s) mean {np.mean(lags):.2f}, p50 "
                 f"{np.percentile(lags, 50):.2f}, p90 {np.percentile(lags, 90):.2f}")
    if firsts:
        line += f"; first text {np.mean(firsts):.2f} s of audio after speech began"
    speech = sum(s.stats.speech_s for s in streams)
    if speech > 0:
        covered = coverage_ratio(sum(s.stats.covered_s for s in streams), speech)
        line += f"; coverage {covered:.1%} of detected speech"
    typer.echo(line, err=True)
    for src, s in pairs:  # speech no final's words cover: live, reported, not decoded again
        if s.stats.uncovered:
            seconds, where = describe_stretches(s.stats.uncovered)
            typer.echo(f"warning: {src}: {seconds:.1f} s of detected speech has no words: "
                       f"{where}", err=True)
