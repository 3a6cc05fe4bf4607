"""``oasr bench``: measuring our engine, and peers on the same audio, at each batch size."""

from oasr.bench.peers import PEERS, build_peer
from oasr.bench.runner import BenchClip, BenchResult, bench_ours, bench_peer, read_clips

__all__ = ["PEERS", "BenchClip", "BenchResult", "bench_ours", "bench_peer", "build_peer",
           "read_clips"]
