// libwfst_cuda: the batched WFST token passing (extern "C", raw pointers, the stream last; each
// returns a cudaError_t as int). One CTA per utterance runs oasr::wfst::RowSearch
// (token_passing.cuh) with the block executor below. Built by oasr/kernels/jit.py from its spec
// in oasr/ops/build.py.
#include <cstdint>

#include "common/api.cuh"
#include "common/signatures.cuh"
#include "wfst/token_passing.cuh"

using namespace oasr::wfst;

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

struct BlockExec {
  double* red;      // (kWarps,)
  int32_t* warps;   // (kWarps,)

  template <class F>
  __device__ void each(int64_t n, F&& f) const {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) f(i);
  }
  __device__ void sync() const { __syncthreads(); }
  template <class F>
  __device__ void one(F&& f) const {
    if (threadIdx.x == 0) f();
  }
  // The minimum of f(i), i < n, on every thread.
  template <class F>
  __device__ double reduce_min(int64_t n, F&& f) const {
    double m = kInf;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const double v = f(i);
      if (v < m) m = v;
    }
    for (int off = 16; off > 0; off >>= 1) {
      const double o = __shfl_xor_sync(kFull, m, off);
      if (o < m) m = o;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < kWarps; ++w) m = red[w] < m ? red[w] : m;
    __syncthreads();  // red is reused by the next reduction
    return m;
  }
  // out[i] = deg(0) + ... + deg(i - 1) for i <= n, a block's worth at a time; the total on
  // every thread.
  template <class F>
  __device__ int32_t scan(int64_t n, int32_t* out, F&& deg) const {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int32_t carry = 0;
    for (int64_t base = 0; base < n; base += blockDim.x) {
      const int64_t i = base + threadIdx.x;
      const int32_t v = i < n ? deg(i) : 0;
      int32_t x = v;
      for (int off = 1; off < 32; off <<= 1) {
        const int32_t y = __shfl_up_sync(kFull, x, off);
        if (lane >= off) x += y;
      }
      if (lane == 31) warps[warp] = x;
      __syncthreads();
      if (warp == 0) {
        int32_t w = lane < kWarps ? warps[lane] : 0;
        for (int off = 1; off < 32; off <<= 1) {
          const int32_t y = __shfl_up_sync(kFull, w, off);
          if (lane >= off) w += y;
        }
        if (lane < kWarps) warps[lane] = w;
      }
      __syncthreads();
      if (i < n) out[i] = carry + (warp > 0 ? warps[warp - 1] : 0) + x - v;
      carry += warps[kWarps - 1];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[n] = carry;
    __syncthreads();
    return carry;
  }
  __device__ static int32_t atomic_add(int32_t* p, int32_t v) { return atomicAdd(p, v); }
  __device__ static void atomic_or(int32_t* p, int32_t v) { atomicOr(p, v); }
  __device__ static int32_t atomic_exch(int32_t* p, int32_t v) { return atomicExch(p, v); }
  __device__ static uint64_t atomic_min(uint64_t* p, uint64_t v) {
    return static_cast<uint64_t>(atomicMin(reinterpret_cast<unsigned long long*>(p),
                                           static_cast<unsigned long long>(v)));
  }
  __device__ static void atomic_min_i32(int32_t* p, int32_t v) { atomicMin(p, v); }
};

}  // namespace

// What a batch's launch reads and writes; per-row regions are strided by row. The binding
// (oasr/kernels/wfst_cuda.py) mirrors this layout as a ctypes Structure.
struct WfstBatch {
  const float* log_probs;    // (B, T, V)
  const int32_t* frames;     // (B, N) the frames each row decodes, in order
  const int32_t* num_frames; // (B,)
  uint64_t* key;             // (B, S) kEmptyKey
  uint64_t* bp;              // (B, S) kNoBackpointer
  int32_t* slot;             // (B, S) -1
  int32_t* stamp;            // (B, S) 0
  int32_t* ints;             // (B, 8 * capacity + 1)
  double* costs;             // (B, 2 * capacity)
  float* fkeys;              // (B, capacity)
  int32_t* arena;            // (B, 2 * arena)
  int32_t* path;             // (B, path_capacity) the best path's arcs, last first
  int32_t* path_length;      // (B,)
  double* path_cost;         // (B,)
  int32_t* status;           // (B,)
  int32_t B, T, N, V, capacity, arena_size, path_capacity, pad;
};

__global__ void __launch_bounds__(kThreads) wfst_decode_kernel(Graph g, Search opt, WfstBatch a) {
  __shared__ double red[kWarps];
  __shared__ int32_t warps[kWarps];
  __shared__ Shared sh;
  const int64_t b = blockIdx.x;
  const int64_t S = g.num_states, C = a.capacity;
  int32_t* p = a.ints + b * (8 * C + 1);
  RowBuffers buf{a.key + b * S, a.bp + b * S, a.slot + b * S, a.stamp + b * S,
                 {p, p + C}, {a.costs + b * 2 * C, a.costs + b * 2 * C + C},
                 {p + 2 * C, p + 3 * C}, p + 4 * C, {p + 5 * C + 1, p + 6 * C + 1},
                 p + 7 * C + 1, a.fkeys + b * C, a.arena + b * 2 * a.arena_size,
                 a.arena + b * 2 * a.arena_size + a.arena_size, a.capacity, a.arena_size};
  RowIO io{a.log_probs + b * a.T * a.V, a.frames + b * a.N, a.num_frames[b], a.V,
           a.path + b * a.path_capacity, a.path_capacity, a.path_length + b, a.path_cost + b,
           a.status + b};
  BlockExec ex{red, warps};
  RowSearch<BlockExec>{g, opt, buf, io, ex, sh}.run();
}

OASR_API int oasr_wfst_decode(const Graph* graph, const Search* search, const WfstBatch* batch,
                              cudaStream_t stream) {
  if (batch->B <= 0) return 0;
  if (batch->capacity < 1 || batch->arena_size < 1 || batch->path_capacity < 1) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  wfst_decode_kernel<<<batch->B, kThreads, 0, stream>>>(*graph, *search, *batch);
  OASR_RETURN_LAST_ERROR();
}

// The structs' sizes as this library was built, for the binding to check its mirror.
OASR_API int oasr_wfst_sizes(int32_t* graph, int32_t* search, int32_t* batch) {
  *graph = static_cast<int32_t>(sizeof(Graph));
  *search = static_cast<int32_t>(sizeof(Search));
  *batch = static_cast<int32_t>(sizeof(WfstBatch));
  return 0;
}

OASR_EXPORT_SIGNATURES(wfst_cuda, OASR_SIGNATURE(oasr_wfst_decode),
                       OASR_SIGNATURE(oasr_wfst_sizes))
