// Searches in a long sorted array, as numpy's searchsorted(a, x, side="right") answers them, but
// for many random keys at once: a table of bucket bounds narrows each binary search to the few
// elements of one bucket, so a search costs about two cache misses instead of one per level
// (distgnn/data/synthetic.py samples a twin's 1.6 billion endpoints this way).
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace distgnn::search {

// bounds[b] = number of elements of a[0, n) that are <= b / scale, for b in [0, buckets]: the
// first index a key of bucket b (floor(x * scale) == b) can get. a ascending; one merge pass.
inline void bucket_bounds(const double* a, int64_t n, double scale, int64_t buckets, int64_t* bounds) {
  int64_t i = 0;
  for (int64_t b = 0; b <= buckets; ++b) {
    const double edge = static_cast<double>(b) / scale;
    while (i < n && a[i] <= edge) ++i;
    bounds[b] = i;
  }
}

// out[j] = the index upper_bound(a, x[j]) (first element > x[j]; n if none), exactly as a full
// binary search gives it: the bucket's range is used only after checking that the answer lies in
// it (floating-point rounding at a bucket's edge falls back to the whole array).
template <typename Out>
void search_right(const double* a, int64_t n, const int64_t* bounds, int64_t buckets, double scale,
                  const double* x, int64_t m, Out* out, int threads) {
#pragma omp parallel for schedule(static, 65536) num_threads(threads)
  for (int64_t j = 0; j < m; ++j) {
    const double key = x[j];
    double slot = key * scale;
    int64_t b = slot >= 0.0 ? static_cast<int64_t>(std::min(slot, static_cast<double>(buckets - 1))) : 0;
    int64_t lo = bounds[b], hi = bounds[b + 1];
    if (!((lo == 0 || a[lo - 1] <= key) && (hi == n || key < a[hi]))) {
      lo = 0;
      hi = n;
    }
    out[j] = static_cast<Out>(std::upper_bound(a + lo, a + hi, key) - a);
  }
}

}  // namespace distgnn::search
