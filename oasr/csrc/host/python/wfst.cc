// oasr._C.wfst: thin pybind11 bindings over oasr/csrc/host/wfst (the CPU WFST decoder).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ctc/parallel_impl.h"
#include "wfst/faster_decoder.h"
#include "wfst/token_passing.cuh"

namespace py = pybind11;
using oasr::wfst::BestPath;
using oasr::wfst::BoostView;
using oasr::wfst::DecoderOptions;
using oasr::wfst::FasterDecoder;
using oasr::wfst::GraphView;

namespace {

using F32 = py::array_t<float, py::array::c_style | py::array::forcecast>;
using I32 = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using I64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

void need(bool ok, const std::string& what) {
  if (!ok) throw py::value_error("wfst: " + what);
}

// The graph's arrays, kept alive as long as a decoder may read them.
struct Graph {
  F32 final_cost;
  I64 emit_offsets;
  I32 emit_ilabel, emit_olabel, emit_next;
  F32 emit_weight;
  I64 eps_offsets;
  I32 eps_olabel, eps_next;
  F32 eps_weight;
  GraphView view;
  int32_t max_ilabel = 0;

  Graph(int32_t start, F32 final_cost_, I64 emit_offsets_, I32 emit_ilabel_, I32 emit_olabel_,
        F32 emit_weight_, I32 emit_next_, I64 eps_offsets_, I32 eps_olabel_, F32 eps_weight_,
        I32 eps_next_)
      : final_cost(std::move(final_cost_)), emit_offsets(std::move(emit_offsets_)),
        emit_ilabel(std::move(emit_ilabel_)), emit_olabel(std::move(emit_olabel_)),
        emit_next(std::move(emit_next_)), emit_weight(std::move(emit_weight_)),
        eps_offsets(std::move(eps_offsets_)), eps_olabel(std::move(eps_olabel_)),
        eps_next(std::move(eps_next_)), eps_weight(std::move(eps_weight_)) {
    const py::ssize_t S = final_cost.size();
    need(S >= 1, "the graph has no states");
    need(start >= 0 && start < S, "the start state is outside the graph");
    need(emit_offsets.size() == S + 1 && eps_offsets.size() == S + 1,
         "emit_offsets and eps_offsets must be (num_states + 1,)");
    const py::ssize_t E = emit_ilabel.size(), N = eps_olabel.size();
    need(emit_olabel.size() == E && emit_weight.size() == E && emit_next.size() == E,
         "the emitting arc arrays differ in length");
    need(eps_weight.size() == N && eps_next.size() == N,
         "the epsilon arc arrays differ in length");
    const int64_t* eo = emit_offsets.data();
    const int64_t* no = eps_offsets.data();
    need(eo[0] == 0 && eo[S] == E && no[0] == 0 && no[S] == N,
         "the arc offsets do not cover the arc arrays");
    for (py::ssize_t s = 0; s < S; ++s) {
      need(eo[s] <= eo[s + 1] && no[s] <= no[s + 1], "the arc offsets are not ascending");
    }
    const int32_t* il = emit_ilabel.data();
    const int32_t* en = emit_next.data();
    for (py::ssize_t a = 0; a < E; ++a) {
      need(il[a] >= 1, "an emitting arc has an input label < 1");
      need(en[a] >= 0 && en[a] < S, "an arc leads outside the graph");
      max_ilabel = std::max(max_ilabel, il[a]);
    }
    const int32_t* nn = eps_next.data();
    for (py::ssize_t a = 0; a < N; ++a) need(nn[a] >= 0 && nn[a] < S, "an arc leads outside the graph");
    view.num_states = static_cast<int32_t>(S);
    view.start = start;
    view.final_cost = final_cost.data();
    view.emit_offsets = eo;
    view.emit_ilabel = il;
    view.emit_olabel = emit_olabel.data();
    view.emit_weight = emit_weight.data();
    view.emit_next = en;
    view.eps_offsets = no;
    view.eps_olabel = eps_olabel.data();
    view.eps_weight = eps_weight.data();
    view.eps_next = nn;
  }
};

struct Boosting {
  I64 offsets;
  I32 labels, next;
  F32 cost, default_cost, final_cost;
  BoostView view;

  Boosting(I64 offsets_, I32 labels_, F32 cost_, I32 next_, F32 default_cost_, F32 final_cost_)
      : offsets(std::move(offsets_)), labels(std::move(labels_)), next(std::move(next_)),
        cost(std::move(cost_)), default_cost(std::move(default_cost_)),
        final_cost(std::move(final_cost_)) {
    const py::ssize_t N = default_cost.size();
    need(N >= 1 && final_cost.size() == N && offsets.size() == N + 1,
         "boosting: default_cost, final_cost (N,) and offsets (N + 1,) disagree");
    const py::ssize_t L = labels.size();
    need(cost.size() == L && next.size() == L && offsets.data()[0] == 0 &&
             offsets.data()[N] == L,
         "boosting: the transition arrays differ in length");
    for (py::ssize_t i = 0; i < L; ++i) {
      need(next.data()[i] >= 0 && next.data()[i] < N, "boosting: a transition leads nowhere");
    }
    view.num_nodes = static_cast<int32_t>(N);
    view.offsets = offsets.data();
    view.labels = labels.data();
    view.cost = cost.data();
    view.next = next.data();
    view.default_cost = default_cost.data();
    view.final_cost = final_cost.data();
  }
};

template <class T>
py::array_t<T> to_array(const std::vector<T>& v) {
  py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

py::tuple path_tuple(const BestPath& p) {
  return py::make_tuple(p.ok, p.reached_final, p.cost, to_array(p.labels), to_array(p.frames),
                        to_array(p.entered), to_array(p.words), to_array(p.word_steps));
}

void check_vocab(const Graph& graph, const DecoderOptions& opt, int64_t vocab) {
  need(vocab >= 1, "the vocabulary is empty");
  need(graph.max_ilabel <= vocab,
       "the graph's input labels reach token " + std::to_string(graph.max_ilabel - 1) +
           " but the log-probs have " + std::to_string(vocab) +
           " columns: the graph was built for another unit set");
  need(opt.blank >= 0 && opt.blank < vocab, "the blank id is outside the vocabulary");
}

// A stream's decoder: the graph (and boosting) it reads stay referenced.
struct Decoder {
  std::shared_ptr<Graph> graph;
  std::shared_ptr<Boosting> boost;
  DecoderOptions options;
  FasterDecoder dec;

  Decoder(std::shared_ptr<Graph> g, const DecoderOptions& opt, std::shared_ptr<Boosting> b)
      : graph(std::move(g)), boost(std::move(b)), options(opt),
        dec(graph->view, opt, boost ? &boost->view : nullptr) {
    dec.init();
  }
};

py::list decode(const std::shared_ptr<Graph>& graph, const F32& log_probs, const I64& lengths,
                const DecoderOptions& opt, const std::vector<std::shared_ptr<Boosting>>& boost,
                int num_threads) {
  need(log_probs.ndim() == 3, "log_probs must be (B, T, V)");
  const int64_t B = log_probs.shape(0), T = log_probs.shape(1), V = log_probs.shape(2);
  need(lengths.ndim() == 1 && lengths.shape(0) == B, "lengths must be (B,)");
  for (int64_t b = 0; b < B; ++b) {
    need(lengths.data()[b] >= 0 && lengths.data()[b] <= T,
         "lengths[" + std::to_string(b) + "] is outside [0, T]");
  }
  need(boost.empty() || static_cast<int64_t>(boost.size()) == B,
       "boosting must be empty or one per row");
  check_vocab(*graph, opt, V);
  std::vector<const BoostView*> views;
  for (const auto& b : boost) views.push_back(b ? &b->view : nullptr);
  std::vector<BestPath> rows;
  {
    py::gil_scoped_release release;
    rows = oasr::wfst::decode_batch(graph->view, opt, views, log_probs.data(), lengths.data(), B,
                                    T, V, num_threads);
  }
  py::list out(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) out[i] = path_tuple(rows[i]);
  return out;
}

// The device search (oasr/csrc/kernels/wfst/token_passing.cuh) run by the serial executor: what
// the CUDA kernel computes, stated on the host. Per row: (status, cost, the path's arcs).
py::list device_search(const std::shared_ptr<Graph>& graph, const F32& log_probs,
                       const I32& frames, const I32& num_frames, const DecoderOptions& opt,
                       int capacity, int arena, int path_capacity, int num_threads) {
  need(log_probs.ndim() == 3, "log_probs must be (B, T, V)");
  const int64_t B = log_probs.shape(0), T = log_probs.shape(1), V = log_probs.shape(2);
  need(frames.ndim() == 2 && frames.shape(0) == B && num_frames.ndim() == 1 &&
           num_frames.shape(0) == B,
       "frames must be (B, N) and num_frames (B,)");
  const int64_t N = frames.shape(1);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t n = num_frames.data()[b];
    need(n >= 0 && n <= N, "num_frames is outside [0, N]");
    for (int32_t i = 0; i < n; ++i) {
      const int32_t f = frames.data()[b * N + i];
      need(f >= 0 && f < T, "a frame index is outside [0, T)");
    }
  }
  need(capacity >= 1 && arena >= 1 && path_capacity >= 1, "buffer sizes must be >= 1");
  check_vocab(*graph, opt, V);
  const GraphView& v = graph->view;
  const oasr::wfst::Graph g{v.num_states, v.start, v.final_cost, v.emit_offsets, v.emit_ilabel,
                            v.emit_weight, v.emit_next, v.eps_offsets, v.eps_weight, v.eps_next};
  const oasr::wfst::Search search{opt.beam, opt.max_active, opt.min_active, opt.beam_delta,
                                  opt.acoustic_scale, opt.blank_penalty, opt.blank};
  std::vector<std::vector<int32_t>> paths(static_cast<std::size_t>(B));
  std::vector<int32_t> status(static_cast<std::size_t>(B));
  std::vector<double> costs(static_cast<std::size_t>(B));
  {
    py::gil_scoped_release release;
    oasr::ctc::for_each_row(B, num_threads, [&](int64_t b) {
      const std::size_t S = static_cast<std::size_t>(v.num_states);
      const std::size_t C = static_cast<std::size_t>(capacity);
      std::vector<uint64_t> key(S, oasr::wfst::kEmptyKey), bp(S, oasr::wfst::kNoBackpointer);
      std::vector<int32_t> slot(S, -1), stamp(S, 0), ints(8 * C + 1);
      std::vector<double> cost(2 * C);
      std::vector<float> fkeys(C);
      std::vector<int32_t> arena_prev(static_cast<std::size_t>(arena)),
          arena_arc(static_cast<std::size_t>(arena)), path(static_cast<std::size_t>(path_capacity));
      int32_t* p = ints.data();
      oasr::wfst::RowBuffers buf{key.data(), bp.data(), slot.data(), stamp.data(),
                                 {p, p + C}, {cost.data(), cost.data() + C},
                                 {p + 2 * C, p + 3 * C}, p + 4 * C, {p + 5 * C + 1, p + 6 * C + 1},
                                 p + 7 * C + 1, fkeys.data(), arena_prev.data(), arena_arc.data(),
                                 capacity, arena};
      int32_t length = 0, st = 0;
      double path_cost = 0.0;
      oasr::wfst::RowIO io{log_probs.data() + b * T * V, frames.data() + b * N,
                           num_frames.data()[b], static_cast<int32_t>(V), path.data(),
                           path_capacity, &length, &path_cost, &st};
      oasr::wfst::Shared sh{};
      const oasr::wfst::HostExec ex;
      oasr::wfst::RowSearch<oasr::wfst::HostExec>{g, search, buf, io, ex, sh}.run();
      path.resize(static_cast<std::size_t>(length));
      paths[static_cast<std::size_t>(b)] = std::move(path);
      status[static_cast<std::size_t>(b)] = st;
      costs[static_cast<std::size_t>(b)] = path_cost;
    });
  }
  py::list out(static_cast<std::size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const auto i = static_cast<std::size_t>(b);
    out[i] = py::make_tuple(status[i], costs[i], to_array(paths[i]));
  }
  return out;
}

}  // namespace

void bind_wfst(py::module_& m) {
  m.doc() = "Token-passing WFST decoding of CTC log-probs (oasr/csrc/host/wfst): Kaldi's FasterDecoder.";
  py::class_<DecoderOptions>(m, "DecoderOptions")
      .def(py::init<>())
      .def_readwrite("beam", &DecoderOptions::beam)
      .def_readwrite("max_active", &DecoderOptions::max_active)
      .def_readwrite("min_active", &DecoderOptions::min_active)
      .def_readwrite("beam_delta", &DecoderOptions::beam_delta)
      .def_readwrite("hash_ratio", &DecoderOptions::hash_ratio)
      .def_readwrite("acoustic_scale", &DecoderOptions::acoustic_scale)
      .def_readwrite("blank_penalty", &DecoderOptions::blank_penalty)
      .def_readwrite("blank", &DecoderOptions::blank)
      .def_readwrite("blank_skip_threshold", &DecoderOptions::blank_skip_threshold);
  py::class_<Graph, std::shared_ptr<Graph>>(m, "Graph")
      .def(py::init<int32_t, F32, I64, I32, I32, F32, I32, I64, I32, F32, I32>(),
           py::arg("start"), py::arg("final_cost"), py::arg("emit_offsets"),
           py::arg("emit_ilabel"), py::arg("emit_olabel"), py::arg("emit_weight"),
           py::arg("emit_next"), py::arg("eps_offsets"), py::arg("eps_olabel"),
           py::arg("eps_weight"), py::arg("eps_next"))
      .def_property_readonly("num_states", [](const Graph& g) { return g.view.num_states; })
      .def_property_readonly("max_ilabel", [](const Graph& g) { return g.max_ilabel; });
  py::class_<Boosting, std::shared_ptr<Boosting>>(m, "Boosting")
      .def(py::init<I64, I32, F32, I32, F32, F32>(), py::arg("offsets"), py::arg("labels"),
           py::arg("cost"), py::arg("next"), py::arg("default_cost"), py::arg("final_cost"));
  py::class_<Decoder>(m, "Decoder")
      .def(py::init<std::shared_ptr<Graph>, const DecoderOptions&, std::shared_ptr<Boosting>>(),
           py::arg("graph"), py::arg("options"), py::arg("boosting") = nullptr)
      .def("reset", [](Decoder& d) { d.dec.init(); })
      .def(
          "advance",
          [](Decoder& d, const F32& log_probs) {
            need(log_probs.ndim() == 2, "log_probs must be (T, V)");
            check_vocab(*d.graph, d.options, log_probs.shape(1));
            py::gil_scoped_release release;
            d.dec.advance(log_probs.data(), log_probs.shape(0), log_probs.shape(1));
          },
          py::arg("log_probs"))
      .def(
          "best_path",
          [](const Decoder& d, bool use_final_probs) {
            return path_tuple(d.dec.best_path(use_final_probs));
          },
          py::arg("use_final_probs") = true)
      .def_property_readonly("frames_decoded", [](const Decoder& d) { return d.dec.frames_decoded(); })
      .def_property_readonly("frames_seen", [](const Decoder& d) { return d.dec.frames_seen(); })
      .def_property_readonly("active_tokens", [](const Decoder& d) { return d.dec.active_tokens(); });
  m.def("decode", &decode, py::arg("graph"), py::arg("log_probs"), py::arg("lengths"),
        py::arg("options"), py::arg("boosting"), py::arg("num_threads") = 1,
        "Per row (reached_final... see oasr/graphs/search.py): the best path of each row's "
        "first lengths[b] frames.");
  m.def("device_search", &device_search, py::arg("graph"), py::arg("log_probs"),
        py::arg("frames"), py::arg("num_frames"), py::arg("options"), py::arg("capacity"),
        py::arg("arena"), py::arg("path_capacity"), py::arg("num_threads") = 1,
        "The CUDA search's statement on the host: per row (status, cost, path arcs last "
        "first).");
}
