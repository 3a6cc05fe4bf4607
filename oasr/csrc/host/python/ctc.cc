// oasr._C.ctc: thin pybind11 bindings over oasr/csrc/host/ctc (CPU CTC decoders).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <utility>
#include <vector>

#include "ctc/greedy.h"
#include "ctc/prefix_beam.h"

namespace py = pybind11;
using oasr::ctc::Hypothesis;

namespace {

using F32 = py::array_t<float, py::array::c_style | py::array::forcecast>;
using I64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

struct Batch {
  const float* log_probs;
  const int64_t* lengths;
  int64_t batch, frames, vocab;
};

Batch check(const F32& log_probs, const I64& lengths, int64_t blank) {
  if (log_probs.ndim() != 3) throw py::value_error("ctc: log_probs must be (B, T, V)");
  const int64_t b = log_probs.shape(0), t = log_probs.shape(1), v = log_probs.shape(2);
  if (lengths.ndim() != 1 || lengths.shape(0) != b) {
    throw py::value_error("ctc: lengths must be (B,), one per row of log_probs");
  }
  if (v < 1) throw py::value_error("ctc: the vocabulary is empty");
  if (blank < 0 || blank >= v) {
    throw py::value_error("ctc: blank id " + std::to_string(blank) + " is outside [0, " +
                          std::to_string(v) + ")");
  }
  const int64_t* lens = lengths.data();
  for (int64_t i = 0; i < b; ++i) {
    if (lens[i] < 0 || lens[i] > t) {
      throw py::value_error("ctc: lengths[" + std::to_string(i) + "] = " +
                            std::to_string(lens[i]) + " is outside [0, T=" + std::to_string(t) +
                            "]");
    }
  }
  return {log_probs.data(), lens, b, t, v};
}

template <class T>
py::array_t<T> to_array(const std::vector<T>& v) {
  py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

py::list greedy(const F32& log_probs, const I64& lengths, int64_t blank, int num_threads) {
  const Batch in = check(log_probs, lengths, blank);
  std::vector<Hypothesis> rows;
  {
    py::gil_scoped_release release;
    rows = oasr::ctc::greedy(in.log_probs, in.lengths, in.batch, in.frames, in.vocab,
                             static_cast<int32_t>(blank), num_threads);
  }
  py::list out(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) out[i] = py::cast(std::move(rows[i]));
  return out;
}

py::list prefix_beam(const F32& log_probs, const I64& lengths, int64_t blank, int beam_size,
                     double blank_skip_threshold, int nbest, int num_threads) {
  const Batch in = check(log_probs, lengths, blank);
  if (beam_size < 1) throw py::value_error("ctc: beam_size must be >= 1");
  if (nbest < 1) throw py::value_error("ctc: nbest must be >= 1");
  oasr::ctc::PrefixBeamOptions opt;
  opt.blank = static_cast<int32_t>(blank);
  opt.beam_size = beam_size;
  opt.blank_skip_threshold = blank_skip_threshold;
  opt.nbest = nbest;
  std::vector<std::vector<Hypothesis>> rows;
  {
    py::gil_scoped_release release;
    rows = oasr::ctc::prefix_beam(in.log_probs, in.lengths, in.batch, in.frames, in.vocab, opt,
                                  num_threads);
  }
  py::list out(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    py::list hyps(rows[i].size());
    for (std::size_t j = 0; j < rows[i].size(); ++j) hyps[j] = py::cast(std::move(rows[i][j]));
    out[i] = hyps;
  }
  return out;
}

}  // namespace

void bind_ctc(py::module_& m) {
  m.doc() = "CPU CTC decoders (oasr/csrc/host/ctc): greedy and WeNet-style prefix beam search.";
  py::class_<Hypothesis>(m, "Hypothesis")
      .def(py::init<>(), "An empty hypothesis (no tokens, score 0).")
      .def_property_readonly("tokens", [](const Hypothesis& h) { return to_array(h.tokens); },
                             "(N,) int32 token ids")
      .def_property_readonly("frames", [](const Hypothesis& h) { return to_array(h.frames); },
                             "(N,) int32 emitting frame per token (first frame of its run on "
                             "the hypothesis' best path)")
      .def_property_readonly("probs", [](const Hypothesis& h) { return to_array(h.probs); },
                             "(N,) float64 posterior per token: max(p[t], p[t+1])")
      .def_readonly("score", &Hypothesis::score, "log-probability")
      .def("__len__", [](const Hypothesis& h) { return h.tokens.size(); })
      .def("__repr__", [](const Hypothesis& h) {
        return "<ctc.Hypothesis tokens=" + std::to_string(h.tokens.size()) +
               " score=" + std::to_string(h.score) + ">";
      });
  m.def("greedy", &greedy, py::arg("log_probs"), py::arg("lengths"), py::arg("blank") = 0,
        py::arg("num_threads") = 1,
        "Best-path decoding of log_probs (B, T, V) float32 over lengths (B,) -> one Hypothesis "
        "per row (score: the best path's log-probability).");
  m.def("prefix_beam", &prefix_beam, py::arg("log_probs"), py::arg("lengths"),
        py::arg("blank") = 0, py::arg("beam_size") = 10, py::arg("blank_skip_threshold") = 1.0,
        py::arg("nbest") = 1, py::arg("num_threads") = 1,
        "CTC prefix beam search (WeNet semantics; oasr/csrc/host/ctc/prefix_beam.h) of log_probs "
        "(B, T, V) float32 over lengths (B,) -> per row, up to nbest Hypothesis, best first "
        "(score: logaddexp(pb, pnb)). Frames whose blank probability exceeds "
        "blank_skip_threshold are skipped (>= 1: never).");
}
