// The per-stream state of the GPU CTC prefix beam search. Framework-free CUDA C++.
//
// Streams live in a pool of slots; every array below is indexed by slot first. A chunk of
// frames continues a slot's beam in place, so a streaming decoder and an offline batch run the
// same kernel (offline is one chunk per slot). A prefix is a node of the slot's token trie and
// its best path's emitting frames a linked list in the slot's frame arena, both append-only
// with `capacity` entries, as in the CPU search (oasr/csrc/host/ctc/prefix_beam.cc). As there, a token
// sequence has one node for the whole stream: a prefix returning to the beam finds its old
// node through its parent's child list, so its live extensions are found from it again.
#pragma once

#include <cstdint>

namespace oasr::kernels::ctc {

// One beam entry: the CPU search's Prefix (pending fields resolved at the end of each frame).
struct BeamEntry {
  double pb, pnb;   // log-add-exp over paths ending in blank / in the last token
  double vb, vnb;   // the same two path sets, max instead of sum
  double total;     // log_add(pb, pnb), NaN as -inf
  int32_t node;     // trie node
  int32_t parent;   // the node it extends
  int32_t token;    // its last token; -1 for the empty prefix
  int32_t frames_b, frames_nb;  // frame-arena heads of the two best paths
};

// Per slot, what carries a beam from one chunk to the next besides the arenas.
struct SlotScalars {
  int32_t live;           // beam entries in use
  int32_t trie_size;      // trie nodes used (node 0 is the root)
  int32_t frame_size;     // frame nodes used
  int32_t next_frame;     // absolute index of the slot's next frame
  int32_t prev_skipped;   // the last frame seen was skipped
  int32_t last_skipped;   // absolute index of the last skipped frame
  int32_t last_best;      // top id of the last decoded frame (-1: none)
  int32_t saved_count;    // top-k of the last skipped frame when it lies in an earlier chunk
  int32_t pending_count;  // frame nodes of the last decoded frame awaiting frame t + 1
  int32_t error;          // nonzero: an arena overflowed (the slot's results are void)
};

struct BeamPool {
  BeamEntry* beam;        // [slots, beam]
  SlotScalars* scalars;   // [slots]
  int32_t* trie_parent;   // [slots, capacity]
  int32_t* trie_token;    // [slots, capacity]
  int32_t* trie_child;    // [slots, capacity]: a node's latest child (-1: none)
  int32_t* trie_sibling;  // [slots, capacity]: the child made before it under the same parent
  int32_t* frame_prev;    // [slots, capacity]
  int32_t* frame_t;       // [slots, capacity]
  float* frame_lp;        // [slots, capacity]: the token's max log-prob over frames t, t + 1
  int32_t* saved_ids;     // [slots, beam]
  float* saved_vals;      // [slots, beam]
  int32_t* pending_node;  // [slots, beam]
  int32_t* pending_tok;   // [slots, beam]
  int32_t capacity;
  int32_t beam_size;
};

enum SlotError : int32_t {
  kOk = 0,
  kTrieFull = 1,
  kFramesFull = 2,
  kLostFrames = 3,
  kBadLength = 4,
};

}  // namespace oasr::kernels::ctc
