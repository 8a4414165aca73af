#include <nanobind/nanobind.h>

#include "bindings.hpp"
#include "distgnn/common.hpp"

namespace nb = nanobind;

NB_MODULE(_native, m) {
  m.doc() = "distgnn native kernels (C++17, OpenMP)";
  m.def("openmp_enabled", []() {
#ifdef _OPENMP
    return true;
#else
    return false;
#endif
  }, "True when the module was compiled with OpenMP.");
  m.def("max_threads", &distgnn::max_threads, "OpenMP's default thread count.");
  m.def("native_arch", []() {
#ifdef DISTGNN_NATIVE_ARCH
    return true;
#else
    return false;
#endif
  }, "True when built with -march=native (DISTGNN_NATIVE_ARCH=ON).");
  register_csr(m);
  register_aggregate(m);
  register_partition(m);
  register_attention(m);
  register_quantize(m);
}
