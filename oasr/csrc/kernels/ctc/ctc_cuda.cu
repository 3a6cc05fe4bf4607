// libctc_cuda: the GPU CTC prefix beam search's launchers (extern "C", raw pointers, a stream;
// each returns a cudaError_t as int). Built by oasr/kernels/jit.py from its spec in oasr/ops/build.py.
#include <cstdint>

#include "common/api.cuh"
#include "common/signatures.cuh"
#include "ctc/beam_state.cuh"
#include "ctc/prefix_beam.cuh"
#include "ctc/topk.cuh"

namespace oasr::kernels::ctc {
namespace {

__global__ void reset_kernel(BeamPool pool, const int32_t* __restrict__ slots, int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= n) return;
  const int slot = slots[r];
  SlotScalars sc{};
  sc.live = 1;
  sc.trie_size = 1;
  sc.last_skipped = -1;
  sc.last_best = -1;
  pool.scalars[slot] = sc;
  const int64_t base = static_cast<int64_t>(slot) * pool.capacity;
  pool.trie_parent[base] = -1;
  pool.trie_token[base] = -1;
  pool.trie_child[base] = -1;
  BeamEntry root;
  root.pb = 0.0;
  root.pnb = -CUDART_INF;
  root.vb = 0.0;
  root.vnb = 0.0;
  root.total = 0.0;
  root.node = 0;
  root.parent = -1;
  root.token = -1;
  root.frames_b = root.frames_nb = -1;
  pool.beam[static_cast<int64_t>(slot) * pool.beam_size] = root;
}

// The prefetch of one frame's FrameTop: thread q < k holds entry q, thread 32 the scalars.
struct FrameRegs {
  int32_t id;
  float val, next;
  int32_t count;
  float blank_lp;
};

__device__ __forceinline__ FrameRegs load_frame(const FrameTops& tops, int64_t fo, int k) {
  const int tid = threadIdx.x;
  FrameRegs r{};
  if (tid < k) {
    r.id = tops.ids[fo * k + tid];
    r.val = tops.vals[fo * k + tid];
    r.next = tops.next[fo * k + tid];
  } else if (tid == 32) {
    r.count = tops.count[fo];
    r.blank_lp = tops.blank_lp[fo];
  }
  return r;
}

__device__ __forceinline__ void store_frame(FrameTop& f, const FrameRegs& r, int k) {
  const int tid = threadIdx.x;
  if (tid < k) {
    f.ids[tid] = r.id;
    f.vals[tid] = r.val;
    f.next[tid] = r.next;
  } else if (tid == 32) {
    f.count = r.count;
    f.blank_lp = r.blank_lp;
  }
}

__global__ void __launch_bounds__(kBeamThreads)
chunk_kernel(BeamPool pool, const int32_t* __restrict__ slots, const float* __restrict__ lp,
             const int64_t* __restrict__ lens, int T, int V, FrameTops tops, int k, int blank,
             double skip_threshold) {
  __shared__ StepShared s;
  __shared__ SlotScalars sc;
  const int tid = threadIdx.x;
  const int r = blockIdx.x;
  const int slot = slots[r];
  const int64_t given = lens[r];
  const int len = (given < 0 || given > T) ? 0 : static_cast<int>(given);
  const int64_t sb = static_cast<int64_t>(slot) * pool.beam_size;
  const int64_t base = static_cast<int64_t>(slot) * pool.capacity;
  const float* row = lp + static_cast<int64_t>(r) * T * V;
  const int64_t fo0 = static_cast<int64_t>(r) * T;

  if (tid == 0) {
    sc = pool.scalars[slot];
    if (given < 0 || given > T) sc.error = kBadLength;
    s.n_finite = 0;
    s.n_pass = 0;
    s.theta = -1;
    s.pend_count = 0;
  }
  FrameRegs pre{};
  if (len > 0) pre = load_frame(tops, fo0, k);
  __syncthreads();
  if (tid < sc.live) s.cur[0][tid] = pool.beam[sb + tid];
  if (tid == 0) s.n_cur = sc.live;
  if (len > 0) {
    store_frame(s.top[0], pre, k);
    // Posteriors of the previous chunk's last frame wait for this chunk's first frame.
    if (tid < sc.pending_count) {
      float* fl = pool.frame_lp + base + pool.pending_node[sb + tid];
      *fl = fmaxf(*fl, row[pool.pending_tok[sb + tid]]);
    }
    // A skipped frame at the end of the last chunk, kept for a replay here.
    if (sc.prev_skipped && tid < sc.saved_count) {
      s.saved.ids[tid] = pool.saved_ids[sb + tid];
      s.saved.vals[tid] = pool.saved_vals[sb + tid];
      s.saved.next[tid] = row[pool.saved_ids[sb + tid]];
    }
    if (tid == 0) s.saved.count = sc.saved_count;
  }
  __syncthreads();

  // Every thread tracks the skip state alike, so deciding a frame needs no barrier.
  const bool skipping = skip_threshold < 1.0;
  bool prev_skipped = sc.prev_skipped != 0;
  int last_skipped = sc.last_skipped;
  int last_best = sc.last_best;
  int buf = 0;
  for (int t = 0; t < len; ++t) {
    const FrameTop& top = s.top[t & 1];
    if (t + 1 < len) pre = load_frame(tops, fo0 + t + 1, k);
    const int t_abs = sc.next_frame + t;
    const bool skip = skipping && exp(static_cast<double>(top.blank_lp)) > skip_threshold;
    if (skip) {
      if (tid < top.count) {
        s.saved.ids[tid] = top.ids[tid];
        s.saved.vals[tid] = top.vals[tid];
        s.saved.next[tid] = top.next[tid];
      }
      if (tid == 0) s.saved.count = top.count;
      prev_skipped = true;
      last_skipped = t_abs;
    } else {
      const int best = top.count > 0 ? top.ids[0] : 0;
      if (prev_skipped && best != blank && best == last_best) {
        beam_step(s, sc, buf, pool, slot, s.saved, last_skipped, true, blank);
      }
      beam_step(s, sc, buf, pool, slot, top, t_abs, t + 1 < len, blank);
      last_best = top.count > 0 ? top.ids[0] : -1;
      prev_skipped = false;
    }
    // Frame t + 1's buffer was last read in frame t - 1, which ended with a barrier.
    if (t + 1 < len) store_frame(s.top[(t + 1) & 1], pre, k);
    __syncthreads();
  }

  if (len == 0) {
    if (tid == 0) pool.scalars[slot].error = sc.error;
    return;
  }
  if (prev_skipped && tid < s.saved.count) {
    pool.saved_ids[sb + tid] = s.saved.ids[tid];
    pool.saved_vals[sb + tid] = s.saved.vals[tid];
  }
  if (tid < s.n_cur) pool.beam[sb + tid] = s.cur[buf][tid];
  if (tid < s.pend_count) {
    pool.pending_node[sb + tid] = s.pend_node[tid];
    pool.pending_tok[sb + tid] = s.pend_tok[tid];
  }
  if (tid == 0) {
    sc.prev_skipped = prev_skipped;
    sc.last_skipped = last_skipped;
    sc.last_best = last_best;
    sc.saved_count = prev_skipped ? s.saved.count : 0;
    sc.live = s.n_cur;
    sc.pending_count = s.pend_count;
    sc.next_frame += len;
    pool.scalars[slot] = sc;
  }
}

// Per (row, rank): the hypothesis read off the trie and the frame arena, tokens in order.
__global__ void finalize_kernel(BeamPool pool, const int32_t* __restrict__ slots, int nbest,
                                int max_len, int32_t* __restrict__ counts,
                                int32_t* __restrict__ lengths, double* __restrict__ scores,
                                int32_t* __restrict__ tokens, int32_t* __restrict__ frames,
                                float* __restrict__ post_lp) {
  const int row = blockIdx.x, rank = threadIdx.x;
  const int slot = slots[row];
  const SlotScalars sc = pool.scalars[slot];
  const int n = sc.live < nbest ? sc.live : nbest;
  if (rank == 0) counts[row] = sc.error ? -sc.error : n;
  if (rank >= n || sc.error) return;
  const BeamEntry h = pool.beam[static_cast<int64_t>(slot) * pool.beam_size + rank];
  const int64_t base = static_cast<int64_t>(slot) * pool.capacity;
  const int64_t out = static_cast<int64_t>(row) * nbest + rank;
  int len = 0;
  for (int node = h.node; node > 0; node = pool.trie_parent[base + node]) ++len;
  int flen = 0;
  const int32_t head = best_frames(h);
  for (int f = head; f >= 0; f = pool.frame_prev[base + f]) ++flen;
  scores[out] = h.total;
  if (flen != len) {
    lengths[out] = -kLostFrames;
    return;
  }
  if (len > max_len) {
    lengths[out] = -100 - len;
    return;
  }
  lengths[out] = len;
  int i = len - 1;
  for (int node = h.node; node > 0; node = pool.trie_parent[base + node], --i) {
    tokens[out * max_len + i] = pool.trie_token[base + node];
  }
  i = len - 1;
  for (int f = head; f >= 0; f = pool.frame_prev[base + f], --i) {
    frames[out * max_len + i] = pool.frame_t[base + f];
    post_lp[out * max_len + i] = pool.frame_lp[base + f];
  }
}

}  // namespace
}  // namespace oasr::kernels::ctc

using namespace oasr::kernels::ctc;

OASR_API int oasr_ctc_sizes(int* beam_entry_bytes, int* slot_scalars_bytes, int* max_beam) {
  *beam_entry_bytes = static_cast<int>(sizeof(BeamEntry));
  *slot_scalars_bytes = static_cast<int>(sizeof(SlotScalars));
  *max_beam = kMaxBeam;
  return 0;
}

OASR_API int oasr_ctc_reset(const BeamPool* pool, const int32_t* slots, int n,
                            cudaStream_t stream) {
  if (n <= 0) return 0;
  reset_kernel<<<(n + 127) / 128, 128, 0, stream>>>(*pool, slots, n);
  OASR_RETURN_LAST_ERROR();
}

// One chunk: each row's frames' top tokens (workspace `tops`, (rows, T, k) and (rows, T)),
// then each row's slot continues its beam over them.
OASR_API int oasr_ctc_chunk(const BeamPool* pool, const int32_t* slots, int rows,
                            const float* lp, const int64_t* lens, int T, int V,
                            const FrameTops* tops, int k, int blank, double skip_threshold,
                            cudaStream_t stream) {
  if (rows <= 0) return 0;
  if (pool->beam_size < 1 || pool->beam_size > kMaxBeam || k < 1 || k > kMaxBeam) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (T > 0) {
    frame_topk_kernel<<<dim3(T, rows), kTopkThreads, 0, stream>>>(lp, lens, T, V, k, blank,
                                                                  *tops);
    OASR_CUDA_TRY(cudaGetLastError());
  }
  chunk_kernel<<<rows, kBeamThreads, 0, stream>>>(*pool, slots, lp, lens, T, V, *tops, k,
                                                  blank, skip_threshold);
  OASR_RETURN_LAST_ERROR();
}

OASR_API int oasr_ctc_finalize(const BeamPool* pool, const int32_t* slots, int rows, int nbest,
                               int max_len, int32_t* counts, int32_t* lengths, double* scores,
                               int32_t* tokens, int32_t* frames, float* post_lp,
                               cudaStream_t stream) {
  if (rows <= 0) return 0;
  if (nbest < 1 || nbest > kMaxBeam) return static_cast<int>(cudaErrorInvalidValue);
  finalize_kernel<<<rows, 32, 0, stream>>>(*pool, slots, nbest, max_len, counts, lengths,
                                           scores, tokens, frames, post_lp);
  OASR_RETURN_LAST_ERROR();
}

OASR_EXPORT_SIGNATURES(ctc_cuda, OASR_SIGNATURE(oasr_ctc_sizes), OASR_SIGNATURE(oasr_ctc_reset),
                       OASR_SIGNATURE(oasr_ctc_chunk), OASR_SIGNATURE(oasr_ctc_finalize))
