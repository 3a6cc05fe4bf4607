"""The benchmark of record: every model family through the commands a user types, beside its
peer, each timed point long enough to trust.

For each ``--families`` entry (``FAMILIES``), in one process per command:

1. the model: Whisper tiny.en is the packaged real model; every other family is a random-weight
   checkpoint of the real shape, written by upstream's own code in upstream's own layout
   (``benchmarks/record_models.py``), then ``oasr convert SRC BUNDLE`` (timed);
2. a calibration run: ``oasr transcribe`` on ``--cal-minutes`` of the shared LibriSpeech
   utterances, words off, and the one-row run; the product path's rate sizes the rest so that
   every timed point runs at least ``--min-wall`` seconds beyond its start-up;
3. ``oasr transcribe`` (the whole process, spawn to exit, a fresh output each time): one row
   (start-up, words on and off), short rows words on and off, the shared long recording
   repeated words on; steady RTFx = audio / (wall - wall of the one-row run);
4. ``oasr bench`` (the engine, audio decoded before timing) at ``--bench-batch-sizes``, then
   ``oasr bench --compare PEER`` (transformers, its own process, same weights, same audio) on
   fewer minutes: the peer runs an eighth of the audio (the targets ask ours >= 8x the peer);
5. where the time goes: ``benchmarks/gpu_profile.py`` on the bundle (torch.profiler over one
   engine pass: top CUDA kernels, the encoder's share of the wall) and, for the ``--py-spy``
   families, the words-on run of the short rows sampled per thread.

Every run's record is appended to ``OUT_DIR/runs.jsonl`` as it finishes (a call cut short by a
time limit keeps what ran); ``OUT_DIR/gpu_record.json`` holds the summary table per family.

Usage (GPU box; DIR holds ``librispeech-test-other-70/`` and ``longform/``):
    python benchmarks/gpu_record.py OUT_DIR --data DIR --families whisper_tiny_en,parakeet_tdt
Smoke (CPU, small shapes, a minute of audio):
    python benchmarks/gpu_record.py /tmp/rec --data /work/shared/data --device cpu --small \
        --families parakeet_ctc --min-wall 1 --cal-minutes 0.5 --max-minutes 1
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import math
import os
import platform
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(HERE)]  # this tree's oasr and the sibling benchmark modules

from gpu_transcribe_e2e import (  # noqa: E402
    LONG_FILE,
    SAMPLE_RATE,
    _check_output,
    _oasr,
    _short_rows,
    _write,
    py_spy_summary,
    timed_process,
)


@dataclass(frozen=True)
class Family:
    """A family's benchmark: which model, at which dtype, against which peer."""

    builder: str | None  # record_models.FAMILIES key; None: the packaged Whisper tiny.en
    dtype: str = "auto"
    peer: str | None = "transformers"
    bench_batch_sizes: str = "64,256"
    long: bool = True  # the long recording through transcribe (seek / windows)
    # Random weights leave most detected speech without words, so the coverage check would
    # decode it again far more often than a trained model makes it: off for random families.
    transcribe_flags: tuple[str, ...] = ("--coverage-vad", "none")
    knobs: dict[str, Any] = field(default_factory=dict)


# The calibration run's rate understates a long manifest's 2-3.4x (its fixed costs beyond the
# one-row run weigh more): sized at 1.25x, the first record's timed spans came out 3-8 s
# (results/gpu_record_runs_2026-12-07.jsonl), so manifests are sized at 4x the floor.
SIZE_MARGIN = 4.0

FAMILIES: dict[str, Family] = {
    "whisper_tiny_en": Family(None, transcribe_flags=()),
    "whisper_large_v3_turbo": Family("whisper_large_v3_turbo", bench_batch_sizes="64,128"),
    # No seek and no prompt across windows: a long recording is windows of short rows, so
    # the random-weight transducer / CTC shapes skip it (device time is scarce).
    "parakeet_tdt": Family("parakeet_tdt", dtype="bf16", bench_batch_sizes="256", long=False),
    "parakeet_ctc": Family("parakeet_ctc", dtype="bf16", bench_batch_sizes="256", long=False),
    "zipformer_large": Family("zipformer_large", peer=None, bench_batch_sizes="256",
                              long=False),
}


# ---------------------------------------------------------------------------- manifests

class Manifests:
    """The shared utterances (and the long recording) as HF-layout Parquet, audio embedded,
    built once per size under ``root``."""

    def __init__(self, data: Path, root: Path) -> None:
        import soundfile as sf

        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.base = _short_rows(data)
        self.base_s = sum(r["duration"] for r in self.base)
        self.long_path = data / LONG_FILE
        if not self.long_path.is_file():
            raise SystemExit(f"{self.long_path} not found: --data must hold {LONG_FILE}")
        self.long_s = sf.info(str(self.long_path)).duration
        txt = self.long_path.with_suffix(".txt")
        self.long_text = txt.read_text(encoding="utf-8").strip() if txt.is_file() else None
        self.refs = {r["id"]: r["text"] for r in self.base}
        self.made: dict[str, dict[str, Any]] = {}

    def _save(self, name: str, rows: list[dict[str, Any]], row_group: int) -> dict[str, Any]:
        if name not in self.made:
            path = self.root / f"{name}.parquet"
            _write(path, rows, row_group)
            self.made[name] = {"path": str(path), "rows": len(rows),
                               "audio_s": round(sum(r["duration"] for r in rows), 3)}
        return self.made[name]

    def one(self) -> dict[str, Any]:
        return self._save("one", self.base[:1], 1)

    def short(self, minutes: float) -> dict[str, Any]:
        """The utterances repeated (each copy its own id) to at least ``minutes``; below one
        pass, the first utterances that reach it."""
        target = minutes * 60.0
        rows: list[dict[str, Any]] = []
        total, k = 0.0, 0
        while total < target:
            for r in self.base:
                rows.append({**r, "id": f"{r['id']}#{k}"})
                total += r["duration"]
                if total >= target:
                    break
            k += 1
        return self._save(f"short_{len(rows)}", rows, 64)

    def long(self, minutes: float) -> dict[str, Any]:
        """The long recording, one row per copy, at least one copy; below one copy (smoke), a
        slice of it (no reference then)."""
        import soundfile as sf

        data, text, seconds = self.long_path.read_bytes(), self.long_text, self.long_s
        if minutes * 60 < self.long_s:
            audio, sr = sf.read(str(self.long_path), frames=int(minutes * 60 * SAMPLE_RATE),
                                dtype="int16")
            buf = io.BytesIO()
            sf.write(buf, audio, sr, format="FLAC")
            data, text, seconds = buf.getvalue(), None, len(audio) / sr
        n = max(1, math.ceil(minutes * 60 / seconds - 1e-9))
        rows = [{"id": f"long#{i}", "audio": {"bytes": data, "path": self.long_path.name},
                 "text": text, "duration": seconds} for i in range(n)]
        return self._save(f"long_{n}_{round(seconds)}", rows, 1)


# ---------------------------------------------------------------------------- runs

class Runner:
    """Spawns each command with the same environment, logs under ``work``, appends each
    record to ``out/runs.jsonl``."""

    def __init__(self, out: Path, work: Path, device: str) -> None:
        self.out, self.work, self.device = out, work, device
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}

    def record(self, family: str, name: str, r: dict[str, Any]) -> dict[str, Any]:
        with (self.out / "runs.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"family": family, "name": name, **r}) + "\n")
        return r

    def command(self, family: str, name: str, cmd: list[str]) -> dict[str, Any]:
        r = timed_process(cmd, self.work / f"{family}_{name}.log", self.env)
        if r["rc"] != 0:
            tail = (self.work / f"{family}_{name}.log").read_text(errors="replace")[-1500:]
            r["log_tail"] = tail
            print(f"{family}/{name}: rc {r['rc']}\n{tail}", flush=True)
        return r

    def transcribe(self, family: str, name: str, manifest: dict[str, Any], flags: list[str],
                   refs: dict[str, str] | None, python_flags: tuple[str, ...] = ()
                   ) -> dict[str, Any]:
        out = self.work / "runs" / family / name / "out.parquet"
        shutil.rmtree(out.parent, ignore_errors=True)
        out.parent.mkdir(parents=True)
        r = self.command(family, name, _oasr(
            "transcribe", manifest["path"], "-o", str(out), "--device", self.device,
            "--no-progress", *flags, python_flags=python_flags))
        if r["rc"] == 0 and out.exists():
            r.update(_check_output(out, manifest, refs))
        r["audio_s"] = manifest["audio_s"]
        r["rtfx_process"] = round(r["audio_s"] / r["wall_s"], 1)
        print(f"{family}/{name}: {r['wall_s']:.2f} s, {manifest['audio_s'] / 60:.1f} min, rc "
              f"{r['rc']}, {r.get('error_rows')} error rows, WER {r.get('wer')}", flush=True)
        return self.record(family, name, r)

    def bench(self, family: str, name: str, model_flags: list[str], manifest: str,
              batches: str, minutes: float, peer: str | None, extra: list[str]
              ) -> dict[str, Any]:
        js = self.work / f"{family}_{name}.json"
        js.unlink(missing_ok=True)
        cmd = ["bench", manifest, *model_flags, "--device", self.device, "--repeat-minutes",
               f"{minutes:.2f}", "--json", str(js), *extra]
        for b in batches.split(","):
            cmd += ["-b", b]
        if peer:
            cmd += ["--compare", peer]
        r = self.command(family, name, _oasr(*cmd))
        if js.exists():
            payload = json.loads(js.read_text())
            r["results"] = [{k: x.get(k) for k in (
                "system", "batch_size", "audio_s", "wall_s", "rtfx", "tokens", "wer", "errors",
                "peak_memory_bytes", "latency_p50_ms")} for x in payload["results"]]
            r["setup"] = {k: v for k, v in payload.items() if k != "results"}
        print(f"{family}/{name}: rc {r['rc']}, " + ", ".join(
            f"{x['system']} b{x['batch_size']} {x['rtfx']:.0f} ({x['wall_s']:.1f} s)"
            for x in r.get("results", [])), flush=True)
        return self.record(family, name, r)


def _steady(run: dict[str, Any], one: dict[str, Any]) -> dict[str, Any]:
    """Steady RTFx against the one-row run, and whether the timed span met the floor."""
    d = run["wall_s"] - one["wall_s"]
    ok = run["rc"] == 0 and not run.get("error_rows") and d > 0
    return {"rtfx": round(run["audio_s"] / d, 1) if ok else None, "timed_s": round(d, 2),
            "process_rtfx": run.get("rtfx_process")}


def write_npz(manifests: Manifests, path: Path) -> None:
    """The 70 utterances as the int16 ``.npz`` gpu_profile.py reads."""
    import numpy as np
    import soundfile as sf

    ids, lengths, chunks = [], [], []
    for r in manifests.base:
        audio, _ = sf.read(io.BytesIO(r["audio"]["bytes"]), dtype="int16")
        ids.append(r["id"])
        lengths.append(len(audio))
        chunks.append(audio)
    np.savez(path, ids=np.array(ids), lengths=np.array(lengths),
             samples=np.concatenate(chunks))


# ---------------------------------------------------------------------------- one family

def run_family(name: str, fam: Family, args: Any, runner: Runner, manifests: Manifests
               ) -> dict[str, Any]:
    t0 = time.perf_counter()
    res: dict[str, Any] = {"family": name, "dtype": fam.dtype}
    model_flags: list[str] = []
    extra: list[str] = []
    bench_extra: list[str] = []
    if fam.builder is not None:
        import record_models

        folder = runner.work / "models" / name
        shutil.rmtree(folder, ignore_errors=True)
        t_build = time.perf_counter()
        built = record_models.FAMILIES[fam.builder](folder, small=args.small, **fam.knobs)
        res["model"] = {k: v for k, v in built.items() if k not in ("source",)}
        res["model"]["build_s"] = round(time.perf_counter() - t_build, 1)
        bundle = runner.work / "bundles" / name
        shutil.rmtree(bundle, ignore_errors=True)
        res["convert"] = runner.record(name, "convert", runner.command(name, "convert", _oasr(
            "convert", str(built["source"]), str(bundle), *built.get("convert_args", []))))
        if res["convert"]["rc"] != 0:
            return res
        model_flags = ["-m", str(bundle)]
        extra = list(built.get("transcribe_args", []))
        # The token cap a random decoder needs holds for the engine and the peer alike.
        if "--max-new-tokens" in extra:
            bench_extra = extra[extra.index("--max-new-tokens"):][:2]
        # The peer reads the checkpoint the user has (transformers' folder), not our bundle.
        peer_model = ["-m", str(built["source"])]
        refs = None
    else:
        res["model"] = {"name": "whisper tiny.en (packaged, real weights)"}
        peer_model = []
        refs = manifests.refs
    dtype = [] if fam.dtype == "auto" else ["--dtype", fam.dtype]
    flags = [*model_flags, *dtype, *extra, *fam.transcribe_flags]
    if args.batch_size:
        flags += ["-b", str(args.batch_size)]
    runs: dict[str, dict[str, Any]] = {}
    one = manifests.one()
    runs["warmup_one"] = runner.transcribe(name, "warmup_one", one, flags, None)
    if runs["warmup_one"]["rc"] != 0:
        res["runs"] = runs
        return res
    for wt, flag in (("wt", "--word-timestamps"), ("nowt", "--no-word-timestamps")):
        runs[f"one_{wt}"] = runner.transcribe(name, f"one_{wt}", one, [*flags, flag], refs)
    cal = manifests.short(args.cal_minutes)
    runs["cal_nowt"] = runner.transcribe(name, "cal_nowt", cal, [*flags, "--no-word-timestamps"],
                                         refs)
    rate = _steady(runs["cal_nowt"], runs["one_nowt"])["rtfx"] or 100.0
    minutes = min(args.max_minutes, max(args.cal_minutes,
                                        args.min_wall * SIZE_MARGIN * rate / 60.0))
    res["sizing"] = {"cal_rate": rate, "short_minutes": round(minutes, 1)}
    short = manifests.short(minutes)
    for wt, flag in (("wt", "--word-timestamps"), ("nowt", "--no-word-timestamps")):
        runs[f"short_{wt}"] = runner.transcribe(name, f"short_{wt}", short, [*flags, flag], refs)
    if fam.long:
        # The long recording runs slower than short rows (seek, windows): ~0.6 of the rate.
        long = manifests.long(min(args.max_minutes, max(args.cal_minutes, 0.6 * minutes)))
        whole = long["audio_s"] >= long["rows"] * manifests.long_s - 1e-3  # not a slice
        long_refs = {f"long#{i}": manifests.long_text for i in range(long["rows"])
                     } if fam.builder is None and manifests.long_text and whole else None
        runs["long_wt"] = runner.transcribe(name, "long_wt", long,
                                            [*flags, "--word-timestamps"], long_refs)
    base = manifests.short(manifests.base_s / 60.0)
    bench_minutes = min(args.max_minutes * 2, max(args.cal_minutes, 2.0 * minutes))
    res["sizing"]["bench_minutes"] = round(bench_minutes, 1)
    if fam.builder is not None:
        bench_extra = [*dtype, *bench_extra]
    else:
        bench_extra = [*dtype]
    res["bench"] = runner.bench(name, "bench", model_flags or peer_model, base["path"],
                                fam.bench_batch_sizes, bench_minutes, None, bench_extra)
    if fam.peer and not args.no_peer:
        res["peer_bench"] = runner.bench(
            name, "peer_bench", peer_model, base["path"], fam.bench_batch_sizes.split(",")[0],
            max(args.cal_minutes, bench_minutes / 8.0), fam.peer, bench_extra)
    if args.profile and args.device.startswith("cuda"):
        npz = runner.work / "audio70.npz"
        if not npz.exists():
            write_npz(manifests, npz)
        prof_txt = runner.out / f"profile_{name}.txt"
        bundle_arg = model_flags[1] if model_flags else ""
        cmd = [sys.executable, str(HERE / "gpu_profile.py"), "--audio", str(npz), "--batch",
               fam.bench_batch_sizes.split(",")[-1], "--out", str(prof_txt),
               "--dtype", "fp16" if fam.dtype == "auto" else fam.dtype]
        if bundle_arg:
            cmd += ["--bundle", bundle_arg]
        res["kernel_profile"] = runner.record(name, "kernel_profile",
                                              runner.command(name, "kernel_profile", cmd))
        res["kernel_profile"]["text"] = prof_txt.name
    spied = args.py_spy.split(",")
    if (name in spied or "all" in spied) and shutil.which("py-spy"):
        spy = runner.out / f"py_spy_{name}.json"
        out = runner.work / "runs" / name / "py_spy.parquet"
        r = runner.command(name, "py_spy", [
            "py-spy", "record", "--subprocesses", "--idle", "--format", "speedscope", "-o",
            str(spy), "--", *_oasr("transcribe", short["path"], "-o", str(out), "--device",
                                   args.device, "--no-progress", *flags, "--word-timestamps")])
        if spy.exists():
            r["threads"] = py_spy_summary(spy, top=15)
            spy.unlink()
        res["py_spy"] = runner.record(name, "py_spy", r)
    res["runs"] = runs
    res["summary"] = summarize(res)
    res["family_wall_s"] = round(time.perf_counter() - t0, 1)
    return res


def _peer_rtfx(s: dict[str, Any]) -> list[float]:
    """The peer's RTFx per batch size in a summary (its own process's rows of ours left out)."""
    return [v["rtfx"] for k, v in s.items() if k.startswith("peer_bench_") and "_ours_" not in k]


def summarize(res: dict[str, Any]) -> dict[str, Any]:
    runs = res["runs"]
    s: dict[str, Any] = {}
    for wt in ("wt", "nowt"):
        if f"one_{wt}" in runs:
            s[f"startup_s_{wt}"] = runs[f"one_{wt}"]["wall_s"]
        if f"short_{wt}" in runs:
            s[f"short_{wt}"] = _steady(runs[f"short_{wt}"], runs[f"one_{wt}"])
    if "long_wt" in runs:
        s["long_wt"] = _steady(runs["long_wt"], runs["one_wt"])
    for key in ("bench", "peer_bench"):
        for x in res.get(key, {}).get("results", []):
            s[f"{key}_{x['system']}_b{x['batch_size']}"] = {
                "rtfx": round(x["rtfx"], 1), "wall_s": round(x["wall_s"], 2)}
    ours = [v["rtfx"] for k, v in s.items() if k.startswith("bench_ours")]
    peer = _peer_rtfx(s)
    if ours:
        s["engine_best_rtfx"] = max(ours)
        for wt in ("wt", "nowt"):
            if s.get(f"short_{wt}", {}).get("rtfx"):
                s[f"product_over_engine_{wt}"] = round(s[f"short_{wt}"]["rtfx"] / max(ours), 3)
    if ours and peer:
        s["engine_over_peer"] = round(max(ours) / max(peer), 2)
        if s.get("short_nowt", {}).get("rtfx"):
            s["product_nowt_over_peer"] = round(s["short_nowt"]["rtfx"] / max(peer), 2)
    return s


def table(report: dict[str, Any]) -> str:
    """The summary as the markdown table docs/benchmarks.md quotes (RTFx; '-' where not run)."""
    def rtfx(s: dict[str, Any], key: str) -> str:
        v = s.get(key)
        return f"{v['rtfx']:,.0f}" if isinstance(v, dict) and v.get("rtfx") else "-"

    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:,.0f}"

    head = ("| family | start-up s (words on) | transcribe short, words on | words off | "
            "long, words on | engine best | peer best | engine / peer | product / engine "
            "(words on) |")
    lines = [head, "|" + "---|" * 9]
    for name, fam in report.get("families", {}).items():
        s = fam.get("summary") or {}
        if not s:
            lines.append(f"| {name} | {fam.get('error', 'not run')[:80]} |" + " |" * 7)
            continue
        peer = _peer_rtfx(s)
        lines.append(
            f"| {name} | {s.get('startup_s_wt', '-')} | {rtfx(s, 'short_wt')} | "
            f"{rtfx(s, 'short_nowt')} | {rtfx(s, 'long_wt')} | "
            f"{num(s.get('engine_best_rtfx'))} | {num(max(peer) if peer else None)} | "
            f"{s.get('engine_over_peer', '-')} | {s.get('product_over_engine_wt', '-')} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--data", type=Path,
                    help="folder holding librispeech-test-other-70/ and longform/ (required "
                         "unless --table)")
    ap.add_argument("--families", default=",".join(FAMILIES),
                    help=f"comma list of {', '.join(FAMILIES)}")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="tiny shapes (a CPU smoke run)")
    ap.add_argument("--min-wall", type=float, default=10.0,
                    help="seconds each timed point should run beyond its start-up")
    ap.add_argument("--cal-minutes", type=float, default=10.0,
                    help="audio of the calibration run (and the floor of every manifest)")
    ap.add_argument("--max-minutes", type=float, default=600.0,
                    help="the ceiling of a transcribe manifest (bench: twice this)")
    ap.add_argument("--batch-size", type=int, default=None,
                    help="-b for oasr transcribe (default: the CLI's own)")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="benchmarks/gpu_profile.py per family (CUDA only)")
    ap.add_argument("--py-spy", default="",
                    help="comma list of families (or 'all'): py-spy over their words-on short "
                         "run, per thread")
    ap.add_argument("--work", type=Path, default=Path("/tmp/oasr_record"))
    ap.add_argument("--table", action="store_true",
                    help="print OUT_DIR/gpu_record.json as a markdown table and exit")
    args = ap.parse_args()
    if args.table:
        report = json.loads((args.out_dir / "gpu_record.json").read_text(encoding="utf-8"))
        print(f"{report['device_name']}, {report['date_utc']}\n")
        print(table(report))
        return
    if args.data is None:
        ap.error("--data is required to run the record")
    names = [n for n in args.families.split(",") if n]
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise SystemExit(f"unknown families {unknown}; valid: {', '.join(FAMILIES)}")
    out, work = args.out_dir.resolve(), args.work.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OASR_CACHE_DIR", str(work / "cache"))
    runner = Runner(out, work, args.device)
    manifests = Manifests(args.data.resolve(), work / "data")
    import torch

    try:
        import transformers
        tf_version = transformers.__version__
    except ImportError:
        tf_version = None
    report: dict[str, Any] = {
        "benchmark": "gpu_record",
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "device": args.device,
        "device_name": (torch.cuda.get_device_name(0) if args.device.startswith("cuda")
                        and torch.cuda.is_available() else platform.processor() or "cpu"),
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "transformers": tf_version, "cpu_count": os.cpu_count()},
        "method": "each command is one subprocess timed from spawn to exit; steady RTFx = "
                  "audio_s / (wall - wall of the 1-row run of the same flags); manifests sized "
                  "from a calibration run so each timed span is >= min_wall s; bench = `oasr "
                  "bench` (audio decoded before timing), the peer in its own process on the "
                  "same weights and audio",
        "min_wall_s": args.min_wall, "families": {},
    }
    path = out / "gpu_record.json"
    for name in names:
        try:
            report["families"][name] = run_family(name, FAMILIES[name], args, runner, manifests)
        except Exception as exc:  # one family's failure is its result; the next still runs
            import traceback

            report["families"][name] = {"error": f"{type(exc).__name__}: {exc}",
                                        "traceback": traceback.format_exc()[-3000:]}
            print(report["families"][name]["traceback"], flush=True)
        path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(json.dumps({name: report["families"][name].get("summary")}, indent=1), flush=True)
    report["manifests"] = manifests.made
    path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(table(report))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
