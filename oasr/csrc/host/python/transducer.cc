// oasr._C.transducer: the greedy decode of oasr/csrc/kernels/transducer/greedy_decode.cuh on the
// host executor, rows spread over threads (fp32).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ctc/parallel_impl.h"
#include "transducer/greedy_decode.cuh"

namespace py = pybind11;
using oasr::transducer::GreedyArgs;
using oasr::transducer::HostExec;
using oasr::transducer::RowDecoder;

namespace {

using F32 = py::array_t<float, py::array::c_style | py::array::forcecast>;
using I64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

const float* data_or_null(const std::optional<F32>& a) { return a ? a->data() : nullptr; }

void need(bool ok, const std::string& what) {
  if (!ok) throw py::value_error("transducer greedy_decode: " + what);
}

py::tuple greedy_decode(const F32& enc, const I64& lengths, const F32& embedding,
                        const std::optional<F32>& conv, const F32& dec_w,
                        const std::optional<F32>& dec_b, const F32& out_w,
                        const std::optional<F32>& out_b, int groups, int blank, int unk,
                        int max_sym, bool relu, int cap, int num_threads) {
  need(enc.ndim() == 3, "enc must be (B, T, J)");
  const int B = static_cast<int>(enc.shape(0)), T = static_cast<int>(enc.shape(1));
  const int J = static_cast<int>(enc.shape(2));
  need(embedding.ndim() == 2, "embedding must be (V, D)");
  const int D = static_cast<int>(embedding.shape(1));
  need(out_w.ndim() == 2 && out_w.shape(1) == J, "out_w must be (V, J)");
  const int V = static_cast<int>(out_w.shape(0));
  need(dec_w.ndim() == 2 && dec_w.shape(0) == J && dec_w.shape(1) == D, "dec_w must be (J, D)");
  need(lengths.ndim() == 1 && lengths.shape(0) == B, "lengths must be (B,)");
  need(!dec_b || (dec_b->ndim() == 1 && dec_b->shape(0) == J), "dec_b must be (J,)");
  need(!out_b || (out_b->ndim() == 1 && out_b->shape(0) == V), "out_b must be (V,)");
  need(groups >= 1 && D % groups == 0, "groups must divide D");
  int C = 1;
  if (conv) {
    need(conv->ndim() == 3 && conv->shape(0) == D && conv->shape(1) == D / groups,
         "conv must be (D, D / groups, C)");
    C = static_cast<int>(conv->shape(2));
  }
  need(C >= 1 && C <= oasr::transducer::kMaxContext, "the label window must be 1..8");
  need(max_sym >= 1 && cap >= 0, "max_sym >= 1 and cap >= 0");
  need(blank >= 0 && blank < V && unk >= 0 && unk < V && embedding.shape(0) == V,
       "blank and unk must be labels of the vocabulary");

  py::array_t<int32_t> tokens({B, cap}), frames({B, cap}), counts(B);
  py::array_t<float> probs({B, cap}), scores(B);
  GreedyArgs<float> a{enc.data(), lengths.data(), embedding.data(),
                      conv ? conv->data() : nullptr, dec_w.data(), data_or_null(dec_b),
                      out_w.data(), data_or_null(out_b), B, T, J, D, V, C, groups, blank, unk,
                      max_sym, relu ? 1 : 0, cap, tokens.mutable_data(), frames.mutable_data(),
                      probs.mutable_data(), counts.mutable_data(), scores.mutable_data()};
  {
    py::gil_scoped_release release;
    const HostExec ex;
    oasr::ctc::for_each_row(B, num_threads, [&](int64_t b) {
      std::vector<float> scratch(oasr::transducer::scratch_floats(J, D, V));
      int window[oasr::transducer::kMaxContext];
      float* h = scratch.data();
      RowDecoder<float, HostExec>{a,    ex,           static_cast<int>(b), h, h + J,
                                  h + J + V, h + 2 * J + V, window}
          .run();
    });
  }
  return py::make_tuple(tokens, frames, probs, counts, scores);
}

}  // namespace

void bind_transducer(py::module_& m) {
  m.def("greedy_decode", &greedy_decode, py::arg("enc"), py::arg("lengths"),
        py::arg("embedding"), py::arg("conv"), py::arg("dec_w"), py::arg("dec_b"),
        py::arg("out_w"), py::arg("out_b"), py::arg("groups"), py::arg("blank"), py::arg("unk"),
        py::arg("max_sym"), py::arg("relu"), py::arg("cap"), py::arg("num_threads") = 1,
        "Transducer greedy decode of every row (the host executor of greedy_decode.cuh): "
        "-> (tokens, frames, probs (B, cap), counts, scores (B,)); counts[b] = cap + 1 when "
        "row b emitted more than cap labels.");
}
