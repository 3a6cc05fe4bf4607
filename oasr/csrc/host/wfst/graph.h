// A decoding graph as flat arrays (CSR), and an on-the-fly boosting automaton over its output
// labels. Framework-free C++17; the arrays are owned by the caller.
//
// Graph: a tropical-semiring WFST (weights are costs, -log). Input label 0 is epsilon; an input
// label k > 0 consumes one frame and scores log_probs[frame][k - 1] (Kaldi's CTC convention:
// token ids shifted by one). Each state's arcs are split into its emitting arcs and its epsilon
// arcs, each half in the order the FST lists them.
#pragma once

#include <cstdint>

namespace oasr::wfst {

struct GraphView {
  int32_t num_states = 0;
  int32_t start = 0;
  const float* final_cost = nullptr;     // (S,), +inf where the state is not final
  const int64_t* emit_offsets = nullptr;  // (S + 1,)
  const int32_t* emit_ilabel = nullptr;
  const int32_t* emit_olabel = nullptr;
  const float* emit_weight = nullptr;
  const int32_t* emit_next = nullptr;
  const int64_t* eps_offsets = nullptr;  // (S + 1,)
  const int32_t* eps_olabel = nullptr;
  const float* eps_weight = nullptr;
  const int32_t* eps_next = nullptr;
};

// A deterministic automaton over output labels, walked beside the graph: a token carries its
// node, every arc with an output label moves it and adds a cost (a negative cost is a bonus).
// Per node, the labels with their own transition are listed sorted; any other label goes to
// node 0 at the node's default cost. A token ending in a node pays its final cost.
struct BoostView {
  int32_t num_nodes = 0;
  const int64_t* offsets = nullptr;  // (N + 1,)
  const int32_t* labels = nullptr;   // sorted within a node
  const float* cost = nullptr;
  const int32_t* next = nullptr;
  const float* default_cost = nullptr;  // (N,)
  const float* final_cost = nullptr;    // (N,)

  // The node after `label` from `node`, and the cost of the step.
  void step(int32_t node, int32_t label, int32_t* to, float* step_cost) const {
    const int32_t* lo = labels + offsets[node];
    const int32_t* hi = labels + offsets[node + 1];
    while (lo < hi) {  // lower bound
      const int32_t* mid = lo + (hi - lo) / 2;
      if (*mid < label) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo != labels + offsets[node + 1] && *lo == label) {
      const int64_t i = lo - labels;
      *to = next[i];
      *step_cost = cost[i];
    } else {
      *to = 0;
      *step_cost = default_cost[node];
    }
  }
};

}  // namespace oasr::wfst
