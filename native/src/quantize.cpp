// Bindings for the wire codec (distgnn/quantize.hpp): float32 rows to packed low-bit rows with a
// scale and a low value per group of columns, and back. Arrays arrive zero-copy and `noconvert`;
// shapes are checked here. The GIL is released while a kernel runs.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <optional>
#include <stdexcept>

#include "bindings.hpp"
#include "distgnn/quantize.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

namespace q = distgnn::quantize;

void check_layout(int64_t F, int bits, int64_t group) {
  if (bits != 2 && bits != 4 && bits != 8) throw std::invalid_argument("bits must be 2, 4 or 8");
  if (F < 1) throw std::invalid_argument("rows must have at least one column");
  if (group < 0) throw std::invalid_argument("group must be >= 0 (0: the whole row)");
}

// The packed rows of n float32 rows of F columns: [n, quantize_row_bytes(F, bits, group)].
void check_packed(int64_t packed_rows, int64_t packed_bytes, int64_t n, int64_t F, int bits,
                  int64_t group) {
  check_layout(F, bits, group);
  if (packed_rows != n || packed_bytes != q::row_bytes(F, bits, group))
    throw std::invalid_argument("packed must have shape [rows, quantize_row_bytes(columns, bits, group)]");
}

void encode(Mat<const float> x, Mat<uint8_t> packed, int bits, int64_t group, bool stochastic,
            uint64_t key, int threads, std::optional<Vec<const int64_t>> index) {
  const int64_t rows = static_cast<int64_t>(x.shape(0)), F = static_cast<int64_t>(x.shape(1));
  const int64_t n = index ? static_cast<int64_t>(index->shape(0)) : rows;
  check_packed(static_cast<int64_t>(packed.shape(0)), static_cast<int64_t>(packed.shape(1)), n, F,
               bits, group);
  const int64_t* ids = index ? index->data() : nullptr;
  for (int64_t i = 0; ids != nullptr && i < n; ++i)
    if (ids[i] < 0 || ids[i] >= rows) throw std::out_of_range("index: every row must be in [0, rows of x)");
  nb::gil_scoped_release release;
  q::encode(x.data(), n, F, bits, group, stochastic, key, packed.data(), threads, ids);
}

void decode(Mat<const uint8_t> packed, Mat<float> y, int bits, int64_t group, int threads,
            std::optional<Vec<const int64_t>> index, bool add) {
  const int64_t rows = static_cast<int64_t>(y.shape(0)), F = static_cast<int64_t>(y.shape(1));
  const int64_t n = index ? static_cast<int64_t>(index->shape(0)) : rows;
  check_packed(static_cast<int64_t>(packed.shape(0)), static_cast<int64_t>(packed.shape(1)), n, F,
               bits, group);
  if (!index) {
    if (add) throw std::invalid_argument("add needs an index");
    nb::gil_scoped_release release;
    q::decode(packed.data(), n, F, bits, group, y.data(), threads);
    return;
  }
  const int64_t* ids = index->data();
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= rows) throw std::out_of_range("index: every row must be in [0, rows of y)");
  nb::gil_scoped_release release;
  q::decode_into(packed.data(), n, F, bits, group, y.data(), ids, add, threads);
}

}  // namespace

void register_quantize(nb::module_& m) {
  m.def("quantize_row_bytes", [](int64_t F, int bits, int64_t group) {
    check_layout(F, bits, group);
    return q::row_bytes(F, bits, group);
  }, "width"_a, "bits"_a, "group"_a = 0,
        "quantize_row_bytes(width, bits, group=0): bytes of one encoded row (scales, codes, padding).");
  m.def("quantize_encode", &encode, "x"_a.noconvert(), "packed"_a.noconvert(), "bits"_a,
        "group"_a = 0, "stochastic"_a = false, "key"_a = 0, "threads"_a = 0,
        "index"_a.noconvert() = nb::none(),
        "quantize_encode(x, packed, bits, group=0, stochastic=False, key=0, threads=0, index=None): "
        "float32 rows [n, F] to packed rows (distgnn/quantize.hpp); with index (int64 [m]) "
        "packed row i is x row index[i], a gather fused into the encode.");
  m.def("quantize_decode", &decode, "packed"_a.noconvert(), "y"_a.noconvert(), "bits"_a,
        "group"_a = 0, "threads"_a = 0, "index"_a.noconvert() = nb::none(), "add"_a = false,
        "quantize_decode(packed, y, bits, group=0, threads=0, index=None, add=False): packed rows "
        "to float32 rows [n, F]; with index (int64 [n]) packed row i lands in row index[i] of the "
        "table y, assigned (distinct rows) or with add added in the order of index (a scatter or "
        "index_add_ fused into the decode).");
}
