"""``oasr bench MANIFEST``: our engine (and optionally a peer) at each batch size, one process.

Exit codes: 0 measured; 2 bad input (unknown peer, peer not installed, unreadable manifest,
``--plot`` without matplotlib).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

import typer

from oasr.engine.config import DEFAULT_MAX_NEW_TOKENS

__all__ = ["bench_command"]

EXIT_BAD_INPUT = 2


# Our series' name in the table and the plot; the JSON keeps the system key "ours".
PROGRAM = "oasr"


def series_label(system: str) -> str:
    """What a result's system is called where people read it: ours by the program's name."""
    # "ours-int8" (a quantization as its own system) reads "oasr-int8"
    return PROGRAM + system[len("ours"):] if system.startswith("ours") else system


def machine_load() -> dict[str, Any]:
    """The machine's load when measured: load averages (1, 5, 15 min; None where the OS has
    none), the CPUs it has and the CPUs this process may run on. A loaded machine slows every
    system, so a result says what it shared the machine with."""
    import os

    try:
        load: list[float] | None = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    try:
        usable: int | None = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = None
    return {"loadavg": load, "cpu_count": os.cpu_count(), "cpus_usable": usable}


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def bench_command(
    manifest: str = typer.Argument(
        ..., help="A Parquet/Arrow/JSONL manifest (or audio files/glob); its text column, when "
        "present, gives the references for WER."),
    model: str = typer.Option(
        "", "--model", "-m", help="A bundle, checkpoint folder, installed model package or Hub "
        "id (default: the packaged Whisper tiny.en)."),
    compare: list[str] = typer.Option(
        [], "--compare", metavar="PEER",
        help="A peer to run on the same audio at each batch size, in a process "
        "of its own (its peak memory is its own): transformers (Whisper on the same weights; "
        "Parakeet CTC/TDT from the transformers checkpoint folder --model names), "
        "faster-whisper (CTranslate2 on the same weights; fp32 on CPU, fp16 on CUDA), "
        "faster-whisper-int8. Repeatable."),
    repeats: int = typer.Option(
        1, "--repeats", min=1, help="Measure each system and batch size this many times (the "
        "plot's error bars: one standard deviation)."),
    batch_size: list[int] = typer.Option(
        [], "--batch-size", "-b", help="A batch size to measure (repeatable; default 1 and 16)."),
    device: str = typer.Option("auto", help="auto, cpu, cuda or cuda:N."),
    dtype: str = typer.Option("auto", help="auto (fp16 on CUDA, fp32 on CPU), fp32, fp16, bf16."),
    repeat_minutes: float | None = typer.Option(
        None, "--repeat-minutes", min=0.0, help="Repeat the clips (whole passes) until at least "
        "this many minutes of audio per run (default: one pass)."),
    max_new_tokens: int = typer.Option(
        DEFAULT_MAX_NEW_TOKENS, "--max-new-tokens", min=1,
        help="Token cap per request, for every system."),
    json_out: Path | None = typer.Option(
        None, "--json", help="Write every measurement (and the setup) to this JSON file."),
    plot: Path | None = typer.Option(
        None, "--plot", help="Draw RTFx against batch size per system into this PNG "
        "(needs matplotlib)."),
    quantization: list[str] = typer.Option(
        [], "--quantization", help="Run ours quantized: int8, int8-weight, fp8 or none "
        "(docs/quantization.md). Repeatable: each is a system of its own (ours, ours-int8, "
        "...) on a fresh copy of the model; default none."),
    threads: int | None = typer.Option(
        None, "--threads", min=1, help="CPU threads for ours and every peer (torch's intra-op "
        "pool, faster-whisper's cpu_threads); default: the cores this process may use "
        "(affinity and cgroup quota)."),
) -> None:
    """Measure RTFx, latency p50/p90/p99, tokens/s, peak memory and WER per system and batch.

    Audio is decoded before timing. Ours: the engine's latency of a request runs from when the
    engine takes it to when it finishes. A peer: a request's latency is its batch's wall time.
    WER is scored on the first pass. Peak memory is torch.cuda.max_memory_allocated on CUDA and
    the process's peak RSS on CPU.
    """
    from oasr.bench.peers import PEERS

    for name in compare:
        if name not in PEERS:
            _fail(f"unknown peer {name!r}; valid peers: {', '.join(sorted(PEERS))}")
    if plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            _fail("--plot needs matplotlib: pip install matplotlib")
    import importlib.util

    if "transformers" in compare and importlib.util.find_spec("transformers") is None:
        _fail("--compare transformers needs transformers: pip install transformers")
    if (any(c.startswith("faster-whisper") for c in compare)
            and importlib.util.find_spec("faster_whisper") is None):
        _fail("--compare faster-whisper needs faster-whisper: pip install 'oasr[bench]'")
    from oasr.quantization import parse_quantization

    quantizations = list(dict.fromkeys(quantization or ["none"]))
    try:
        for q in quantizations:
            parse_quantization(q)
    except ValueError as e:
        _fail(str(e))
    sizes = sorted(set(batch_size or [1, 16]))
    if sizes[0] < 1:
        _fail(f"--batch-size must be >= 1, got {sizes[0]}")

    import torch

    from oasr.bench.isolated import PeerJob, run_peer_isolated
    from oasr.bench.runner import bench_ours, read_clips
    from oasr.engine.config import EngineConfig
    from oasr.io import ManifestError
    from oasr.models.loader import load_pretrained

    probe = EngineConfig(model=model, device=device, dtype=dtype)
    try:
        resolved = probe.resolve_device()
        torch_dtype = probe.resolve_dtype(resolved)
    except ValueError as e:
        _fail(str(e))
    from oasr.runtime_threads import configure_threads

    plan = configure_threads(threads, torch.device(resolved).type)
    lm = load_pretrained(model or None)
    try:
        clips = read_clips(manifest, lm.feature_config.sample_rate)
    except (ManifestError, ValueError, OSError) as e:
        _fail(str(e))
    if not clips:
        _fail(f"{manifest}: no rows to measure")
    window = lm.feature_config.fixed_window_seconds
    long = [c for c in clips if window is not None and c.seconds > window]
    if long:
        # Both systems would see different work: ours refuses them, a peer truncates them.
        _fail(f"{len(long)} clips are longer than the model's {window:g} s window (first: "
              f"{long[0].id}, {long[0].seconds:.1f} s); oasr bench measures single-window "
              "requests")
    if "transformers" in compare:
        from oasr.bench.peers import check_transformers_peer

        try:
            check_transformers_peer(lm.architecture, model)
        except (ValueError, FileNotFoundError) as e:
            _fail(str(e))
    if any(c.startswith("faster-whisper") for c in compare):
        from oasr.bench.faster_whisper_peer import ct2_model_dir

        try:
            ct2_model_dir(model)
        except (ValueError, FileNotFoundError) as e:
            _fail(str(e))

    from oasr import ops

    load_at_start = machine_load()
    results, dispatched = [], ops.snapshot()
    for i, q in enumerate(quantizations):
        # A quantization rewrites the model in place: each after the first gets its own copy.
        lm_q = lm if i == 0 else load_pretrained(model or None)
        for b in sizes:
            for k in range(repeats):
                try:
                    r = bench_ours(lm_q, model, clips, b, device, dtype, repeat_minutes,
                                   max_new_tokens, q)
                except ValueError as e:  # a quantization this device has no lane for
                    _fail(str(e))
                r.repeat = k
                results.append(r)
    # The peers run their own code in their own processes, never a route: these are ours.
    dispatch = ops.counts_since(dispatched)
    # Each peer in its own process: its peak memory is its own, ours stays ours.
    for name in compare:
        job = PeerJob(name, model, device, dtype, max_new_tokens, sizes, repeats,
                      repeat_minutes, clips, threads=plan.intra_op,
                      architecture=lm.architecture)
        try:
            results += run_peer_isolated(job)
        except RuntimeError as e:
            _fail(str(e))
    systems = list(dict.fromkeys(r.system for r in results))  # ours first

    _print_table(results)
    typer.echo(ops.format_dispatch_line(dispatch))
    payload: dict[str, Any] = {
        "manifest": manifest, "model": lm.name, "weights_sha256": lm.weights_sha256,
        "device": resolved, "device_name": _device_name(resolved), "dtype": str(torch_dtype),
        "torch": torch.__version__, "clips": len(clips),
        "clip_audio_s": sum(c.seconds for c in clips), "repeat_minutes": repeat_minutes,
        "max_new_tokens": max_new_tokens, "batch_sizes": sizes, "systems": systems,
        "repeats": repeats, "quantization": quantizations, "threads": plan.intra_op,
        "cpu_budget": str(plan.budget),
        "results": [r.to_dict() for r in results],
        "dispatch": ops.dispatch_summary(dispatch),
        "machine_load": {"start": load_at_start, "end": machine_load()},
    }
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(payload, indent=1), encoding="utf-8")
    if plot is not None:
        _plot(results, plot, payload)


def _device_name(device: str) -> str:
    import platform

    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return platform.processor() or platform.machine()


def _print_table(results: list[Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="oasr bench")
    cols = ("system", "batch", "reqs", "audio s", "wall s", "RTFx", "p50 ms", "p90 ms",
            "p99 ms", "tok/s", "peak MiB", "WER", "errors")
    for c in cols:
        table.add_column(c, justify="left" if c == "system" else "right")
    for r in results:
        wer = "-" if r.wer is None else f"{r.wer * 100:.2f}%"
        table.add_row(series_label(r.system), str(r.batch_size), str(r.requests),
                      f"{r.audio_s:.1f}",
                      f"{r.wall_s:.2f}", f"{r.rtfx:.1f}", f"{r.latency_p50_ms:.0f}",
                      f"{r.latency_p90_ms:.0f}", f"{r.latency_p99_ms:.0f}",
                      f"{r.tokens_per_s:.1f}", f"{r.peak_memory_bytes / 2**20:.0f}", wer,
                      str(r.errors))
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=max(console.width, 130))
    console.print(table)
    if results:
        kind = results[0].memory_kind
        notes = {
            "cuda_max_memory_allocated": "torch.cuda.max_memory_allocated, reset per run",
            "cpu_peak_rss_run": "peak RSS (VmHWM) reset at each run's start, so it includes "
                                "what the process held then; each peer in a process of its own",
            "cpu_peak_rss_process": "the process's peak RSS, never reset; each peer in a "
                                    "process of its own",
        }
        console.print(f"peak memory: {notes.get(kind, kind)}")
    # A peer's features are said, not assumed: some are ours where its own frontend is absent.
    for system, features in dict.fromkeys((r.system, r.features) for r in results
                                          if r.features):
        console.print(f"{series_label(system)} features: {features}")


def _stats(values: list[float]) -> tuple[float, float]:
    import statistics

    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def _plot(results: list[Any], path: Path, payload: dict[str, Any]) -> None:
    """RTFx and p50 latency against batch size per system (mean, one-sd error bars over the
    repeats), with each peer's speed-up (our RTFx / theirs) written at each batch size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_rtf, ax_lat) = plt.subplots(1, 2, figsize=(11, 4.2))
    means: dict[tuple[str, int], float] = {}
    for system in payload["systems"]:
        sizes = sorted({r.batch_size for r in results if r.system == system})
        rtf, rtf_sd, lat, lat_sd = [], [], [], []
        for b in sizes:
            runs = [r for r in results if r.system == system and r.batch_size == b]
            m, sd = _stats([r.rtfx for r in runs])
            means[(system, b)] = m
            rtf.append(m)
            rtf_sd.append(sd)
            m, sd = _stats([r.latency_p50_ms for r in runs])
            lat.append(m)
            lat_sd.append(sd)
        label = series_label(system)
        ax_rtf.errorbar(sizes, rtf, yerr=rtf_sd, marker="o", capsize=3, label=label)
        ax_lat.errorbar(sizes, lat, yerr=lat_sd, marker="o", capsize=3, label=label)
    ours = payload["systems"][0]
    for k, system in enumerate(payload["systems"][1:]):
        for b in payload["batch_sizes"]:
            if (system, b) in means and (ours, b) in means and means[(system, b)] > 0:
                # One line per peer above our point, so several peers' labels do not overlap.
                last = b == max(payload["batch_sizes"])
                ratio = means[(ours, b)] / means[(system, b)]
                ax_rtf.annotate(f"{series_label(ours)} {ratio:.2f}x vs {system}",
                                (b, means[(ours, b)]), textcoords="offset points",
                                xytext=(-4 if last else 4, 6 + 10 * k), fontsize=7,
                                ha="right" if last else "left", annotation_clip=False)
    for ax, label in ((ax_rtf, "RTFx (audio s / wall s)"), (ax_lat, "latency p50 (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    reps = payload.get("repeats", 1)
    fig.suptitle(f"{payload['model']} on {payload['device_name']} ({payload['dtype']}), "
                 f"{reps} repeat{'s' if reps != 1 else ''}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
