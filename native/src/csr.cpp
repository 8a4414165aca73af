// Bindings for CSR construction (distgnn/csr.hpp).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <stdexcept>

#include "bindings.hpp"
#include "distgnn/csr.hpp"
#include "distgnn/search.hpp"

namespace nb = nanobind;

namespace {

template <typename Index>
int64_t count_by_row(Vec<const Index> row, Vec<int64_t> counts) {
  nb::gil_scoped_release release;
  return distgnn::csr::count_by_row(row.data(), static_cast<int64_t>(row.shape(0)), counts.data(),
                                    static_cast<int64_t>(counts.shape(0)));
}

template <typename Index, typename Out>
int64_t scatter(Vec<const Index> row, Vec<const Index> col, Vec<int64_t> cursor, Vec<Out> indices,
                int64_t n_cols) {
  if (row.shape(0) != col.shape(0)) throw std::invalid_argument("row and col differ in length");
  nb::gil_scoped_release release;
  return distgnn::csr::scatter(row.data(), col.data(), static_cast<int64_t>(row.shape(0)),
                               cursor.data(), indices.data(), n_cols);
}

template <typename Out>
void sort_rows(Vec<const int64_t> indptr, Vec<Out> indices, int threads) {
  nb::gil_scoped_release release;
  distgnn::csr::sort_rows(indptr.data(), static_cast<int64_t>(indptr.shape(0)) - 1, indices.data(),
                          threads);
}

template <typename Index>
void first_touch(Vec<const int64_t> indptr, Vec<const Index> indices, Vec<int64_t> first) {
  const int64_t n = static_cast<int64_t>(indptr.shape(0)) - 1;
  if (static_cast<int64_t>(first.shape(0)) != n) throw std::invalid_argument("first must have n entries");
  const int64_t m = indptr.data()[n];
  if (m > static_cast<int64_t>(indices.shape(0))) throw std::invalid_argument("indptr ends past indices");
  for (int64_t e = 0; e < m; ++e)
    if (indices.data()[e] < 0 || indices.data()[e] >= n)
      throw std::invalid_argument("indices must lie in [0, n)");
  nb::gil_scoped_release release;
  distgnn::csr::first_touch(indptr.data(), indices.data(), n, first.data());
}

template <typename Out>
void transpose(Vec<const int64_t> indptr, Vec<const Out> indices, int64_t n_cols,
               Vec<int64_t> t_indptr, Vec<Out> t_indices) {
  const int64_t n_rows = static_cast<int64_t>(indptr.shape(0)) - 1;
  if (static_cast<int64_t>(t_indptr.shape(0)) != n_cols + 1)
    throw std::invalid_argument("t_indptr must have n_cols + 1 entries");
  if (t_indices.shape(0) != indices.shape(0))
    throw std::invalid_argument("t_indices must have as many entries as indices");
  nb::gil_scoped_release release;
  distgnn::csr::transpose(indptr.data(), indices.data(), n_rows, n_cols, t_indptr.data(),
                          t_indices.data());
}

void bucket_bounds(Vec<const double> a, double scale, Vec<int64_t> bounds) {
  if (bounds.shape(0) < 2) throw std::invalid_argument("bounds must have buckets + 1 >= 2 entries");
  if (!(scale > 0)) throw std::invalid_argument("scale must be positive");
  nb::gil_scoped_release release;
  distgnn::search::bucket_bounds(a.data(), static_cast<int64_t>(a.shape(0)), scale,
                                 static_cast<int64_t>(bounds.shape(0)) - 1, bounds.data());
}

void search_right(Vec<const double> a, Vec<const int64_t> bounds, double scale, Vec<const double> x,
                  Vec<int64_t> out, int threads) {
  if (bounds.shape(0) < 2) throw std::invalid_argument("bounds must have buckets + 1 >= 2 entries");
  if (out.shape(0) != x.shape(0)) throw std::invalid_argument("out must match x");
  nb::gil_scoped_release release;
  distgnn::search::search_right(a.data(), static_cast<int64_t>(a.shape(0)), bounds.data(),
                                static_cast<int64_t>(bounds.shape(0)) - 1, scale, x.data(),
                                static_cast<int64_t>(x.shape(0)), out.data(),
                                threads > 0 ? threads : omp_get_max_threads());
}

}  // namespace

void register_csr(nb::module_& m) {
  m.def("search_bucket_bounds", &bucket_bounds,
        "search_bucket_bounds(a, scale, bounds): bounds[b] = count of a's elements <= b / scale "
        "(a ascending float64), the table search_right narrows its searches with.");
  m.def("search_right", &search_right,
        "search_right(a, bounds, scale, x, out, threads): out = numpy.searchsorted(a, x, "
        "side='right'), exactly, each search narrowed to the bucket floor(x * scale).");
  const char* count_doc =
      "count_by_row(row, counts) -> int: counts[row[i]] += 1; returns the first out-of-range "
      "position, or -1 (then counts is updated).";
  m.def("csr_count_by_row", &count_by_row<int32_t>, count_doc);
  m.def("csr_count_by_row", &count_by_row<int64_t>, count_doc);
  const char* scatter_doc =
      "scatter(row, col, cursor, indices, n_cols) -> int: indices[cursor[row[i]]++] = col[i]; "
      "returns the first position whose col is outside [0, n_cols), or -1.";
  m.def("csr_scatter", &scatter<int32_t, int32_t>, scatter_doc);
  m.def("csr_scatter", &scatter<int64_t, int32_t>, scatter_doc);
  m.def("csr_scatter", &scatter<int32_t, int64_t>, scatter_doc);
  m.def("csr_scatter", &scatter<int64_t, int64_t>, scatter_doc);
  m.def("csr_sort_rows", &sort_rows<int32_t>, "Sort each row's column ids ascending.");
  m.def("csr_sort_rows", &sort_rows<int64_t>);
  m.def("csr_transpose", &transpose<int32_t>,
        "transpose(indptr, indices, n_cols, t_indptr, t_indices): fill the transposed CSR.");
  m.def("csr_transpose", &transpose<int64_t>);
  m.def("csr_first_touch", &first_touch<int32_t>,
        "first_touch(indptr, indices, first): first[v] = position of v's first appearance in a "
        "row-major pass over the square CSR (row v's sources, then v).");
  m.def("csr_first_touch", &first_touch<int64_t>);
}
