// The oasr._C extension: each area of csrc/ binds itself as a submodule.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void bind_alignment(py::module_& m);
void bind_ctc(py::module_& m);
void bind_transducer(py::module_& m);
void bind_wfst(py::module_& m);

PYBIND11_MODULE(_C, m) {
  m.doc() = "OASR's native CPU code (csrc/).";
  auto alignment = m.def_submodule("alignment");
  bind_alignment(alignment);
  auto ctc = m.def_submodule("ctc");
  bind_ctc(ctc);
  auto transducer = m.def_submodule("transducer");
  bind_transducer(transducer);
  auto wfst = m.def_submodule("wfst");
  bind_wfst(wfst);
}
