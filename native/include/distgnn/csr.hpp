// CSR construction from edge chunks, by destination: row v lists the in-neighbours of v.
//
// The builder is two-pass so callers can stream edges that never sit in memory at once:
//   1. count_by_row over every chunk of row ids (destinations) -> counts[N]
//   2. exclusive prefix sum -> indptr[N+1]; cursor = indptr[0:N]
//   3. scatter over every chunk again -> indices
//   4. sort_rows so the result does not depend on chunk order.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "distgnn/common.hpp"

namespace distgnn::csr {

// Adds 1 to counts[row[i]] for each i. Returns the position of the first row id outside [0, n),
// or -1 when every id is in range (then counts is updated).
template <typename Index>
int64_t count_by_row(const Index* row, int64_t m, int64_t* counts, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = static_cast<int64_t>(row[i]);
    if (r < 0 || r >= n) return i;
  }
  for (int64_t i = 0; i < m; ++i) counts[row[i]] += 1;
  return -1;
}

// indices[cursor[row[i]]++] = col[i]. Returns the position of the first col id outside [0, n_cols)
// or -1. Rows must already be validated by count_by_row.
template <typename Index, typename Out>
int64_t scatter(const Index* row, const Index* col, int64_t m, int64_t* cursor, Out* indices,
                int64_t n_cols) {
  for (int64_t i = 0; i < m; ++i) {
    const int64_t c = static_cast<int64_t>(col[i]);
    if (c < 0 || c >= n_cols) return i;
  }
  for (int64_t i = 0; i < m; ++i) indices[cursor[row[i]]++] = static_cast<Out>(col[i]);
  return -1;
}

// Sorts every row's column ids ascending (in parallel over rows).
template <typename Out>
void sort_rows(const int64_t* indptr, int64_t n, Out* indices, int threads) {
  threads = resolve_threads(threads);
#pragma omp parallel for schedule(dynamic, 1024) num_threads(threads)
  for (int64_t v = 0; v < n; ++v) std::sort(indices + indptr[v], indices + indptr[v + 1]);
}

// The transpose of a CSR (rows -> columns): t_indptr[n_cols+1], t_indices[m].
// Within each transposed row the entries come out in ascending order of the original row.
template <typename Out>
void transpose(const int64_t* indptr, const Out* indices, int64_t n_rows, int64_t n_cols,
               int64_t* t_indptr, Out* t_indices) {
  std::fill(t_indptr, t_indptr + n_cols + 1, 0);
  const int64_t m = indptr[n_rows];
  for (int64_t e = 0; e < m; ++e) t_indptr[static_cast<int64_t>(indices[e]) + 1] += 1;
  for (int64_t c = 0; c < n_cols; ++c) t_indptr[c + 1] += t_indptr[c];
  std::vector<int64_t> cursor(t_indptr, t_indptr + n_cols);
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t e = indptr[r]; e < indptr[r + 1]; ++e)
      t_indices[cursor[static_cast<int64_t>(indices[e])]++] = static_cast<Out>(r);
}

// Position of each vertex's first appearance in a row-major pass over a square CSR (row v's
// sources in order, then v itself): first[v] in [0, m + n). One pass, O(m + n).
template <typename Index>
void first_touch(const int64_t* indptr, const Index* indices, int64_t n, int64_t* first) {
  std::fill(first, first + n, int64_t(-1));
  int64_t position = 0;
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e, ++position) {
      const int64_t u = static_cast<int64_t>(indices[e]);
      if (first[u] < 0) first[u] = position;
    }
    if (first[v] < 0) first[v] = position;
    ++position;
  }
}

}  // namespace distgnn::csr
