"""The whole ``oasr transcribe`` process, timed from outside, beside the engine and transformers.

Builds HF-layout Parquet manifests (``id``, ``audio`` {bytes, path}, ``text``,
``duration``; the audio bytes embedded) under ``WORK/data`` (``--work``, default
``/tmp/oasr_e2e``; runs, logs and the raw profile go there too, so ``OUT_DIR`` gets only the
JSON, the cProfile top texts, the 1-row run's raw profile and the importtime top text):

- ``short``: the 70 LibriSpeech test-other utterances repeated, each copy with a unique id, to
  at least ``--minutes`` of audio (default 60);
- ``long``: the shared 9.5-minute long recording repeated (one row per copy) to at least
  ``--minutes``;
- ``one``: a single short utterance (the start-up run);
- ``long_many`` (``--long-pieces N``): the long recording cut into N slices, repeated to
  ``--minutes`` (many long rows in flight at once).

Then times each ``oasr transcribe`` run as a subprocess (wall clock from spawn to exit, peak RSS
from ``wait4``), with and without word timings, into a fresh output each time (no resume):
start-up = the 1-row run's wall; steady-state RTFx = audio s / (wall(hour) - wall(1 row)).
One more 1-row run (``one_wt_from_source``) compiles every module from source (an empty,
unwritten bytecode cache), as a process does where no bytecode was ever written.
Beside them, in the same session: ``oasr bench`` (the engine alone, audio decoded before timing)
at each ``--bench-batch-sizes`` over the same short audio, with ``--compare transformers``
(transformers' Whisper ``generate``, its own process). Finally a profile of the hour run:
cProfile of the whole process (plus py-spy when installed) and ``python -X importtime`` of the
1-row run, the top entries written as text into ``OUT_DIR`` (the cProfile top-40 also printed
to stdout, so it shows in a log tail).

Usage (GPU box; DIR holds ``librispeech-test-other-70/`` and ``longform/``):
    python benchmarks/gpu_transcribe_e2e.py OUT_DIR --data DIR
Smoke mode (CPU, minutes of audio instead of an hour):
    python benchmarks/gpu_transcribe_e2e.py /tmp/e2e --data /work/shared/data --device cpu \
        --minutes 2
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import platform
import pstats
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this tree's oasr, not an installed one
SHORT_DIR = "librispeech-test-other-70"
LONG_FILE = "longform/librispeech-test-other-70.flac"
SAMPLE_RATE = 16000


# ---------------------------------------------------------------------------- manifests

def _short_rows(data: Path) -> list[dict[str, Any]]:
    """The 70 utterances as manifest rows (bytes embedded), from DIR or the repo's manifest."""
    import pyarrow.parquet as pq

    folder = data / SHORT_DIR
    if (folder / "transcripts.tsv").is_file():
        rows = []
        lines = (folder / "transcripts.tsv").read_text(encoding="utf-8").splitlines()[1:]
        for line in lines:
            uid, duration, text = line.split("\t", 2)
            audio = (folder / "audio" / f"{uid}.flac").read_bytes()
            rows.append({"id": uid, "audio": {"bytes": audio, "path": f"{uid}.flac"},
                         "text": text, "duration": float(duration)})
        return rows
    fallback = REPO / "manifests" / "librispeech-test-other-70.parquet"
    print(f"note: {folder} has no transcripts.tsv; using {fallback}", flush=True)
    return pq.read_table(fallback).to_pylist()


def _write(path: Path, rows: list[dict[str, Any]], row_group_size: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("id", pa.string()),
                        ("audio", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                        ("text", pa.string()), ("duration", pa.float64())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path,
                   row_group_size=row_group_size)


def _long_pieces(path: Path, target: float, pieces: int) -> list[dict[str, Any]]:
    """The long recording cut into ``pieces`` equal slices (each still many windows long),
    repeated to ``target`` seconds: many long rows in flight at once, as a large manifest of
    long recordings has (no reference text: a slice has none)."""
    import io

    import soundfile as sf

    audio, sr = sf.read(str(path), dtype="int16")
    step = len(audio) // pieces
    slices = []
    for i in range(pieces):
        buf = io.BytesIO()
        sf.write(buf, audio[i * step:(i + 1) * step], sr, format="FLAC")
        slices.append((buf.getvalue(), step / sr))
    rows, total = [], 0.0
    while total < target:
        b, d = slices[len(rows) % pieces]
        rows.append({"id": f"piece#{len(rows)}", "audio": {"bytes": b, "path": path.name},
                     "text": None, "duration": d})
        total += d
    return rows


def build_manifests(data: Path, out: Path, minutes: float, long_pieces: int = 0
                    ) -> dict[str, dict[str, Any]]:
    """{name: {path, rows, audio_s}} for the short, long and one-row manifests (and
    ``long_many``: the long recording in ``long_pieces`` slices, when > 1)."""
    import soundfile as sf

    out.mkdir(parents=True, exist_ok=True)
    base = _short_rows(data)
    base_s = sum(r["duration"] for r in base)
    target = minutes * 60.0
    short, total, k = [], 0.0, 0
    while total < target:
        for r in base:
            short.append({**r, "id": f"{r['id']}#{k}"})
            total += r["duration"]
            if total >= target and minutes < base_s / 60.0:
                break
        k += 1
    long_path = data / LONG_FILE
    if not long_path.is_file():
        raise SystemExit(f"{long_path} not found: --data must hold {LONG_FILE}")
    long_bytes = long_path.read_bytes()
    long_s = sf.info(str(long_path)).duration
    if target < long_s:  # smoke mode: a slice of the recording, not a whole copy
        import io

        audio, sr = sf.read(str(long_path), frames=int(target * SAMPLE_RATE), dtype="int16")
        buf = io.BytesIO()
        sf.write(buf, audio, sr, format="FLAC")
        long_bytes, long_s = buf.getvalue(), len(audio) / sr
    txt = long_path.with_suffix(".txt")
    long_text = txt.read_text(encoding="utf-8").strip() if txt.is_file() else None
    if long_s < sf.info(str(long_path)).duration:
        long_text = None  # a slice: the reference no longer matches
    n_long = max(1, int(-(-target // long_s)))
    longs = [{"id": f"long#{i}", "audio": {"bytes": long_bytes, "path": long_path.name},
              "text": long_text, "duration": long_s} for i in range(n_long)]
    sets = {"short": (short, 64), "long": (longs, 1), "one": (short[:1], 1)}
    if long_pieces > 1 and long_s > long_pieces * 60:
        sets["long_many"] = (_long_pieces(long_path, target, long_pieces), 1)
    info = {}
    for name, (rows, rg) in sets.items():
        path = out / f"{name}.parquet"
        _write(path, rows, rg)
        info[name] = {"path": str(path), "rows": len(rows),
                      "audio_s": round(sum(r["duration"] for r in rows), 3)}
    return info


# ---------------------------------------------------------------------------- runs

def _oasr(*args: str, python_flags: tuple[str, ...] = (), launcher: str | None = None
          ) -> list[str]:
    entry = [launcher] if launcher else ["-m", "oasr.cli.app"]
    return [sys.executable, *python_flags, *entry, *args]


def timed_process(cmd: list[str], log: Path, env: dict[str, str]) -> dict[str, Any]:
    """Spawn ``cmd`` (stdout+stderr to ``log``), wall clock to exit, peak RSS from wait4."""
    with log.open("w") as fh:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss is KiB on Linux.
    return {"wall_s": round(wall, 3), "rc": proc.returncode, "peak_rss_mb": usage.ru_maxrss // 1024,
            "cpu_user_s": round(usage.ru_utime, 2), "cpu_sys_s": round(usage.ru_stime, 2),
            "command": shlex.join(cmd[1:]), "log": log.name}


def _check_output(path: Path, manifest: dict[str, Any], refs: dict[str, str] | None
                  ) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from oasr.metrics.wer import score

    t = pq.read_table(path, columns=["id", "text", "error"]).to_pylist()
    errors = [r for r in t if r.get("error")]
    res: dict[str, Any] = {"rows_out": len(t), "error_rows": len(errors)}
    if errors:
        res["first_error"] = errors[0]["error"]
    if len(t) != manifest["rows"]:
        res["problem"] = f"{len(t)} output rows for {manifest['rows']} input rows"
    if refs:
        hyps = {r["id"]: r["text"] or "" for r in t if not r.get("error")}
        scored = {k: refs[k] for k in hyps if refs.get(k)}
        if scored:
            res["wer"] = round(score(scored, {k: hyps[k] for k in scored},
                                     normalizer="whisper").wer, 5)
    return res


def _progress(args: Any, name: str, result: dict[str, Any]) -> None:
    """Each finished run as one line of ``OUT_DIR/runs.jsonl``: what a run cut short by a time
    limit still leaves (the report is written at the end)."""
    with (Path(args.out_dir) / "runs.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"name": name, **result}) + "\n")


def transcribe_run(name: str, manifest: dict[str, Any], extra: list[str], args: Any,
                   out: Path, env: dict[str, str], refs: dict[str, str] | None,
                   python_flags: tuple[str, ...] = (), launcher: str | None = None
                   ) -> dict[str, Any]:
    work = out / "runs" / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    result = work / "out.parquet"
    flags = ["transcribe", manifest["path"], "-o", str(result), "--device", args.device,
             "--no-progress", *extra]
    if args.batch_size:
        flags += ["-b", str(args.batch_size)]
    r = timed_process(_oasr(*flags, python_flags=python_flags, launcher=launcher),
                      out / f"{name}.log", env)
    if r["rc"] == 0 and result.exists():
        r.update(_check_output(result, manifest, refs))
    r["audio_s"] = manifest["audio_s"]
    _progress(args, name, r)
    print(f"{name}: {r['wall_s']:.2f} s wall, rc {r['rc']}, {r.get('error_rows')} error rows, "
          f"WER {r.get('wer')}", flush=True)
    return r


def bench_run(manifests: dict[str, Any], args: Any, out: Path, env: dict[str, str]
              ) -> dict[str, Any]:
    """``oasr bench`` on the 70 utterances repeated to --minutes, ours beside transformers."""
    js = out / "oasr_bench.json"
    flags = ["bench", str(Path(manifests["short"]["path"]).parent / "base70.parquet"),
             "--device", args.device, "--repeat-minutes", str(args.minutes), "--json", str(js)]
    for b in args.bench_batch_sizes.split(","):
        flags += ["-b", b]
    if not args.no_transformers:
        flags += ["--compare", "transformers"]
    r = timed_process(_oasr(*flags), out / "oasr_bench.log", env)
    if js.exists():
        payload = json.loads(js.read_text())
        rows = [{k: x[k] for k in ("system", "batch_size", "audio_s", "wall_s", "rtfx", "wer",
                                   "errors", "peak_memory_bytes")} for x in payload["results"]]
        r["results"] = rows
        for system in {x["system"] for x in rows}:
            best = max((x for x in rows if x["system"] == system), key=lambda x: x["rtfx"])
            r[f"best_{system}"] = {"batch_size": best["batch_size"], "rtfx": round(best["rtfx"], 1)}
    _progress(args, "bench", r)
    print(f"bench: rc {r['rc']}, " + ", ".join(f"{k} {v}" for k, v in r.items()
                                              if k.startswith("best_")), flush=True)
    return r


# ---------------------------------------------------------------------------- profile

def py_spy_summary(path: Path, top: int = 25) -> list[dict[str, Any]]:
    """Per sampled thread of a py-spy speedscope file: its sampled seconds and the frames with the
    most of them, inclusive (on the stack) and self (innermost), idle waits included; for the
    thread that runs the transcription loop, the same inside the loop alone (``loop_*``, start-up
    and teardown left out, deeper: where the engine's thread spends the steady phase)."""
    doc = json.loads(path.read_text())
    frames = doc["shared"]["frames"]
    loop = {k for k, f in enumerate(frames) if f.get("name") == "Transcriber.run_ticks"}

    def name(i: int) -> str:
        f = frames[i]
        return f"{f.get('name')} ({Path(f.get('file') or '?').name}:{f.get('line')})"

    def tally(stacks: list[tuple[list[int], float]], n_incl: int, n_self: int
              ) -> tuple[float, list, list]:
        total = sum(w for _, w in stacks)
        incl: dict[int, float] = {}
        own: dict[int, float] = {}
        for stack, w in stacks:
            for i in set(stack):
                incl[i] = incl.get(i, 0) + w
            if stack:
                own[stack[-1]] = own.get(stack[-1], 0) + w

        def ranked(d: dict[int, float], n: int) -> list:
            return [[name(i), round(w / (total or 1), 3)]
                    for i, w in sorted(d.items(), key=lambda x: -x[1])[:n]]

        return total, ranked(incl, n_incl), ranked(own, n_self)

    threads = []
    for prof in doc["profiles"]:
        stacks = list(zip(prof.get("samples", []), prof.get("weights", [])))
        total, incl, own = tally(stacks, top, top)
        entry = {"thread": prof.get("name"), "seconds": round(total, 2), "inclusive": incl,
                 "self": own}
        in_loop = [(st, w) for st, w in stacks if loop.intersection(st)]
        if in_loop:
            lt, li, lo = tally(in_loop, 3 * top, 2 * top)
            entry.update(loop_seconds=round(lt, 2), loop_inclusive=li, loop_self=lo)
        threads.append(entry)
    threads.sort(key=lambda t: -t["seconds"])
    return threads


def profile_runs(manifests: dict[str, Any], args: Any, out: Path, work: Path,
                 env: dict[str, str]) -> dict[str, Any]:
    prof = work / "profile_short_word_timestamps.prof"
    r = transcribe_run("profile_short_word_timestamps", manifests["short"],
                       ["--word-timestamps"], args, work, env, None,
                       python_flags=("-m", "cProfile", "-o", str(prof)))
    res: dict[str, Any] = {"cprofile_run": r}
    if prof.exists():
        txt = out / "profile_short_word_timestamps.txt"
        with txt.open("w") as fh:
            st = pstats.Stats(str(prof), stream=fh)
            fh.write("# cumulative\n")
            st.sort_stats("cumulative").print_stats(60)
            fh.write("\n# tottime\n")
            st.sort_stats("tottime").print_stats(40)
        res["cprofile_text"] = txt.name
        st = pstats.Stats(str(prof))
        print("# cProfile top-40, cumulative", flush=True)
        st.sort_stats("cumulative").print_stats(40)
        print("# cProfile top-40, tottime", flush=True)
        st.sort_stats("tottime").print_stats(40)
        sys.stdout.flush()
    if shutil.which("py-spy"):
        res["py_spy_run"] = timed_process(
            ["py-spy", "record", "--subprocesses", "--idle", "--format", "speedscope", "-o",
             str(out / "py_spy_short.json"), "--",
             *_oasr("transcribe", manifests["short"]["path"], "-o",
                    str(work / "runs" / "py_spy.parquet"), "--device", args.device,
                    "--no-progress")], work / "py_spy.log", env)
        spy = out / "py_spy_short.json"
        if spy.exists():
            res["py_spy_threads"] = py_spy_summary(spy)
            with spy.open("rb") as src, gzip.open(f"{spy}.gz", "wb") as dst:
                shutil.copyfileobj(src, dst)  # the raw samples, compressed, for later questions
            spy.unlink()
    else:
        res["py_spy"] = "not installed"
    # Where the 1-row run's start-up goes (imports, device and model set-up, graph captures).
    one_prof = work / "profile_one.prof"
    res["cprofile_one_run"] = transcribe_run(
        "profile_one", manifests["one"], ["--word-timestamps"], args, work, env, None,
        python_flags=("-m", "cProfile", "-o", str(one_prof)))
    if one_prof.exists():
        txt = out / "profile_one.txt"
        with txt.open("w") as fh:
            pstats.Stats(str(one_prof), stream=fh).sort_stats("cumulative").print_stats(80)
        res["cprofile_one_text"] = txt.name
        shutil.copy(one_prof, out / one_prof.name)  # raw, for callers and callees later
    imp = transcribe_run("importtime_one", manifests["one"], ["--word-timestamps"], args, work,
                         env, None, python_flags=("-X", "importtime"))
    res["importtime_run"] = imp
    entries = []
    for line in (work / "importtime_one.log").read_text().splitlines():
        if line.startswith("import time:") and "|" in line:
            parts = [p.strip() for p in line[len("import time:"):].split("|")]
            if parts[0].isdigit():
                entries.append((int(parts[1]), int(parts[0]), parts[2]))
    entries.sort(reverse=True)
    top = out / "importtime_top.txt"
    top.write_text("cumulative_us\tself_us\tmodule\n" + "\n".join(
        f"{c}\t{s}\t{m}" for c, s, m in entries[:50]) + "\n")
    res["importtime_top"] = [{"module": m.strip(), "cumulative_ms": round(c / 1000, 1)}
                             for c, _, m in entries[:15]]
    return res


# ---------------------------------------------------------------------------- main

def _steady(hour: dict[str, Any], one: dict[str, Any]) -> float | None:
    d = hour["wall_s"] - one["wall_s"]
    return round(hour["audio_s"] / d, 1) if d > 0 and hour["rc"] == 0 else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--data", type=Path, required=True,
                    help=f"folder holding {SHORT_DIR}/ (transcripts.tsv, audio/) and {LONG_FILE}")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--minutes", type=float, default=60.0, help="audio per big manifest")
    ap.add_argument("--batch-size", type=int, default=None,
                    help="-b for oasr transcribe (default: the CLI's own default)")
    ap.add_argument("--bench-batch-sizes", default="64,128,256")
    ap.add_argument("--no-transformers", action="store_true")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--skip-long", action="store_true")
    ap.add_argument("--no-bench", action="store_true", help="skip `oasr bench` (and transformers)")
    ap.add_argument("--also-batch-sizes", default="",
                    help="comma list: the short manifest again at each -b, words on and off")
    ap.add_argument("--long-pieces", type=int, default=0,
                    help="also a manifest of the long recording cut into this many slices "
                         "(many long rows in flight), words on and off, and with --vad silero")
    ap.add_argument("--baseline-cpu-detector", action="store_true",
                    help="also the words-on short (at each --also-batch-sizes too) and many-long "
                         "runs with the coverage detector on the CPU "
                         "(benchmarks/coverage_on_cpu.py)")
    ap.add_argument("--also-switch-interval-ms", type=float, default=None,
                    help="also the short runs, words on and off, with the GIL switch interval "
                         "set to this (benchmarks/switch_interval.py)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/oasr_e2e"),
                    help="scratch folder for manifests, runs, logs and the raw profile (kept "
                         "out of OUT_DIR, which gets only the JSON and the profile top texts)")
    args = ap.parse_args()
    out: Path = args.out_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work: Path = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p), "PYTHONUNBUFFERED": "1"}

    t_start = time.perf_counter()
    manifests = build_manifests(args.data.resolve(), work / "data", args.minutes,
                                args.long_pieces)
    _write(work / "data" / "base70.parquet", _short_rows(args.data.resolve()), 64)
    print("manifests: " + ", ".join(f"{k} {v['rows']} rows {v['audio_s'] / 60:.1f} min"
                                    for k, v in manifests.items()), flush=True)
    import pyarrow.parquet as pq

    refs = {r["id"]: r["text"] for r in pq.read_table(manifests["short"]["path"],
                                                      columns=["id", "text"]).to_pylist()}
    long_refs = {r["id"]: r["text"] for r in pq.read_table(manifests["long"]["path"],
                                                           columns=["id", "text"]).to_pylist()}
    # Warm the model cache (bundle conversion, kernel JIT) so no timed run pays it.
    warm = transcribe_run("warmup_one", manifests["one"], [], args, work, env, None)
    runs: dict[str, Any] = {"warmup_one": warm}
    # Start-up with every module compiled from source, as earlier rounds' processes ran (an
    # empty bytecode cache that is not written to), beside the runs that load cached bytecode.
    source_env = dict(env, PYTHONPYCACHEPREFIX=str(work / "empty_pycache"),
                      PYTHONDONTWRITEBYTECODE="1")
    runs["one_wt_from_source"] = transcribe_run("one_wt_from_source", manifests["one"],
                                                ["--word-timestamps"], args, work, source_env,
                                                refs)
    for wt, flag in (("wt", "--word-timestamps"), ("nowt", "--no-word-timestamps")):
        runs[f"one_{wt}"] = transcribe_run(f"one_{wt}", manifests["one"], [flag], args, work,
                                           env, refs)
        runs[f"short_{wt}"] = transcribe_run(f"short_{wt}", manifests["short"], [flag], args,
                                             work, env, refs)
        if not args.skip_long:
            runs[f"long_{wt}"] = transcribe_run(f"long_{wt}", manifests["long"], [flag], args,
                                                work, env, long_refs)
        for b in filter(None, args.also_batch_sizes.split(",")):
            runs[f"short_{wt}_b{b}"] = transcribe_run(f"short_{wt}_b{b}", manifests["short"],
                                                      [flag, "-b", b], args, work, env, refs)
        if "long_many" in manifests:
            runs[f"long_many_{wt}"] = transcribe_run(f"long_many_{wt}", manifests["long_many"],
                                                     [flag], args, work, env, None)
    if args.baseline_cpu_detector:  # the same runs, the coverage detector on the CPU
        cpu = str(Path(__file__).resolve().parent / "coverage_on_cpu.py")
        for b in ["", *filter(None, args.also_batch_sizes.split(","))]:
            name = f"short_wt_cpudet{'_b' + b if b else ''}"
            runs[name] = transcribe_run(name, manifests["short"],
                                        ["--word-timestamps", *(["-b", b] if b else [])], args,
                                        work, env, refs, launcher=cpu)
        if "long_many" in manifests:
            runs["long_many_wt_cpudet"] = transcribe_run(
                "long_many_wt_cpudet", manifests["long_many"], ["--word-timestamps"], args, work,
                env, None, launcher=cpu)
    if args.also_switch_interval_ms is not None:  # the same short runs, the GIL handed over sooner
        launcher = str(Path(__file__).resolve().parent / "switch_interval.py")
        switch_env = dict(env, GIL_SWITCH_MS=str(args.also_switch_interval_ms))
        for wt, flag in (("wt", "--word-timestamps"), ("nowt", "--no-word-timestamps")):
            runs[f"short_{wt}_switch"] = transcribe_run(
                f"short_{wt}_switch", manifests["short"], [flag], args, work, switch_env, refs,
                launcher=launcher)
    if "long_many" in manifests:
        runs["long_many_wt_vad"] = transcribe_run(
            "long_many_wt_vad", manifests["long_many"], ["--word-timestamps", "--vad", "silero"],
            args, work, env, None)
        runs["long_wt_vad"] = transcribe_run(
            "long_wt_vad", manifests["long"], ["--word-timestamps", "--vad", "silero"], args,
            work, env, long_refs)
    summary = {}
    for name, r in runs.items():  # the extra arms, against the start-up of their words setting
        if name.startswith(("short_wt_b", "short_nowt_b", "long_many", "long_wt_vad",
                            "short_wt_cpudet", "short_wt_switch", "short_nowt_switch")):
            one = runs["one_nowt" if "_nowt" in name else "one_wt"]
            summary[f"{name}_steady_rtfx"] = _steady(r, one)
    summary["startup_s_wt_from_source"] = runs["one_wt_from_source"]["wall_s"]
    for wt in ("wt", "nowt"):
        one = runs[f"one_{wt}"]
        summary[f"startup_s_{wt}"] = one["wall_s"]
        for kind in ("short", "long"):
            if f"{kind}_{wt}" in runs:
                r = runs[f"{kind}_{wt}"]
                summary[f"{kind}_{wt}_process_rtfx"] = round(r["audio_s"] / r["wall_s"], 1)
                summary[f"{kind}_{wt}_steady_rtfx"] = _steady(r, one)
    bench = {} if args.no_bench else bench_run(manifests, args, work, env)
    for k, v in bench.items():
        if k.startswith("best_"):
            summary[f"bench_{k}"] = v
    prof = None if args.no_profile else profile_runs(manifests, args, out, work, env)

    import torch

    try:
        import transformers
        tf_version = transformers.__version__
    except ImportError:
        tf_version = None
    device_name = (torch.cuda.get_device_name(0) if args.device.startswith("cuda")
                   and torch.cuda.is_available() else platform.processor() or "cpu")
    report = {
        "benchmark": "gpu_transcribe_e2e",
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "device": args.device, "device_name": device_name,
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "transformers": tf_version, "cpu_count": os.cpu_count(),
                        "platform": platform.platform()},
        "method": "each `oasr transcribe` run is one subprocess timed from spawn to exit, a "
                  "fresh output each time, after one untimed 1-row warm-up run (model cache "
                  "filled); steady RTFx = audio_s / (wall(hour) - wall(1 row)); bench = `oasr "
                  "bench` (audio decoded before timing) on the same 70 utterances repeated",
        "manifests": manifests, "summary": summary, "runs": runs, "bench": bench,
        "profile": prof, "total_wall_s": round(time.perf_counter() - t_start, 1),
    }
    path = out / "gpu_transcribe_e2e.json"
    path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
