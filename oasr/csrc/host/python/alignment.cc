// oasr._C.alignment: thin pybind11 bindings over oasr/csrc/host/alignment.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <string>
#include <vector>

#include "alignment/dtw.h"
#include "alignment/pauses.h"
#include "alignment/word_timings.h"

namespace py = pybind11;
using oasr::alignment::RowTimings;

namespace {

using F64 = py::array_t<double, py::array::c_style | py::array::forcecast>;
using F32 = py::array_t<float, py::array::c_style | py::array::forcecast>;

py::tuple word_timings(const std::vector<std::string>& pieces, const F64& starts, const F64& ends,
                       const F64& probs, double seconds_per_frame, double offset) {
  const auto n = static_cast<std::size_t>(pieces.size());
  if (starts.ndim() != 1 || ends.ndim() != 1 || probs.ndim() != 1 ||
      static_cast<std::size_t>(starts.shape(0)) != n ||
      static_cast<std::size_t>(ends.shape(0)) != n ||
      static_cast<std::size_t>(probs.shape(0)) != n) {
    throw py::value_error("word_timings: starts, ends and probs need one entry per piece");
  }
  RowTimings row;
  {
    py::gil_scoped_release release;
    row = oasr::alignment::word_timings(pieces, starts.data(), ends.data(), probs.data(), n,
                                        seconds_per_frame, offset);
  }
  py::list words(row.words.size());
  for (std::size_t i = 0; i < row.words.size(); ++i) {
    const auto& w = row.words[i];
    words[i] = py::make_tuple(py::str(w.text), w.start, w.end, w.confidence);
  }
  py::object conf = row.has_confidence ? py::object(py::float_(row.confidence)) : py::none();
  return py::make_tuple(words, py::cast(row.token_starts), conf);
}

py::array_t<uint8_t> classify(const py::array_t<uint32_t, py::array::c_style | py::array::forcecast>&
                                  cps) {
  py::array_t<uint8_t> out(cps.size());
  auto* o = out.mutable_data();
  const auto* c = cps.data();
  for (py::ssize_t i = 0; i < cps.size(); ++i) o[i] = oasr::alignment::classify(c[i]);
  return out;
}

py::tuple dtw(const F32& cost) {
  if (cost.ndim() != 2) throw py::value_error("dtw: cost must be 2-D (tokens, frames)");
  std::vector<int32_t> ti, fi;
  {
    py::gil_scoped_release release;
    oasr::alignment::dtw(cost.data(), cost.shape(0), cost.shape(1), ti, fi);
  }
  py::array_t<int32_t> a(ti.size()), b(fi.size());
  std::copy(ti.begin(), ti.end(), a.mutable_data());
  std::copy(fi.begin(), fi.end(), b.mutable_data());
  return py::make_tuple(a, b);
}

using I64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

py::array_t<int32_t> dtw_starts(const F32& cost, const I64& rows, const I64& frames) {
  if (cost.ndim() != 3) {
    throw py::value_error("dtw_starts: cost must be 3-D (batch, tokens, frames)");
  }
  const int64_t batch = cost.shape(0);
  if (rows.ndim() != 1 || frames.ndim() != 1 || rows.shape(0) != batch ||
      frames.shape(0) != batch) {
    throw py::value_error("dtw_starts: rows and frames must be 1-D, one entry per matrix");
  }
  py::array_t<int32_t> out({batch, static_cast<int64_t>(cost.shape(1))});
  {
    py::gil_scoped_release release;
    oasr::alignment::dtw_starts_batch(cost.data(), batch, cost.shape(1), cost.shape(2),
                                      rows.data(), frames.data(), out.mutable_data());
  }
  return out;
}

py::tuple snap_to_pauses(const F64& starts, const F64& ends,
                         const py::array_t<uint8_t, py::array::c_style | py::array::forcecast>&
                             joins_previous,
                         const F64& pause_starts, const F64& pause_ends) {
  if (starts.ndim() != 1 || ends.ndim() != 1 || joins_previous.ndim() != 1 ||
      starts.shape(0) != ends.shape(0) || joins_previous.shape(0) != starts.shape(0) ||
      pause_starts.ndim() != 1 || pause_ends.ndim() != 1 ||
      pause_starts.shape(0) != pause_ends.shape(0)) {
    throw py::value_error(
        "snap_to_pauses: starts/ends/joins_previous and pause_starts/pause_ends must pair up");
  }
  py::array_t<double> s(starts.shape(0)), e(ends.shape(0));
  std::copy(starts.data(), starts.data() + starts.shape(0), s.mutable_data());
  std::copy(ends.data(), ends.data() + ends.shape(0), e.mutable_data());
  oasr::alignment::snap_to_pauses(s.mutable_data(), e.mutable_data(), joins_previous.data(),
                                  static_cast<std::size_t>(s.shape(0)), pause_starts.data(),
                                  pause_ends.data(), static_cast<std::size_t>(pause_starts.shape(0)));
  return py::make_tuple(s, e);
}

}  // namespace

void bind_alignment(py::module_& m) {
  m.doc() = "Word timings and DTW (oasr/csrc/host/alignment).";
  m.def("word_timings", &word_timings, py::arg("pieces"), py::arg("starts"), py::arg("ends"),
        py::arg("probs"), py::arg("seconds_per_frame"), py::arg("offset") = 0.0,
        "Words cut from the concatenated pieces -> (words [(word, start, end, confidence)], "
        "token start times, utterance confidence or None).");
  m.def("classify", &classify, py::arg("codepoints"),
        "Per code point: 0 other, 1 whitespace (str.isspace), 2 space-less script.");
  m.def("snap_to_pauses", &snap_to_pauses, py::arg("starts"), py::arg("ends"),
        py::arg("joins_previous"), py::arg("pause_starts"), py::arg("pause_ends"),
        "Token spans moved off the pauses -> (starts, ends), new arrays.");
  m.def("dtw", &dtw, py::arg("cost"),
        "Monotone minimum-cost path through a (tokens, frames) matrix -> (token idx, frame idx).");
  m.def("dtw_starts", &dtw_starts, py::arg("cost"), py::arg("rows"), py::arg("frames"),
        "The DTW path of each ragged matrix of a padded (batch, tokens, frames) block (row b: its "
        "top-left (rows[b], frames[b]) corner) -> (batch, tokens) int32: the frame where the "
        "path first reaches each token row, -1 past rows[b].");
}
