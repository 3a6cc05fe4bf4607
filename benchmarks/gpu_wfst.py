"""The GPU WFST search (``oasr.kernels.wfst_cuda``, the ``ctc_wfst`` family's) against Kaldi's
CPU decoder (``kaldi-decoder``'s FasterDecoder), our CPU search (``oasr._C.wfst``) and, where it
imports, NVIDIA's GPU decoder (``riva-asrlib-decoder``), in one run.

The graph is a BPE-sized TLG built here (5000 units; a random lexicon of 1-6 units a word and a
trigram over Zipf-distributed random sentences: the shape of a real one, not its words); the
posteriors are peaked like a trained model's (blank on most frames). B utterances of T frames.

Reported: graph size and build time; per decoder the wall time for the batch (median of --reps
after a warm-up; kaldi-decoder runs one utterance at a time on one core and is timed on
--kaldi-rows rows, scaled to B) and its agreement with kaldi-decoder's one-best (the fraction of
rows with the same words; the GPU and CPU searches must agree exactly where max_active does not
bind). riva decodes a lattice (lattice_beam) and reports its MBR words (``decode_mbr``); their
agreement is measured the same way. Usage (under a minute on an H100 host; most of it the graph
build):

    PYTHONPATH=$PWD python benchmarks/gpu_wfst.py --out $OUT/gpu_wfst.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oasr.graphs.search import SearchOptions, decode_rows  # noqa: E402
from oasr.graphs.store import load_graph  # noqa: E402
from tests.graphs.helpers import build_random_graph, kaldi_best  # noqa: E402


def peaked_log_probs(seed: int, b: int, t: int, v: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=gen) * 2.0
    logits[..., 0] += 6.0  # blank leads on most frames
    spikes = torch.randint(1, v, (b, t), generator=gen)
    on = torch.rand(b, t, generator=gen) < 0.3
    logits[on, spikes[on]] += 9.0
    return torch.log_softmax(logits, -1)


def median_s(fn, reps: int) -> float:
    fn()  # warm-up (graph upload, first launch)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def riva_rows(graph_path: Path, lp: torch.Tensor, lens: torch.Tensor, opts: SearchOptions,
              reps: int, wide: bool = False) -> dict:
    """riva-asrlib-decoder's batched GPU decoder on the same graph and posteriors, or why not:
    its one-best (``decode_nbest`` with nbest 1: the lattice's best path, word ids) and its
    minimum-Bayes-risk words (``decode_mbr``, word strings), each timed."""
    try:
        from riva.asrlib.decoder.python_decoder import (
            BatchedMappedDecoderCuda,
            BatchedMappedDecoderCudaConfig,
        )
    except Exception as exc:  # an absent or broken wheel is reported, not fatal
        return {"status": f"not run: {type(exc).__name__}: {exc}"}
    config = BatchedMappedDecoderCudaConfig()
    config.n_input_per_chunk = 50
    dec = config.online_opts.decoder_opts
    # ``wide``: a wider beam and more tokens than ours, to tell a pruning difference (the
    # one-best moves toward ours) from a different search problem (it does not).
    dec.default_beam = opts.beam + 8.0 if wide else opts.beam
    dec.lattice_beam = 1.0
    dec.max_active = 4 * opts.max_active if wide else opts.max_active
    # No penalties: the search is then the plain Viterbi one kaldi-decoder and ours run.
    dec.blank_penalty = 0.0
    dec.length_penalty = 0.0
    dec.blank_ilabel = 1  # unit 0 (the blank) on input label 1
    config.online_opts.determinize_lattice = True
    config.online_opts.max_batch_size = int(lp.shape[0])
    config.online_opts.num_channels = 2 * int(lp.shape[0])
    config.online_opts.frame_shift_seconds = 0.04
    post = config.online_opts.lattice_postprocessor_opts
    post.acoustic_scale = 1.0
    post.lm_scale = 1.0
    post.word_ins_penalty = 0.0
    post.nbest = 1
    words = graph_path.with_name(graph_path.stem + ".words.txt")
    try:
        decoder = BatchedMappedDecoderCuda(config, str(graph_path), str(words), int(lp.shape[2]))
        x = lp.cuda().float().contiguous()
        n = lens.to(torch.long).cpu().contiguous()
        nbest = decoder.decode_nbest(x, n)
        nbest_s = median_s(lambda: decoder.decode_nbest(x, n), reps)
        mbr = decoder.decode_mbr(x, n)
        mbr_s = median_s(lambda: decoder.decode_mbr(x, n), reps)
    except Exception as exc:
        return {"status": f"failed: {type(exc).__name__}: {exc}"}
    return {"status": "ok", "beam": dec.default_beam, "max_active": dec.max_active,
            "seconds": nbest_s, "mbr_seconds": mbr_s,
            "word_ids": [list(r[0].words) if len(r) else [] for r in nbest],
            "scores": [float(r[0].score) if len(r) else None for r in nbest],
            "mbr_words": [[w[0] for w in sent] for sent in mbr]}


def word_errors(hyps: list[list], refs: list[list]) -> float:
    """Word edits / reference words over the rows (rapidfuzz's Levenshtein: jiwer's)."""
    from rapidfuzz.distance import Levenshtein

    edits = sum(Levenshtein.distance(r, h) for h, r in zip(hyps, refs))
    return edits / max(1, sum(map(len, refs)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="JSON results path")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--units", type=int, default=5000)
    ap.add_argument("--words", type=int, default=10000)
    ap.add_argument("--sentences", type=int, default=16000)
    ap.add_argument("--beam", type=float, default=12.0)
    ap.add_argument("--max-active", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--kaldi-rows", type=int, default=4)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA device")
    from oasr.kernels import wfst_cuda

    result: dict = {"device": torch.cuda.get_device_name(0), "cpu_cores": os.cpu_count(),
                    **{k: v for k, v in vars(args).items() if k != "out"}}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = build_random_graph(Path(tmp), "bench", seed=0, num_units=args.units,
                                  num_words=args.words, num_sentences=args.sentences)
        graph = load_graph(path)
        result["graph"] = {"states": graph.graph.num_states, "arcs": graph.graph.num_arcs,
                           "build_s": time.perf_counter() - t0}
        print(json.dumps(result["graph"]), flush=True)

        lp = peaked_log_probs(0, args.batch, args.frames, args.units)
        lens = torch.full((args.batch,), args.frames, dtype=torch.int64)
        lens[1::2] -= torch.arange(args.batch // 2) * (args.frames // (2 * args.batch))
        opts = SearchOptions(beam=args.beam, max_active=args.max_active, min_active=200)
        lp_np = lp.numpy()

        k = min(args.kaldi_rows, args.batch)
        t0 = time.perf_counter()
        kaldi = [kaldi_best(path, lp_np[b, :int(lens[b])], beam=args.beam,
                            max_active=args.max_active, min_active=200) for b in range(k)]
        kaldi_s = (time.perf_counter() - t0) * args.batch / k
        ref = [p.words for p in kaldi]

        def agree(words_per_row) -> float:
            return sum(list(w) == r for w, r in zip(words_per_row, ref)) / k

        lpd, lensd = lp.cuda(), lens.cuda()
        gpu = wfst_cuda.decode(lpd, lensd, graph, opts)
        gpu_s = median_s(lambda: wfst_cuda.decode(lpd, lensd, graph, opts), args.reps)
        cpu_rows = {}
        for threads in sorted({2, os.cpu_count() or 1}):
            t0 = time.perf_counter()  # one run: the CPU search has no warm-up to amortise
            cpu = decode_rows(graph.graph.native(), lp_np, lens.numpy(), opts,
                              num_threads=threads)
            cpu_rows[threads] = {"seconds": time.perf_counter() - t0,
                                 "agree_kaldi": agree([p.words.tolist() for p in cpu])}
        gpu_words = [p.words.tolist() for p in gpu]
        result["decoders"] = {
            "kaldi_decoder_1core": {"seconds": kaldi_s, "timed_rows": k},
            "oasr_cpu": {str(t): v for t, v in cpu_rows.items()},
            "oasr_gpu": {"seconds": gpu_s, "agree_kaldi": agree(gpu_words),
                         "same_as_cpu": sum(g == c.words.tolist() for g, c in
                                            zip(gpu_words, cpu)) / args.batch},
        }
        for name, wide in (("riva_asrlib_decoder", False), ("riva_asrlib_decoder_wide", True)):
            riva = riva_rows(path, lp, lens, opts, args.reps, wide)
            if riva.get("status") == "ok":
                ids = graph.words.ids
                one_best = [[int(w) for w in ws] for ws in riva.pop("word_ids")]
                mbr = [[ids.get(w, -1) for w in ws] for ws in riva.pop("mbr_words")]
                scores = riva.pop("scores")
                differ = [b for b in range(args.batch) if one_best[b] != gpu_words[b]]
                riva.update(
                    agree_kaldi=agree(one_best), mbr_agree_kaldi=agree(mbr),
                    # Every row against ours (equal to kaldi-decoder where both ran): the WER
                    # between the two GPU decoders; where they differ, each path's score
                    # (riva's as it reports it, ours a cost: graph + acoustic), to tell which
                    # search found the better path.
                    same_as_oasr_gpu=1 - len(differ) / args.batch,
                    wer_vs_oasr_gpu=word_errors(one_best, gpu_words),
                    mbr_wer_vs_oasr_gpu=word_errors(mbr, gpu_words),
                    rows=[{"row": b, "oasr_gpu": gpu_words[b], "oasr_cost": gpu[b].cost,
                           "riva_one_best": one_best[b], "riva_score": scores[b],
                           "riva_mbr": mbr[b]} for b in differ[:6]])
            result["decoders"][name] = riva
    result["speedup_gpu_vs_kaldi_1core"] = kaldi_s / gpu_s
    result["speedup_gpu_vs_kaldi_2cores_est"] = kaldi_s / 2 / gpu_s
    print(json.dumps(result, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
