"""``oasr transcribe --gpus``: one worker process per GPU, each an ``oasr transcribe --shard i/n``.

Each worker runs with ``CUDA_VISIBLE_DEVICES`` set to its one device, so it sees ``cuda:0`` and
holds its own output lock and resumable parts. Outputs: one file per shard
(``<out-stem>.shard-i-of-n<ext>``, the name ``--shard`` itself gives in an output folder) plus a
manifest of parts, ``<out>.shards.json``, listing each shard's file and exit status. A worker
that dies is reported with its shard and exit status; rerunning the same command resumes every
unfinished shard from its parts (finished shards find all their ids done).

One progress bar and one summary: each worker runs ``--quiet`` with ``OASR_WORKER_EVENTS=1``
and writes JSON lines on its stdout (``start`` with its row count, ``row`` per finished row,
``done`` with its run's figures); the parent reads them (:func:`launch`'s ``on_event``), moves
one bar and prints one summary of every shard.

Testing only: ``OASR_GPUS_FAKE=cpu`` makes ``--gpus N`` start N CPU workers (``--device cpu``,
no CUDA device visible), so the launcher is exercised without GPUs.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oasr import envs

FAKE_ENV = envs.OASR_GPUS_FAKE.name
EVENTS_ENV = envs.OASR_WORKER_EVENTS.name


@dataclass
class ShardResult:
    """One worker's outcome."""

    shard: int
    device: str
    output: str
    returncode: int


def parse_gpus(text: str, visible: int | None = None) -> list[str]:
    """``all``, a count ``N`` or a list ``0,1`` -> device ids (strings for CUDA_VISIBLE_DEVICES).

    ``visible`` is the number of devices present (``torch.cuda.device_count()`` by default)."""
    fake = envs.gpus_fake_cpu()
    text = text.strip()
    if "," in text:
        ids = [t.strip() for t in text.split(",") if t.strip()]
        if not ids or not all(t.isdigit() for t in ids) or len(set(ids)) != len(ids):
            raise ValueError(f"--gpus {text}: expected all, a count or distinct ids like 0,1")
        return ids
    if text == "all":
        if fake:
            raise ValueError(f"--gpus all: {FAKE_ENV}=cpu needs a count, e.g. --gpus 2")
        if visible is None:
            import torch

            visible = torch.cuda.device_count()
        if visible == 0:
            raise ValueError("--gpus all: no CUDA device is visible; run without --gpus")
        return [str(k) for k in range(visible)]
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"--gpus {text}: expected all, a count >= 1 or ids like 0,1")
    return [str(k) for k in range(int(text))]


def shard_output(output: str, shard: int, n: int) -> str:
    """The ``-o`` a worker gets: an output folder is passed as is (``--shard`` names the file
    in it); a file ``out.ext`` becomes ``out.shard-i-of-n.ext``."""
    if output.endswith(("/", os.sep)) or Path(output).is_dir():
        return output
    p = Path(output)
    return str(p.with_name(f"{p.stem}.shard-{shard}-of-{n}{p.suffix}"))


def _worker_argv(argv: list[str], output: str, shard: int, n: int, fake: bool) -> list[str]:
    """The parent's ``transcribe`` arguments with -o replaced and --shard/--device added."""
    out: list[str] = []
    skip = False
    for k, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in ("-o", "--output"):
            out += [a, shard_output(argv[k + 1], shard, n)]
            skip = True
        elif a.startswith("--output="):
            out.append("--output=" + shard_output(a.split("=", 1)[1], shard, n))
        elif a in ("--gpus", "--device", "--shard"):
            skip = True
        elif a.startswith(("--gpus=", "--device=", "--shard=")):
            continue
        else:
            out.append(a)
    out += ["--shard", f"{shard}/{n}", "--device", "cpu" if fake else "cuda"]
    return out


# ------------------------------------------------------------------------------ worker events


def events_on() -> bool:
    """Whether this process is a ``--gpus`` worker that reports to its parent."""
    return envs.worker_events()


def emit(event: str, **body: Any) -> None:
    """One event line on stdout (a ``--gpus`` worker's channel to its parent)."""
    sys.stdout.write(json.dumps({"event": event, **body}) + "\n")
    sys.stdout.flush()


def emit_done(stats: Any, output: str) -> None:
    """The worker's run figures (``runner.RunStats``), for the parent's one summary."""
    emit("done", output=output, rows=stats.rows, errors=stats.errors, skipped=stats.skipped,
         audio_s=stats.audio_s, wall_s=stats.wall_s, finish_reasons=stats.finish_reasons,
         error_examples=stats.error_examples, wer_errors=stats.wer.errors,
         wer_ref_words=stats.wer.ref_words, wer_rows=stats.wer.rows,
         dispatch=[[case, name, count] for (case, name), count in stats.dispatch.items()])


def merge_done(total: Any, done: dict[str, Any]) -> None:
    """Add one worker's ``done`` figures into ``total`` (a ``runner.RunStats``)."""
    total.rows += done["rows"]
    total.errors += done["errors"]
    total.skipped += done["skipped"]
    total.audio_s += done["audio_s"]
    for reason, count in done["finish_reasons"].items():
        total.finish_reasons[reason] = total.finish_reasons.get(reason, 0) + count
    total.error_examples = (total.error_examples + done["error_examples"])[:5]
    total.wer.errors += done["wer_errors"]
    total.wer.ref_words += done["wer_ref_words"]
    total.wer.rows += done["wer_rows"]
    for case, name, count in done["dispatch"]:
        total.dispatch[(case, name)] = total.dispatch.get((case, name), 0) + count


def _read_events(shard: int, stream: Any, events: queue.Queue) -> None:
    for line in stream:
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict) and "event" in event:
            events.put((shard, event))
        else:  # not ours: pass it on
            sys.stdout.write(line)
    events.put((shard, None))  # the stream closed: the worker is gone


def launch(argv: list[str], output: str, gpus: str, echo: Callable[..., Any] = print,
           on_event: Callable[[int, dict[str, Any]], Any] | None = None) -> list[ShardResult]:
    """Start one ``oasr transcribe`` worker per device over ``argv`` (the parent's transcribe
    arguments, without the ``transcribe`` word), wait for all, write the manifest of parts.

    Workers run ``--quiet --no-progress``; their stderr (warnings, errors) is the parent's.
    Their event lines go to ``on_event(shard, event)``, called in this thread; the parent
    prints one line per finished shard."""
    if output == "-":
        raise ValueError("--gpus writes files: give -o a file or folder, not '-'")
    devices = parse_gpus(gpus)
    fake = envs.gpus_fake_cpu()
    n = len(devices)
    events: queue.Queue = queue.Queue()
    procs = []
    for i, dev in enumerate(devices):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "" if fake else dev, EVENTS_ENV: "1"}
        args = _worker_argv(argv, output, i, n, fake) + ["--no-progress", "--quiet"]
        cmd = [sys.executable, "-m", "oasr.cli.app", "transcribe", *args]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
        threading.Thread(target=_read_events, args=(i, proc.stdout, events),
                         daemon=True).start()
        procs.append((i, dev, shard_output(output, i, n), proc))
    outputs = {i: out for i, _, out, _ in procs}
    open_streams = n
    while open_streams:
        shard, event = events.get()
        if event is None:
            open_streams -= 1
            continue
        if event["event"] == "done" and event.get("output"):
            outputs[shard] = event["output"]  # the file a folder -o resolved to
        if on_event is not None:
            on_event(shard, event)
    results = []
    for i, dev, _, proc in procs:
        rc = proc.wait()
        results.append(ShardResult(i, "cpu" if fake else f"cuda:{dev}", outputs[i], rc))
        state = "done" if rc == 0 else f"FAILED (exit {rc}); rerun the same command to resume it"
        echo(f"shard {i}/{n} on {results[-1].device}: {state}")
    _write_manifest(output, n, results)
    failed = [r for r in results if r.returncode != 0]
    echo(f"{n - len(failed)} of {n} shards finished" + (
        f"; failed: {', '.join(str(r.shard) for r in failed)}" if failed else ""))
    return results


def manifest_path(output: str) -> Path:
    """``<out>.shards.json`` (an output folder: ``<folder>/shards.json``)."""
    if output.endswith(("/", os.sep)) or Path(output).is_dir():
        return Path(output) / "shards.json"
    return Path(f"{output}.shards.json")


def _write_manifest(output: str, n: int, results: list[ShardResult]) -> None:
    body = {"shards": n, "parts": [
        {"shard": r.shard, "device": r.device, "output": r.output, "returncode": r.returncode,
         "complete": r.returncode == 0} for r in results]}
    path = manifest_path(output)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
