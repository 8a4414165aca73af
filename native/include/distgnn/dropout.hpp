// Dropout keyed by (seed, epoch, layer, global vertex id, column) through a counter-based hash, so
// every replica of a vertex, on any rank, draws the same mask without communication.
//
//   key  = mix(mix(mix(seed) + epoch) + layer)
//   h    = mix(mix(key + gid) + column)              (all arithmetic modulo 2^64)
//   u    = (h >> 40) / 2^24                          (uniform on [0, 1), 24 bits)
//   keep = u >= p;  mask = keep / (1 - p)
//
// mix is SplitMix64's finaliser (Steele, Lea, Flood 2014). tests/ops_reference.py repeats this in
// numpy; the two must stay identical.
#pragma once
#include <cstdint>

#include "distgnn/common.hpp"

namespace distgnn::dropout {

inline uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline uint64_t layer_key(uint64_t seed, uint64_t epoch, uint64_t layer) {
  return mix(mix(mix(seed) + epoch) + layer);
}

// Keep threshold on the 24-bit draw: keep when (h >> 40) >= threshold.
inline uint64_t threshold(double p) {
  if (p <= 0.0) return 0;
  if (p >= 1.0) return uint64_t(1) << 24;
  return static_cast<uint64_t>(p * double(1 << 24) + 0.5);
}

// out[i, c] = x[i, c] * mask(gids[i], c), or the mask itself when x is null. Rows of width F.
template <typename T, typename G>
void apply(const T* x, const G* gids, int64_t n, int64_t F, double p, uint64_t seed,
           uint64_t epoch, uint64_t layer, T* out, int threads) {
  threads = resolve_threads(threads);
  const uint64_t key = layer_key(seed, epoch, layer);
  const uint64_t thr = threshold(p);
  const T scale = thr >= (uint64_t(1) << 24) ? T(0) : T(1.0 / (1.0 - double(thr) / double(1 << 24)));
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t kv = mix(key + static_cast<uint64_t>(static_cast<int64_t>(gids[i])));
    T* __restrict o = out + i * F;
    const T* __restrict xi = x != nullptr ? x + i * F : nullptr;
    for (int64_t c = 0; c < F; ++c) {
      const uint64_t h = mix(kv + static_cast<uint64_t>(c));
      const T m = (h >> 40) >= thr ? scale : T(0);
      o[c] = xi != nullptr ? xi[c] * m : m;
    }
  }
}

}  // namespace distgnn::dropout
